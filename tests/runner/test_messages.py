"""The sandbox-to-harness line protocol: hostile bytes never break or fool the reader."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from harness.runner.messages import EVENTS, MAX_LINE_BYTES, LineReader, count, encode, number


def feed_in_chunks(data: bytes, cuts: list[int]) -> list[dict]:
    reader = LineReader()
    out: list[dict] = []
    points = sorted({min(cut, len(data)) for cut in cuts})
    for start, end in zip([0, *points], [*points, len(data)], strict=True):
        out += reader.feed(data[start:end])
    return out


@given(st.binary(max_size=5000), st.lists(st.integers(0, 5000), max_size=10))
def test_arbitrary_bytes_never_raise_and_yield_only_known_events(data: bytes, cuts: list[int]) -> None:
    for message in feed_in_chunks(data, cuts):
        assert isinstance(message, dict) and message["ev"] in EVENTS


@given(
    st.lists(st.sampled_from(sorted(EVENTS)), min_size=1, max_size=20),
    st.lists(st.integers(0, 2000), max_size=30),
)
def test_messages_survive_any_chunking(events: list[str], cuts: list[int]) -> None:
    data = b"".join(encode(event, step=i) for i, event in enumerate(events))
    assert [(m["ev"], m["step"]) for m in feed_in_chunks(data, cuts)] == [
        (e, i) for i, e in enumerate(events)
    ]


def test_oversized_and_malformed_lines_are_dropped_and_reading_goes_on() -> None:
    huge = b'{"ev": "progress", "pad": "' + b"x" * (3 * MAX_LINE_BYTES) + b'"}\n'
    junk = b"not json\n[1, 2]\n" + json.dumps({"ev": "exec", "code": "rm -rf /"}).encode() + b"\n"
    nested = b"[" * 100_000 + b"\n"
    reader = LineReader()
    got = []
    for piece in (huge[:1000], huge[1000:], junk, nested, encode("stats", steps=3)):
        got += reader.feed(piece)
    assert got == [{"ev": "stats", "steps": 3}]


def test_numbers_from_the_sandbox_are_checked() -> None:
    assert number("1.0") is None and number(True) is None and number(1e300) is None
    assert number(2) == 2.0 and number(float("nan")) != number(float("nan"))  # NaN kept: divergence
    assert count(-1) is None and count(1.5) is None and count(True) is None and count(7) == 7
