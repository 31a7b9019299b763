"""The "has this been tried?" rule (server/rules/similarity.py) alone: on the random agent's real mutations
of the real baseline, on hand-made changes of code, and as properties of any pair of changes."""

from __future__ import annotations

import math
import random
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy import create_engine
from sqlalchemy.orm import Session

from agent.mutation import mutate_constants
from protocol.constants import find_constants
from protocol.states import SimilarityKind
from server.crud.similar import store_change, stored_summary
from server.models import Base, ExperimentChange
from server.rules.similarity import (
    NEARBY,
    Change,
    Match,
    Similarity,
    compare,
    nearby_range,
    rank,
    value_distance,
)
from server.trainpy.changes import summarize

BASELINE = (Path(__file__).resolve().parents[2] / "harness" / "baseline" / "train.py").read_text()
BASE_A, BASE_B = "a" * 40, "b" * 40


def _set(source: str, name: str, text: str) -> str:
    """`source` with constant `name`'s value written as `text`."""
    constant = next(c for c in find_constants(source) if c.name == name)
    return source[: constant.start] + text + source[constant.end :]


def _change(base: str, new: str, base_commit: str = BASE_A) -> Change:
    return Change(summarize(base, new), base_commit)


def _single_mutations(count: int, seed: int) -> list[tuple[str, str, float]]:
    """(new source, constant, new value) of the random agent's mutations that moved one constant."""
    rng = random.Random(seed)
    found = []
    while len(found) < count:
        new, description = mutate_constants(BASELINE, rng)
        if ", " in description:
            continue
        summary = summarize(BASELINE, new)
        (change,) = summary.constants
        assert change.new is not None
        found.append((new, change.name, change.new))
    return found


def test_real_mutations_are_similar_exactly_when_they_set_the_same_constant_nearby_or_the_same_way() -> None:
    mutations = [(_change(BASELINE, new), new, name, value) for new, name, value in _single_mutations(80, 7)]
    before = {c.name: c.value for c in find_constants(BASELINE)}
    verdicts = {"nearby": 0, "same way": 0, "opposite ways": 0, "other constant": 0}
    for i, (change_a, new_a, name_a, value_a) in enumerate(mutations):
        for change_b, new_b, name_b, value_b in mutations[i + 1 :]:
            if new_a == new_b:
                continue  # identical train.py: the content hash's case, not this rule's
            similarity = compare(change_a, change_b)
            if name_a != name_b:
                assert similarity is None, (name_a, name_b)
                verdicts["other constant"] += 1
            elif value_distance(value_a, value_b) <= NEARBY:
                assert similarity is not None and similarity.kind == SimilarityKind.NEARBY_CONSTANTS
                assert similarity.distance == value_distance(value_a, value_b)
                verdicts["nearby"] += 1
            elif (value_a > before[name_a]) == (value_b > before[name_a]):
                further = abs(value_a - before[name_a]) > abs(value_b - before[name_a])
                assert similarity is not None and similarity.kind == SimilarityKind.SAME_DIRECTION
                assert similarity.distance == value_distance(value_a, value_b)
                words = "pushed further" if further else "moved the same way"
                assert similarity.detail.startswith(f"{words}: {name_a} "), similarity
                verdicts["same way"] += 1
            else:
                assert similarity is None, (name_a, value_a, value_b)
                verdicts["opposite ways"] += 1
    assert min(verdicts.values()) >= 5, verdicts  # the draw exercised every case


def test_a_nearby_value_of_a_real_mutation_is_found_and_a_far_one_is_not() -> None:
    tried = _set(BASELINE, "MATRIX_LR", "0.05")
    assert compare(_change(BASELINE, _set(BASELINE, "MATRIX_LR", "0.052")), _change(BASELINE, tried)) == (
        Similarity(
            SimilarityKind.NEARBY_CONSTANTS, value_distance(0.052, 0.05), "MATRIX_LR 0.05 (here 0.052)"
        )
    )
    assert compare(_change(BASELINE, _set(BASELINE, "MATRIX_LR", "0.02")), _change(BASELINE, tried)) is None
    # Far, but the same way from 0.04: what that try measured is evidence for this one.
    assert compare(_change(BASELINE, _set(BASELINE, "MATRIX_LR", "0.08")), _change(BASELINE, tried)) == (
        Similarity(
            SimilarityKind.SAME_DIRECTION,
            value_distance(0.08, 0.05),
            "pushed further: MATRIX_LR 0.04 -> 0.05 (here 0.04 -> 0.08)",
        )
    )
    # Powers of two: the next one is a doubling away, never nearby (and these went opposite ways).
    assert (
        compare(
            _change(BASELINE, _set(BASELINE, "MLP_RATIO", "8")),
            _change(BASELINE, _set(BASELINE, "MLP_RATIO", "2")),
        )
        is None
    )


