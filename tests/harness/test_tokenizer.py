"""The BPE tokenizer: rustbpe training, plain-JSON storage, tiktoken encoding, byte lengths."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import rustbpe
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.data.errors import DataError
from harness.tokenizer import (
    MIN_VOCAB_SIZE,
    SPECIAL_TOKENS,
    SPLIT_PATTERN,
    TOKENIZER_FILE,
    Tokenizer,
    load_token_bytes,
    load_tokenizer,
    train_tokenizer,
)
from tests.fixtures_data import corpus_documents

VOCAB = 600
Trained = tuple[Tokenizer, Path]


@pytest.fixture(scope="module")
def corpus() -> list[str]:
    train, _ = corpus_documents()
    return train[:400]


@pytest.fixture(scope="module")
def trained(corpus: list[str], tmp_path_factory: pytest.TempPathFactory) -> Trained:
    folder = tmp_path_factory.mktemp("tokenizer")
    return train_tokenizer(iter(corpus), VOCAB, folder, check_texts=corpus[:3]), folder


def test_vocabulary_is_exactly_the_requested_size_with_bos_among_the_specials(
    trained: Trained,
) -> None:
    tokenizer, _ = trained
    assert tokenizer.vocab_size == VOCAB
    assert tokenizer.bos_id == VOCAB - len(SPECIAL_TOKENS)
    assert tokenizer.decode([tokenizer.bos_id]) == "<|bos|>"


def test_tiktoken_encoding_equals_rustbpe_encoding(corpus: list[str], trained: Trained) -> None:
    tokenizer, _ = trained
    reference = rustbpe.Tokenizer()  # trained again, independently, on the same text
    reference.train_from_iterator(iter(corpus), VOCAB - len(SPECIAL_TOKENS), pattern=SPLIT_PATTERN)
    for text in corpus[-5:]:
        assert tokenizer.encode(text) == list(reference.encode(text))
    assert tokenizer.encode_batch(corpus[-5:], num_threads=2) == [tokenizer.encode(t) for t in corpus[-5:]]


@settings(max_examples=200, deadline=None)
@given(text=st.text())
def test_any_text_round_trips(trained: Trained, text: str) -> None:
    tokenizer, _ = trained
    assert tokenizer.decode(tokenizer.encode(text)) == text


def test_special_token_text_is_encoded_as_ordinary_text(trained: Trained) -> None:
    tokenizer, _ = trained
    ids = tokenizer.encode("x <|bos|> y")
    assert tokenizer.bos_id not in ids
    assert tokenizer.decode(ids) == "x <|bos|> y"


def test_stored_as_plain_json_without_pickle(trained: Trained) -> None:
    _, folder = trained
    raw = (folder / TOKENIZER_FILE).read_bytes()
    document = json.loads(raw)  # plain JSON: nothing to unpickle, nothing to execute
    assert document["pattern"] == SPLIT_PATTERN
    assert len(document["mergeable_ranks"]) == VOCAB - len(SPECIAL_TOKENS)
    assert set(document["special_tokens"]) == set(SPECIAL_TOKENS)
    assert not raw.startswith(b"\x80")  # not a pickle stream


def test_token_byte_lengths_count_specials_as_zero(trained: Trained) -> None:
    tokenizer, folder = trained
    lengths = load_token_bytes(folder)
    assert lengths.shape == (VOCAB,)
    for token_id in range(VOCAB):
        token = tokenizer.encoding.decode_single_token_bytes(token_id)
        expected = 0 if token_id >= tokenizer.bos_id else len(token)
        assert lengths[token_id] == expected
    assert lengths[:256].min() == 1 and lengths.max() > 1


def test_training_is_deterministic(corpus: list[str], trained: Trained, tmp_path: Path) -> None:
    _, folder = trained
    train_tokenizer(iter(corpus), VOCAB, tmp_path)
    assert (tmp_path / TOKENIZER_FILE).read_bytes() == (folder / TOKENIZER_FILE).read_bytes()


def test_vocab_size_too_small_names_the_setting(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=rf"VOCAB_SIZE=100 .*at least {MIN_VOCAB_SIZE}"):
        train_tokenizer(iter(["hello world"]), 100, tmp_path)
    assert not (tmp_path / TOKENIZER_FILE).exists()


def test_too_little_text_for_the_vocabulary_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="add more text or lower VOCAB_SIZE"):
        train_tokenizer(iter(["abc abc"]), 4096, tmp_path)


def test_malformed_tokenizer_file_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / TOKENIZER_FILE).write_text('{"pattern": 1}')
    with pytest.raises(DataError, match="malformed tokenizer file"):
        load_tokenizer(tmp_path)
    with pytest.raises(DataError, match="no tokenizer"):
        load_tokenizer(tmp_path / "nowhere")
