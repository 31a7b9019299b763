"""The training loader: prepared token files to (inputs, targets) batches."""

from __future__ import annotations

import itertools
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.data.errors import DataError
from harness.data.packing import array_reader
from harness.data.tokens import TokenFile, write_token_dir
from harness.loader import packed_batches, pair_batches, prefetched

BOS = 7


def token_file(docs: list[list[int]]) -> TokenFile:
    """An in-memory token file: each document gets a leading BOS, as prepare writes them."""
    flat = [token for doc in docs for token in [BOS, *doc]]
    offsets = np.cumsum([0] + [len(doc) + 1 for doc in docs]).astype(np.int64)
    tokens = np.array(flat, dtype=np.uint16)
    return TokenFile(tokens=tokens, offsets=offsets, bos_id=BOS, read_into=array_reader(tokens))


documents = st.lists(st.lists(st.integers(8, 500), min_size=0, max_size=30), min_size=1, max_size=40)


@settings(max_examples=60, deadline=None)
@given(docs=documents, batch_size=st.integers(1, 4), seq_len=st.integers(1, 40), seed=st.integers(0, 3))
def test_targets_are_inputs_shifted_and_rows_start_with_bos(
    docs: list[list[int]], batch_size: int, seq_len: int, seed: int
) -> None:
    source = token_file(docs)
    texts = {tuple(doc) for doc in docs}
    batches = pair_batches(source, batch_size, seq_len, seed)
    for _ in range(3):  # several batches: the corpus may be smaller than one, epochs repeat it
        pair = next(batches)
        inputs, targets = pair[0], pair[1]
        assert inputs.dtype == targets.dtype == torch.int64
        assert inputs.shape == targets.shape == (batch_size, seq_len)
        assert bool((inputs[:, 0] == BOS).all())
        assert torch.equal(inputs[:, 1:], targets[:, :-1])
        row = torch.cat([inputs, targets[:, -1:]], dim=1)
        for tokens in row.tolist():  # each piece after a BOS is the start of a document
            starts = [i for i, token in enumerate(tokens) if token == BOS] + [len(tokens)]
            for start, end in itertools.pairwise(starts):
                piece = tuple(tokens[start + 1 : end])
                assert any(text[: len(piece)] == piece for text in texts)


def test_seed_decides_the_order_and_is_reproducible() -> None:
    source = token_file([[10 + i] * (i % 5 + 1) for i in range(200)])
    first = next(pair_batches(source, 4, 16, seed=1))
    assert torch.equal(first, next(pair_batches(source, 4, 16, seed=1)))
    assert not torch.equal(first, next(pair_batches(source, 4, 16, seed=2)))


def test_max_tokens_keeps_to_the_leading_documents() -> None:
    source = token_file([[100 + i] * 3 for i in range(50)])  # each document is 4 tokens
    batches = pair_batches(source, 2, 8, seed=0, max_tokens=40)  # the first 10 documents
    seen = {int(t) for _ in range(20) for t in next(batches).unique()}
    assert seen - {BOS} == {100 + i for i in range(10)}


def test_max_tokens_below_one_document_is_a_clear_error() -> None:
    with pytest.raises(DataError, match="TRAIN_TOKENS_MAX=2"):
        next(pair_batches(token_file([[9, 9, 9]]), 1, 4, seed=0, max_tokens=2))


def test_prefetch_passes_errors_through_and_stops_with_its_consumer() -> None:
    def failing():
        yield torch.zeros(1)
        raise RuntimeError("disk on fire")

    stream = prefetched(failing(), depth=2)
    assert next(stream).shape == (1,)
    with pytest.raises(RuntimeError, match="disk on fire"):
        next(stream)

    produced = []

    def endless():
        while True:
            produced.append(1)
            yield torch.zeros(1)

    before = threading.active_count()
    stream = prefetched(endless(), depth=2)
    next(stream)
    stream.close()
    deadline = time.monotonic() + 5
    while threading.active_count() > before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert threading.active_count() == before
    count = len(produced)
    time.sleep(0.3)
    assert len(produced) == count


def test_loader_rejects_a_bos_id_the_tokens_were_not_made_with(tmp_path: Path) -> None:
    write_token_dir(tmp_path / "train", [[[1, 2, 3]]], bos_id=5, vocab_size=16, extra_meta={})
    with pytest.raises(DataError, match="BOS id 5"):
        next(packed_batches(tmp_path / "train", 1, 4, bos_id=6, device=torch.device("cpu"), seed=0))


def test_truncated_token_file_is_a_clear_error(tmp_path: Path) -> None:
    train = tmp_path / "train"
    write_token_dir(train, [[[1, 2, 3], [4, 5]]], bos_id=0, vocab_size=16, extra_meta={})
    with open(train / "tokens.bin", "r+b") as handle:
        handle.truncate(4)
    with pytest.raises(DataError, match=r"tokens\.bin.*incomplete or corrupt"):
        next(packed_batches(train, 1, 4, bos_id=0, device=torch.device("cpu"), seed=0))
