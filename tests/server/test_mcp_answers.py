"""The rules that keep MCP answers short (server.mcp.answers), on generated data: rounding keeps
5 significant digits, dropping empty fields loses nothing else, thinning keeps the curve's ends."""

from __future__ import annotations

import itertools
import json
import math
from decimal import Decimal
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from protocol.spread import spread
from server.mcp.answers import SIGNIFICANT_DIGITS, compact_text, rounded, without_empty

json_data = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=4),
    max_leaves=20,
)


@given(st.floats(allow_nan=False, allow_infinity=False))
def test_a_rounded_number_keeps_its_significant_digits(value: float) -> None:
    result = rounded(value)
    assert abs(result - value) <= 0.5 * 10 ** (1 - SIGNIFICANT_DIGITS) * abs(value) * (1 + 1e-9)
    assert rounded(result) == result  # rounding twice changes nothing
    digits = Decimal(repr(result)).normalize().as_tuple().digits  # repr: the shortest that reads back
    assert len(digits) <= SIGNIFICANT_DIGITS or abs(value) > 1.7976e308  # those would round to infinity


def test_rounding_leaves_integers_text_and_the_structure_alone() -> None:
    value = {"a": [1, 2.000000001, "3.14159265"], "b": {"c": 0.123456789, "d": True}, "e": 10**18}
    assert rounded(value) == {"a": [1, 2.0, "3.14159265"], "b": {"c": 0.12346, "d": True}, "e": 10**18}


def leaves(value: Any) -> list[Any]:
    """Every non-empty value with its path, the way a reader would find it."""
    if isinstance(value, dict):
        return [(key, leaf) for key, item in value.items() for leaf in leaves(item)]
    if isinstance(value, list):
        return [(index, leaf) for index, item in enumerate(value) for leaf in leaves(item)]
    return [] if value is None or value == "" else [value]


@given(json_data)
def test_dropping_empty_fields_keeps_every_other_value_and_list_positions(value: Any) -> None:
    compact = without_empty(value)
    assert leaves(compact) == leaves(value)

    def no_empty_fields(item: Any) -> bool:
        if isinstance(item, dict):
            return all(v not in (None, "", [], {}) and no_empty_fields(v) for v in item.values())
        return all(no_empty_fields(v) for v in item) if isinstance(item, list) else True

    assert no_empty_fields(compact)
    assert json.loads(compact_text(value)) == compact


@given(st.lists(st.integers(), max_size=600), st.integers(1, 50))
def test_spreading_keeps_at_most_the_points_evenly_with_both_ends(samples: list[int], points: int) -> None:
    kept = spread(list(range(len(samples))), points)  # positions, to check the spacing
    assert len(kept) == min(points, len(samples))
    if samples:
        assert kept[-1] == len(samples) - 1
        if points > 1:
            assert kept[0] == 0
    assert kept == sorted(set(kept))
    if len(kept) > 2:
        gaps = [b - a for a, b in itertools.pairwise(kept)]
        assert max(gaps) - min(gaps) <= 1 or math.isclose(max(gaps), min(gaps))
