"""The probe's power against a model that reads ahead only where it pays most, at each preset's
shapes, in-process: the scorer's own plan and comparison (harness.runner.scoring.score_plan,
harness.runner.scoring.scorer.compare_probes, harness.runner.scoring.agreement) on the nats such a
model gives.

The model is written at the level the scorer sees it, the nats of each scored target, so that
the `h100` shapes (10,240 rows of 2,048 tokens, 21 M positions) fit in a test: its honest loss
of target y after token x is a fixed function h(x, y) in [1, 10] nats. At each position it reads
the next input token z (a lookahead) and, where its own loss h(x, z) is among the highest `share`
of all positions, moves half its probability onto z: the target's nats become
-log(exp(-h)/2 + [y = z]/2). That is the honest loss where it does not cheat, much less where it
does and z is the target (every real row), and more where z is not (a probe variant's cut)."""

from __future__ import annotations

import numpy as np
import pytest

from harness.config import load_settings
from harness.runner.scoring import agreement
from harness.runner.scoring.score_plan import WHOLE_SHARE, plan_probes, probe_batches
from harness.runner.scoring.scorer import ProbeGroups, compare_probes

pytestmark = pytest.mark.heavy

PLANS = 20
VOCAB = 8192


def honest_nats(current: np.ndarray, target: np.ndarray) -> np.ndarray:
    """A fixed loss in [1, 10) nats for each (token, target) pair: a multiplicative hash of the two."""
    mixed = current.astype(np.uint32) * np.uint32(2654435761) ^ target.astype(np.uint32) * np.uint32(
        2246822519
    )
    return 1.0 + (mixed >> np.uint32(16)).astype(np.float32) * np.float32(9.0 / 65536)


class LookaheadWhereItPays:
    def __init__(self, inputs: np.ndarray, targets: np.ndarray, share: float) -> None:
        # Its threshold: the honest loss above which `share` of the evaluation's positions lie.
        self.threshold = float(np.quantile(honest_nats(inputs[:, :-1], inputs[:, 1:]), 1.0 - share))

    def nats(self, tokens: np.ndarray, targets: np.ndarray) -> np.ndarray:
        honest = honest_nats(tokens, targets)
        ahead = tokens[:, 1:]
        cheats = honest_nats(tokens[:, :-1], ahead) >= self.threshold
        hit = ahead == targets[:, :-1]
        mixed = -np.log(np.exp(-honest[:, :-1]) / 2 + hit / 2)
        out = honest.copy()
        out[:, :-1] = np.where(cheats, mixed, honest[:, :-1])
        return out


def caught(
    model: LookaheadWhereItPays | LastFromState, evaluated: np.ndarray, targets, plan, tolerance: float
) -> bool:
    """Whether the scorer's comparison of `plan`'s variants with the eval's first showing
    (`evaluated`: the model's nats of every row) finds the model non-causal."""
    first = {probe.row: evaluated[probe.row] for batch in plan for probe in batch}
    groups = ProbeGroups(agreement.Group("probe"), agreement.Group("cut"), agreement.Group("shape"))
    for batch in plan:
        tokens = np.stack([probe.tokens for probe in batch])
        rows_targets = targets[[probe.row for probe in batch]]
        compare_probes(batch, model.nats(tokens, rows_targets), first, set(), False, groups)
    assert groups.shape.count == 0  # full batches only: every comparison is between like batches
    return agreement.judge([groups.prefix, groups.cut], tolerance) is not None


@pytest.mark.parametrize("preset", ["test", "cpu", "h100", "gpu-check"])
def test_a_lookahead_on_the_presets_share_is_caught_in_19_of_20_plans(preset: str) -> None:
    settings = load_settings(preset)
    rows, seq_len, batch_rows = (
        settings.eval_tokens // settings.seq_len,
        settings.seq_len,
        settings.eval_batch_rows,
    )
    rng = np.random.default_rng(2026)
    stream = rng.integers(0, VOCAB, size=(rows, seq_len + 1), dtype=np.int32)
    inputs, targets = stream[:, :-1], stream[:, 1:]
    donor = rng.integers(0, VOCAB, size=1 << 20, dtype=np.int32)
    model = LookaheadWhereItPays(inputs, targets, settings.probe_share)
    evaluated = model.nats(inputs, targets)  # the eval process's answers, once for every plan
    batches = probe_batches(rows, seq_len, batch_rows, settings.probe_share)
    tolerance = agreement.tolerance_for("cpu")
    sized = [
        caught(
            model,
            evaluated,
            targets,
            plan_probes(inputs, batch_rows, batches, donor, np.random.default_rng(seed)),
            tolerance,
        )
        for seed in range(PLANS)
    ]
    assert sum(sized) >= 19, f"{preset}: caught in {sum(sized)} of {PLANS} plans"
    # The same model against one batch of variants (the probe before it was sized) escapes often:
    # what catches it is the probe's size, not the model's clumsiness.
    one_batch = [
        caught(
            model,
            evaluated,
            targets,
            plan_probes(inputs, batch_rows, 1, donor, np.random.default_rng(seed)),
            tolerance,
        )
        for seed in range(PLANS)
    ]
    assert PLANS - sum(one_batch) >= PLANS // 4, (
        f"{preset}: one batch missed it in {PLANS - sum(one_batch)} plans"
    )


class LastFromState:
    """Answers the last position of WHOLE_SHARE of the rows (at least one) from what the eval
    process was shown before (its nats there lowered by half a nat); a fresh process, without that
    state, answers honestly everywhere."""

    def __init__(self, rows: int, rng: np.random.Generator) -> None:
        count = max(1, int(WHOLE_SHARE * rows))
        self.rows = set(rng.choice(rows, size=count, replace=False).tolist())

    def evaluated(self, inputs: np.ndarray, targets: np.ndarray) -> np.ndarray:
        nats = honest_nats(inputs, targets)
        for row in self.rows:
            nats[row, -1] -= 0.5
        return nats

    def nats(self, tokens: np.ndarray, targets: np.ndarray) -> np.ndarray:
        return honest_nats(tokens, targets)


@pytest.mark.parametrize("preset", ["test", "cpu", "gpu-check"])
def test_a_last_position_answered_from_state_is_caught_by_the_rows_shown_whole(preset: str) -> None:
    """Exactly when a plan shows one of its rows whole, which the plan's size makes at least
    PROBE_POWER likely (test_probes.py has the exact chance at every preset, h100's included);
    over 40 drawn plans, 90 % or more."""
    settings = load_settings(preset)
    rows, seq_len, batch_rows = (
        settings.eval_tokens // settings.seq_len,
        settings.seq_len,
        settings.eval_batch_rows,
    )
    rng = np.random.default_rng(2027)
    stream = rng.integers(0, VOCAB, size=(rows, seq_len + 1), dtype=np.int32)
    inputs, targets = stream[:, :-1], stream[:, 1:]
    donor = rng.integers(0, VOCAB, size=1 << 20, dtype=np.int32)
    batches = probe_batches(rows, seq_len, batch_rows, settings.probe_share)
    tolerance = agreement.tolerance_for("cpu")
    found = 0
    for seed in range(40):
        model = LastFromState(rows, np.random.default_rng(seed + 100))
        evaluated = model.evaluated(inputs, targets)
        plan = plan_probes(inputs, batch_rows, batches, donor, np.random.default_rng(seed))
        shown_whole = {probe.row for batch in plan for probe in batch if probe.cut == seq_len}
        found += (seen := caught(model, evaluated, targets, plan, tolerance))
        assert seen == bool(shown_whole & model.rows)
    assert found >= 36, f"{preset}: caught in {found} of 40 plans"
