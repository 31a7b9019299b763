"""Keep rates by kind of change, the pure aggregation alone (server/rules/keep_rates.py): the kinds of
real changes, how a multi-constant change counts, and, with hypothesis, the totals and every
count against a brute-force count of the same outcomes."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from protocol.states import Direction, Part
from server.rules.keep_rates import Kind, Outcome, keep_rates, kinds_of
from server.trainpy.changes import summarize

BASELINE = (Path(__file__).resolve().parents[2] / "harness" / "baseline" / "train.py").read_text()
LR_UP = Kind(Part.CONSTANT, "LR", Direction.UP)
LR_DOWN = Kind(Part.CONSTANT, "LR", Direction.DOWN)
WD_DOWN = Kind(Part.CONSTANT, "WD", Direction.DOWN)
MODULE = Kind(Part.REGION, "module", None)
TRAIN = Kind(Part.REGION, "train", None)


def test_the_kinds_of_a_change_are_its_constants_with_their_direction_and_its_regions() -> None:
    base = "LR = 0.1\nWD = 0.1\nOLD = 1\n\ndef train(x):\n    return x * 2\n"
    new = "LR = 0.2\nWD = 0.05\nNEW = 3\n\ndef train(x):\n    return x * 3\n"
    assert kinds_of(summarize(base, new)) == (
        LR_UP,
        WD_DOWN,
        Kind(Part.CONSTANT, "NEW", Direction.ADDED),
        Kind(Part.CONSTANT, "OLD", Direction.REMOVED),
        MODULE,
        TRAIN,
    )
    assert kinds_of(summarize("LR = 0.1\n", "LR = = 0.2\n")) == ()  # does not parse: no kinds


def test_a_real_change_of_the_baseline_has_its_constant_and_the_module_region() -> None:
    changed = BASELINE.replace("MATRIX_LR = 0.04", "MATRIX_LR = 0.02", 1)
    assert changed != BASELINE
    assert kinds_of(summarize(BASELINE, changed)) == (
        Kind(Part.CONSTANT, "MATRIX_LR", Direction.DOWN),
        MODULE,
    )


def test_up_and_down_are_different_kinds_and_a_two_constant_change_counts_under_both() -> None:
    rates = keep_rates(
        [
            Outcome(1, kept=True, measured=True, effect=-0.004, se=0.001, kinds=(LR_UP, WD_DOWN, MODULE)),
            Outcome(2, kept=False, measured=True, effect=0.002, se=0.001, kinds=(LR_UP, MODULE)),
            Outcome(3, kept=False, measured=False, effect=None, se=None, kinds=(LR_DOWN, MODULE)),
            Outcome(4, kept=False, measured=True, effect=-0.001, se=0.001, kinds=(), parsed=False),
        ]
    )
    assert (rates.overall.tried, rates.overall.measured, rates.overall.kept, rates.unparsed) == (4, 3, 1, 1)
    assert rates.overall.best is not None and rates.overall.best.experiment_id == 1
    by_kind = {entry.kind: entry for entry in rates.kinds}
    assert [entry.kind for entry in rates.kinds] == [MODULE, LR_UP, LR_DOWN, WD_DOWN]  # most tried first
    module, up, down, wd = by_kind[MODULE], by_kind[LR_UP], by_kind[LR_DOWN], by_kind[WD_DOWN]
    assert (module.tally.tried, module.tally.measured, module.tally.kept, module.alone) == (3, 2, 1, 3)
    assert (up.tally.tried, up.tally.measured, up.tally.kept, up.alone) == (2, 2, 1, 1)  # alone in 2 only
    assert up.tally.rate == 0.5 and up.tally.best is not None and up.tally.best.effect == -0.004
    assert (down.tally.tried, down.tally.measured, down.tally.kept, down.tally.best) == (1, 0, 0, None)
    assert down.tally.rate == 0.0
    assert (wd.tally.tried, wd.tally.kept, wd.alone) == (1, 1, 0)  # set together with LR: not alone


KINDS = st.sampled_from([LR_UP, LR_DOWN, WD_DOWN, Kind(Part.CONSTANT, "WD", Direction.ADDED), MODULE, TRAIN])
OUTCOMES = st.lists(
    st.builds(
        lambda i, kept, measured, effect, kinds, parsed: Outcome(
            i,
            kept=kept and measured,
            measured=measured,
            effect=effect if measured else None,
            se=0.001,
            kinds=tuple(kinds) if parsed else (),
            parsed=parsed,
        ),
        st.integers(1, 10_000),
        st.booleans(),
        st.booleans(),
        st.floats(-0.1, 0.1),
        st.lists(KINDS, max_size=4, unique=True),
        st.booleans(),
    ),
    max_size=40,
)


@given(OUTCOMES)
def test_every_count_is_the_brute_force_count_and_the_totals_add_up(outcomes: list[Outcome]) -> None:
    rates = keep_rates(outcomes)
    assert rates.overall.tried == len(outcomes)
    assert rates.overall.measured == sum(o.measured for o in outcomes)
    assert rates.overall.kept == sum(o.kept for o in outcomes)
    assert rates.unparsed == sum(not o.parsed for o in outcomes)
    # Each experiment counts once under each of its kinds.
    assert sum(entry.tally.tried for entry in rates.kinds) == sum(len(o.kinds) for o in outcomes)
    for entry in rates.kinds:
        having = [o for o in outcomes if entry.kind in o.kinds]
        tally = entry.tally
        assert (tally.tried, tally.measured, tally.kept) == (
            len(having),
            sum(o.measured for o in having),
            sum(o.kept for o in having),
        )
        assert tally.kept <= tally.measured <= tally.tried and entry.alone <= tally.tried
        assert entry.alone == sum(1 for o in having if [k.part for k in o.kinds].count(entry.kind.part) == 1)
        effects = [o.effect for o in having if o.measured and o.effect is not None]
        assert (tally.best.effect if tally.best else None) == (min(effects) if effects else None)
    tried = [entry.tally.tried for entry in rates.kinds]
    assert tried == sorted(tried, reverse=True)