def test_the_same_mutation_on_another_base_is_found() -> None:
    rng = random.Random(11)
    other_base, _ = mutate_constants(BASELINE, rng)  # a kept change of some constants
    moved = {c.name for c in summarize(BASELINE, other_base).constants}
    name = next(c.name for c in find_constants(BASELINE) if c.name not in moved and c.value != 0)
    value = next(c for c in find_constants(BASELINE) if c.name == name).value
    text = repr(value * 3) if isinstance(value, float) else str(value * 3)
    on_baseline = _change(BASELINE, _set(BASELINE, name, text), BASE_A)
    on_other = _change(other_base, _set(other_base, name, text), BASE_B)
    similarity = compare(on_other, on_baseline)
    assert similarity is not None and similarity.kind == SimilarityKind.SAME_CHANGE_OTHER_BASE
    assert similarity.distance == 0


def test_the_same_lines_re_indented_on_the_same_base_are_the_same_change() -> None:
    base = "def f(x):\n    return x\n"
    one = _change(base, "def f(x):\n    y = x * 2\n    return y\n")
    two = _change(base, "def f(x):\n      y = x  * 2\n\n      return y\n")
    similarity = compare(two, one)
    assert similarity is not None and similarity.kind == SimilarityKind.SAME_CHANGE


def test_code_changes_overlap_when_most_of_their_lines_are_the_same() -> None:
    base = "LR = 0.1\n\ndef f(x):\n    a = x\n    b = a\n    return b\n"
    both = base.replace("    a = x\n    b = a\n", "    a = x * 2\n    b = a + 1\n")
    one = _change(base, both)
    more = _change(base, both.replace("    return b\n", "    return b * 3\n").replace("LR = 0.1", "LR = 0.5"))
    # One: -a=x -b=a +a=x*2 +b=a+1; more: those, -return b +return b*3, and LR (a constant).
    assert compare(more, one) == Similarity(
        SimilarityKind.CONTAINED, 1 - 4 / 7, "all of its change is part of this one: 4 code lines"
    )
    other = _change(base, both.replace("b = a + 1", "b = a + 2"))  # 3 of one's 4 lines, and another
    assert compare(other, one) == Similarity(
        SimilarityKind.OVERLAPPING_CODE, 1 - 3 / 5, "3 of its 4 changed code lines are the same"
    )
    unrelated = _change(base, base.replace("    return b\n", "    return -b\n"))
    assert compare(unrelated, one) is None


def test_a_source_that_does_not_parse_is_only_ever_the_same_change() -> None:
    broken = _change("LR = 0.1\n", "LR = = 0.1\n")
    assert compare(_change("LR = 0.1\n", "LR = 0.11\n"), broken) is None
    assert compare(broken, broken) == Similarity(
        SimilarityKind.SAME_CHANGE, 0.0, "the same lines changed the same way"
    )


def test_rank_puts_the_most_alike_first_then_the_nearest_then_the_newest() -> None:
    new = _change(BASELINE, _set(BASELINE, "MATRIX_LR", "0.05"))
    earlier = [
        (1, _change(BASELINE, _set(BASELINE, "MATRIX_LR", "0.053"))),
        (2, _change(BASELINE, _set(BASELINE, "MATRIX_LR", "0.051"))),
        (3, Change(new.summary, BASE_B)),
        (4, _change(BASELINE, _set(BASELINE, "MATRIX_LR", "0.051"))),
        (5, _change(BASELINE, _set(BASELINE, "EMBEDDING_LR", "0.61"))),
        (6, _change(BASELINE, _set(BASELINE, "MATRIX_LR", "0.5"))),  # far, but up from 0.04 too
        (7, _change(BASELINE, _set(BASELINE, "MATRIX_LR", "0.01"))),  # far, and down
    ]
    assert [match.experiment_id for match in rank(new, earlier)] == [3, 4, 2, 1, 6]


# Properties over any pair of values and any pair of changes.

values = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False, min_value=-1e6, max_value=1e6),
    st.integers(min_value=-(10**6), max_value=10**6),
)


@given(values, values)
def test_value_distance_is_symmetric_and_zero_only_for_equal_values(a: float, b: float) -> None:
    assert value_distance(a, b) == value_distance(b, a)
    assert (value_distance(a, b) == 0) == (a == b)
    assert value_distance(a, None) == math.inf or a is None


@given(
    st.floats(min_value=1.0, max_value=1e3),
    st.floats(min_value=1.0, max_value=1e3),
    st.floats(min_value=1.0, max_value=1e3),
)
def test_above_one_only_the_ratio_counts(a: float, b: float, scale: float) -> None:
    assert math.isclose(value_distance(a, b), value_distance(a * scale, b * scale), abs_tol=1e-9)


@given(st.floats(min_value=1e-6, max_value=1 - 1e-6), st.floats(min_value=0.0, max_value=1.0))
def test_a_fraction_moved_further_away_is_no_nearer(p: float, step: float) -> None:
    logit = math.log(p) - math.log1p(-p)
    near = 1 / (1 + math.exp(-(logit + step)))
    far = 1 / (1 + math.exp(-(logit + 2 * step)))
    if 0 < far < 1 and p < near < far:
        assert value_distance(p, near) <= value_distance(p, far)


