"""The noise estimate: each platform and harness's run-to-run sigma of val_bpb, kept current.

It rests on the runs that were not chosen for being good (`measuring_runs`): all of the
baseline's, and the repeats of each kept change (the runs it got as the best). A candidate's own
runs are left out: its first run passed the screen because it was low, so its spread around the
candidate's mean is wider than the noise (the rule would then need more evidence than it should).

An experiment's measuring runs are summarised as (n, mean, m2), m2 being the sum of squared
deviations from their mean, updated one run at a time (Welford). The estimate pools the m2 of
every experiment with several such runs: sigma = sqrt(sum m2 / sum (n - 1)), with sum (n - 1)
degrees of freedom. Each new measuring run adds its experiment's change of m2 and one degree of
freedom (from its second run on), so the estimate stays current with one UPDATE and never rescans
the runs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from sqlalchemy import bindparam, insert, or_, select, update
from sqlalchemy.orm import Session

from client.states import RunKind
from server.judge import Noise
from server.models import NOISE, NoiseEstimate, Result, Run, utcnow
from server.schemas import NoiseOut


@dataclass(frozen=True)
class RunStats:
    """An experiment's valid runs: count, mean and sum of squared deviations from the mean."""

    n: int
    mean: float | None
    m2: float

    def with_run(self, value: float) -> RunStats:
        n = self.n + 1
        mean = self.mean if self.mean is not None else value
        delta = value - mean
        new_mean = mean + delta / n
        return RunStats(n, new_mean, self.m2 + delta * (value - new_mean))

    @classmethod
    def of(cls, values: list[float]) -> RunStats:
        stats = cls(0, None, 0.0)
        for value in values:
            stats = stats.with_run(value)
        return stats


# The valid runs of an experiment that were not chosen for being good: all of the baseline's,
# the repeats of any other (a kept change's runs as the best). Its value as a reference, and
# the noise, rest on these only (docs/api.md, "Decisions").
_MEASURING = (
    select(Result.run_id, Result.val_bpb)
    .join(Run, Run.id == Result.run_id)
    .where(
        Result.experiment_id == bindparam("experiment_id"),
        or_(bindparam("baseline"), Run.kind == RunKind.REPEAT),
        Result.status == "ok",
        Result.val_bpb.is_not(None),
        Result.device == bindparam("platform"),
        Result.harness_id == bindparam("harness_id"),
    )
    .order_by(Run.number)
)


def measuring_runs(
    session: Session, experiment_id: int, baseline: bool, platform: str | None, harness_id: str | None
) -> dict[int, float]:
    """Run id -> val_bpb of the experiment's measuring runs (see _MEASURING)."""
    params = {
        "experiment_id": experiment_id,
        "baseline": baseline,
        "platform": platform,
        "harness_id": harness_id,
    }
    return {row.run_id: row.val_bpb for row in session.connection().execute(_MEASURING, params)}


_ADD = (
    update(NOISE)
    .where(NOISE.c.platform == bindparam("p"), NOISE.c.harness_id == bindparam("h"))
    .values(
        sum_sq=NOISE.c.sum_sq + bindparam("d_sum_sq"),
        df=NOISE.c.df + 1,
        runs=NOISE.c.runs + bindparam("d_runs"),
        experiments=NOISE.c.experiments + bindparam("d_experiments"),
        updated_at=bindparam("now", type_=NOISE.c.updated_at.type),
    )
)
_INSERT = insert(NOISE)
_READ = select(NOISE.c.sum_sq, NOISE.c.df).where(
    NOISE.c.platform == bindparam("p"), NOISE.c.harness_id == bindparam("h")
)


def add_run(session: Session, platform: str, harness_id: str, before: RunStats, after: RunStats) -> None:
    """Pool an experiment's new measuring run (its stats went from `before` to `after`)."""
    if after.n < 2:
        return  # one run says nothing about the noise
    values = {
        "p": platform,
        "h": harness_id,
        "d_sum_sq": after.m2 - before.m2,
        "d_runs": 2 if after.n == 2 else 1,
        "d_experiments": 1 if after.n == 2 else 0,
        "now": utcnow(),
    }
    if session.connection().execute(_ADD, values).rowcount == 0:
        session.connection().execute(
            _INSERT,
            {
                "platform": platform,
                "harness_id": harness_id,
                "sum_sq": values["d_sum_sq"],
                "df": 1,
                "runs": values["d_runs"],
                "experiments": values["d_experiments"],
                "updated_at": values["now"],
            },
        )


def noise(session: Session, platform: str | None, harness_id: str | None) -> Noise | None:
    """The pooled estimate for a platform and harness, or None before any experiment has two runs."""
    if platform is None or harness_id is None:
        return None
    row = session.connection().execute(_READ, {"p": platform, "h": harness_id}).first()
    if row is None or row.df < 1:
        return None
    return Noise(sigma=math.sqrt(max(row.sum_sq, 0.0) / row.df), df=row.df)


def estimates(session: Session, platform: str | None, harness_id: str | None) -> list[NoiseOut]:
    """Every platform and harness measured, the project's (the one decisions use) marked current."""
    rows = session.scalars(select(NoiseEstimate).order_by(NoiseEstimate.platform, NoiseEstimate.harness_id))
    return [view(e, current=(e.platform, e.harness_id) == (platform, harness_id)) for e in rows]


def view(estimate: NoiseEstimate, current: bool) -> NoiseOut:
    return NoiseOut(
        platform=estimate.platform,
        harness_id=estimate.harness_id,
        sigma=math.sqrt(max(estimate.sum_sq, 0.0) / estimate.df) if estimate.df else None,
        df=estimate.df,
        runs=estimate.runs,
        experiments=estimate.experiments,
        current=current,
        updated_at=estimate.updated_at,
    )


def current_view(session: Session, platform: str | None, harness_id: str | None) -> NoiseOut | None:
    """The estimate decisions use now (the project's platform and harness), if there is one."""
    if platform is None or harness_id is None:
        return None
    estimate = session.get(NoiseEstimate, (platform, harness_id))
    return view(estimate, current=True) if estimate is not None else None
