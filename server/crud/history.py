"""What history says before an agent proposes: near misses (candidates to combine) and keep rates
by kind of change, as the API and the pages show them. The rules are pure functions
(server/near_misses.py, server/keep_rates.py); this module reads their inputs and builds views.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from client.states import Decision
from server.crud import change_kinds
from server.crud import noise as noise_crud
from server.crud.experiments import BASELINE_AGENT, agent_names
from server.crud.project import load_project
from server.keep_rates import Direction, KeepRates, Part, Tally, keep_rates
from server.models import EXPERIMENTS, Experiment
from server.near_misses import Measured, near_misses
from server.patches import PatchError, carry_over
from server.research_repo import ResearchRepo
from server.schemas import (
    BestEffectOut,
    ChangeOut,
    ConstantSetOut,
    KeepRateOut,
    KeepRatesOut,
    KeepRateTotalsOut,
    NearMissesOut,
    NearMissOut,
)

_REVERTED_AND_MEASURED = select(
    EXPERIMENTS.c.id,
    EXPERIMENTS.c.effect,
    EXPERIMENTS.c.effect_se,
    EXPERIMENTS.c.compared_runs,
    EXPERIMENTS.c.best_runs,
).where(
    EXPERIMENTS.c.decision == Decision.REVERT,
    EXPERIMENTS.c.valid_runs > 0,
    EXPERIMENTS.c.effect.is_not(None),
    EXPERIMENTS.c.compared_runs.is_not(None),
)


def near_miss_list(session: Session, repo: ResearchRepo, sigmas: float, limit: int) -> NearMissesOut:
    """The `limit` most promising near misses on the project's platform (server/near_misses.py)."""
    project = load_project(session)
    estimate = noise_crud.noise(session, project.platform, project.harness_id)
    noise_sigma = estimate.sigma if estimate is not None else None
    statement = _REVERTED_AND_MEASURED.where(EXPERIMENTS.c.platform == project.platform)
    measured = [
        Measured(row.id, row.effect, row.effect_se, row.compared_runs, row.best_runs or 0)
        for row in session.execute(statement)
    ]
    found = near_misses(measured, sigmas, noise_sigma)[:limit]
    experiments = {
        e.id: e
        for e in session.scalars(
            select(Experiment).where(Experiment.id.in_([n.experiment_id for n in found]))
        )
    }
    names = agent_names(session, {e.agent_id for e in experiments.values() if e.agent_id is not None})
    kinds = change_kinds.stored(session, list(experiments))
    best = project.best_commit
    best_source = repo.train_py(best).decode("utf-8", "replace") if best else None
    items = []
    for near in found:
        e = experiments[near.experiment_id]
        items.append(
            NearMissOut(
                experiment_id=e.id,
                agent=names.get(e.agent_id, BASELINE_AGENT) if e.agent_id is not None else BASELINE_AGENT,
                description=e.description,
                effect=near.effect,
                se=near.se,
                pooled_se=near.pooled_se,
                lower=near.lower,
                upper=near.upper,
                runs=e.compared_runs or 0,
                reference_runs=e.best_runs or 0,
                val_bpb=e.val_bpb,
                reference=e.best_before_commit,
                reference_is_best=e.best_before_commit is not None and e.best_before_commit == best,
                applies_to_best=_applies(repo, e, best_source),
                reason=e.decision_reason,
                changes=change_view(e.changes_parsed, kinds.get(e.id, [])),
                finished_at=e.finished_at,
            )
        )
    return NearMissesOut(sigmas=sigmas, noise_sigma=noise_sigma, best=best, items=items)


def _applies(repo: ResearchRepo, experiment: Experiment, best_source: str | None) -> bool:
    """Whether the experiment's diff applies to the best's train.py and changes it."""
    if best_source is None or experiment.base_commit is None:
        return False
    try:
        moved = carry_over(
            repo.train_py(experiment.base_commit).decode("utf-8", "replace"),
            repo.train_py(experiment.commit_sha).decode("utf-8", "replace"),
            best_source,
        )
    except PatchError:
        return False
    return moved != best_source


def change_view(parsed: bool | None, rows: list[Any]) -> ChangeOut:
    """A change as stored in change_kinds (rows ordered by part, then name)."""
    return ChangeOut(
        parsed=parsed,
        constants=[
            ConstantSetOut(name=r.name, old=r.old, new=r.new, direction=Direction(r.direction))
            for r in rows
            if r.part == Part.CONSTANT
        ],
        regions=[r.name for r in rows if r.part == Part.REGION],
    )


def keep_rate_table(
    session: Session,
    *,
    part: Part | None = None,
    name: str | None = None,
    min_tried: int = 1,
    limit: int = 100,
) -> KeepRatesOut:
    """Keep rates by kind of change on the project's platform and harness (server/keep_rates.py)."""
    project = load_project(session)
    rates: KeepRates = keep_rates(change_kinds.outcomes(session, project.platform, project.harness_id))
    kinds = [
        entry
        for entry in rates.kinds
        if (part is None or entry.kind.part == part)
        and (name is None or entry.kind.name == name)
        and entry.tally.tried >= min_tried
    ]
    return KeepRatesOut(
        platform=project.platform,
        harness_id=project.harness_id,
        overall=KeepRateTotalsOut(
            tried=rates.overall.tried,
            measured=rates.overall.measured,
            kept=rates.overall.kept,
            unparsed=rates.unparsed,
            rate=rates.overall.rate,
            best=_best(rates.overall),
        ),
        kinds_total=len(kinds),
        kinds=[
            KeepRateOut(
                part=entry.kind.part,
                name=entry.kind.name,
                direction=entry.kind.direction,
                tried=entry.tally.tried,
                measured=entry.tally.measured,
                kept=entry.tally.kept,
                alone=entry.alone,
                rate=entry.tally.rate,
                best=_best(entry.tally),
            )
            for entry in kinds[:limit]
        ],
    )


def _best(tally: Tally) -> BestEffectOut | None:
    best = tally.best
    return BestEffectOut(experiment_id=best.experiment_id, effect=best.effect, se=best.se) if best else None