lines = st.sampled_from(
    [
        "LR = 0.1",
        "LR = 0.12",
        "LR = 0.9",
        "DEPTH = 8",
        "def f():",
        "    return 1",
        "    return 2",
        "x = 3",
        "",
    ]
)
sources = st.lists(lines, max_size=7).map(lambda chosen: "\n".join(chosen) + "\n")


@given(sources, sources, sources, st.booleans())
def test_the_verdict_is_symmetric_but_for_containment_and_a_change_is_the_same_as_itself(
    base: str, a: str, b: str, same_base: bool
) -> None:
    one, two = _change(base, a), Change(summarize(base, b), BASE_A if same_base else BASE_B)
    forward, back = compare(one, two), compare(two, one)
    contained = SimilarityKind.CONTAINED
    if contained in (getattr(forward, "kind", None), getattr(back, "kind", None)):
        # One way only: the larger change contains the smaller; the other way it may overlap.
        assert {getattr(forward, "kind", None), getattr(back, "kind", None)} - {contained} <= {
            None,
            SimilarityKind.OVERLAPPING_CODE,
        }
        return
    assert (forward is None) == (back is None)
    if forward is not None and back is not None:
        assert forward.kind == back.kind and math.isclose(forward.distance, back.distance)
    itself = compare(one, one)
    assert (itself is None) == one.summary.empty
    if itself is not None:
        assert itself.kind == SimilarityKind.SAME_CHANGE and itself.distance == 0


@given(sources, st.lists(sources, max_size=6))
def test_rank_keeps_exactly_the_matches_in_order(base: str, others: list[str]) -> None:
    new = _change(base, base + "LR = 0.11\n")
    earlier = [(i + 1, _change(base, other)) for i, other in enumerate(others)]
    ranked = rank(new, earlier)
    expected = {i for i, change in earlier if compare(new, change) is not None}
    assert {match.experiment_id for match in ranked} == expected
    keys = [(match.similarity.kind, match.similarity.distance) for match in ranked]
    order = list(SimilarityKind)
    assert [(order.index(k), d) for k, d in keys] == sorted((order.index(k), d) for k, d in keys)
    assert all(isinstance(match, Match) for match in ranked)


magnitudes = st.floats(min_value=1e-6, max_value=1e6)


@given(magnitudes, st.sampled_from([1, -1]), st.floats(min_value=-NEARBY, max_value=NEARBY), st.booleans())
def test_the_nearby_range_holds_every_nearby_value(
    magnitude: float, sign: int, step: float, in_logit_space: bool
) -> None:
    """What the database narrows candidates to (nearby_range) never leaves out a nearby value."""
    value = sign * magnitude
    assert nearby_range(0) == (0, 0)
    if in_logit_space and 0 < value < 1:
        logit = math.log(value) - math.log1p(-value)
        other = 1 / (1 + math.exp(-(logit + step)))
    else:
        other = value * math.exp(step)
    low, high = nearby_range(value)
    if value_distance(value, other) <= NEARBY:
        assert low <= other <= high
    assert value_distance(value, low * (1 - 1e-6) if value > 0 else low * (1 + 1e-6)) > NEARBY


def test_a_change_that_combines_earlier_ones_contains_each_of_them() -> None:
    lr = _set(BASELINE, "MATRIX_LR", "0.05")
    relu = "return self.c_proj(F.relu(self.c_fc(x)).square())"
    assert BASELINE.count(relu) == 1
    code = BASELINE.replace(relu, relu.replace("F.relu", "F.gelu"))
    combined = _change(BASELINE, _set(code, "MATRIX_LR", "0.05"))
    for part, what in ((lr, "MATRIX_LR 0.05"), (code, "2 code lines")):
        found = compare(combined, _change(BASELINE, part))
        assert found is not None and found.kind == SimilarityKind.CONTAINED, found
        assert what in found.detail and 0 < found.distance < 1
        reverse = compare(_change(BASELINE, part), combined)  # the smaller does not contain the larger
        assert reverse is None or reverse.kind != SimilarityKind.CONTAINED
    other_value = _change(BASELINE, _set(code, "MATRIX_LR", "0.06"))
    assert compare(other_value, _change(BASELINE, lr)) is None  # a constant set to another value


_STORE = create_engine("sqlite://")  # the rows alone: no project, no migrations needed here
Base.metadata.create_all(_STORE)


@given(sources, sources)
def test_a_stored_summary_reads_back_as_it_was_made(base: str, new: str) -> None:
    # Earlier changes are compared as they read back from the database, their code lines
    # computed again from the stored constants and lines: they must be the summary's own.
    summary = summarize(base, new)
    with Session(_STORE) as session:
        store_change(session, 1, summary)
        row = session.get(ExperimentChange, 1)
        assert row is not None and stored_summary(row) == summary
        assert row.code_lines == len(summary.code) if summary.parsed else row.code_lines == 0
        session.rollback()
