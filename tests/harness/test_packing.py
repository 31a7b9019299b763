"""Best-fit packing: invariants (hypothesis) and agreement with a plain list-scan specification."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.data.packing import PackStats, array_reader, best_fit_batches

BOS = 0


def make_corpus(lengths: list[int]) -> tuple[np.ndarray, list[tuple[int, int]], dict[int, tuple[int, int]]]:
    """Documents [BOS, unique tokens...]; `where` maps every non-BOS token to (document, position)."""
    tokens: list[int] = []
    spans: list[tuple[int, int]] = []
    where: dict[int, tuple[int, int]] = {}
    for doc, length in enumerate(lengths):
        spans.append((len(tokens), length))
        tokens.append(BOS)
        for pos in range(1, length):
            where[len(tokens) + 1] = (doc, pos)
            tokens.append(len(tokens) + 1)
    return np.array(tokens, dtype=np.uint32), spans, where


def pack(
    tokens: np.ndarray,
    spans: list[tuple[int, int]],
    row_len: int,
    batch_rows: int,
    buffer_size: int,
    stats: PackStats | None = None,
) -> Iterator[np.ndarray]:
    read = array_reader(tokens)
    return best_fit_batches(read, tokens.dtype, iter(spans), row_len, batch_rows, buffer_size, stats)


def list_scan_spec(docs: list[list[int]], row_len: int, buffer_size: int) -> list[list[int]]:
    """The rule stated plainly: refill the buffer, take the longest document that fits (the earliest
    of equals), else crop the shortest (the earliest of equals); stop when the documents run out."""
    source = iter(docs)
    buffer: list[list[int]] = []
    rows: list[list[int]] = []
    while True:
        row: list[int] = []
        while len(row) < row_len:
            while len(buffer) < buffer_size and (doc := next(source, None)) is not None:
                buffer.append(doc)
            if not buffer:
                return rows
            space = row_len - len(row)
            fitting = [i for i, doc in enumerate(buffer) if len(doc) <= space]
            if fitting:
                row += buffer.pop(max(fitting, key=lambda i: (len(buffer[i]), -i)))
            else:
                row += buffer.pop(min(range(len(buffer)), key=lambda i: len(buffer[i])))[:space]
        rows.append(row)


corpora = st.lists(st.integers(min_value=1, max_value=40), min_size=1, max_size=120)


@settings(max_examples=150, deadline=None)
@given(
    lengths=corpora,
    row_len=st.integers(min_value=1, max_value=50),
    batch_rows=st.integers(min_value=1, max_value=5),
    buffer_size=st.integers(min_value=1, max_value=12),
)
def test_rows_follow_the_best_fit_rule(
    lengths: list[int], row_len: int, batch_rows: int, buffer_size: int
) -> None:
    tokens, spans, _ = make_corpus(lengths)
    batches = list(pack(tokens, spans, row_len, batch_rows, buffer_size))
    got = [row.tolist() for batch in batches for row in batch]
    docs = [tokens[start : start + length].tolist() for start, length in spans]
    assert got == list_scan_spec(docs, row_len, buffer_size)
    assert all(len(batch) == batch_rows for batch in batches[:-1])


@settings(max_examples=150, deadline=None)
@given(lengths=corpora, row_len=st.integers(min_value=1, max_value=50), buffer_size=st.integers(1, 12))
def test_rows_are_bos_aligned_unpadded_and_in_document_order(
    lengths: list[int], row_len: int, buffer_size: int
) -> None:
    tokens, spans, where = make_corpus(lengths)
    stats = PackStats()
    batches = pack(tokens, spans, row_len, 3, buffer_size, stats)
    rows = [row for batch in batches for row in batch]
    used: set[int] = set()
    for row in rows:
        assert len(row) == row_len  # exactly row_len tokens: no short rows, no padding
        assert row[0] == BOS  # every row starts with a document
        segments: list[list[int]] = []
        for token in row.tolist():
            if token == BOS:
                segments.append([])
            else:
                segments[-1].append(token)
        for index, segment in enumerate(segments):
            places = [where[token] for token in segment]  # KeyError = a token from nowhere
            docs = {doc for doc, _ in places}
            assert len(docs) <= 1
            if not places:
                continue
            doc = places[0][0]
            # the document's tokens, from its start, in order; each document used once
            assert [pos for _, pos in places] == list(range(1, len(places) + 1))
            assert doc not in used
            used.add(doc)
            whole = len(places) + 1 == lengths[doc]
            assert whole or index == len(segments) - 1  # only a row's last document may be cropped
    assert stats.rows == len(rows)
    assert stats.taken_tokens - stats.dropped_tokens == len(rows) * row_len


def test_best_fit_avoids_the_crop_that_filling_in_order_would_make() -> None:
    # Rows of 10. In order, 3 + 7 fit and then 6 + 4; best fit takes 7 then 3, then 6 then 4.
    # Filling in arrival order with 6 first would have to crop; best fit crops nothing.
    tokens, spans, _ = make_corpus([6, 3, 7, 4])
    stats = PackStats()
    (batch,) = pack(tokens, spans, 10, 2, 8, stats)
    doc = [tokens[start : start + length].tolist() for start, length in spans]
    assert batch[0].tolist() == doc[2] + doc[1]
    assert batch[1].tolist() == doc[0] + doc[3]
    assert stats.cropped_docs == 0 and stats.crop_fraction == 0.0


def test_crop_takes_the_shortest_prefix_when_nothing_fits() -> None:
    tokens, spans, _ = make_corpus([9, 8, 12])
    stats = PackStats()
    batch = next(pack(tokens, spans, 5, 1, 8, stats))
    start, _ = spans[1]
    assert batch[0].tolist() == tokens[start : start + 5].tolist()
    assert stats.cropped_docs == 1 and stats.dropped_tokens == 3
