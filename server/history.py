"""What history says before an agent proposes: near misses (candidates to combine), keep rates
by kind of change and how changes transferred between tracks, as the API and the pages show them.
The rules are pure functions (server/rules/near_misses.py, server/rules/keep_rates.py,
server/rules/transfer.py); this module reads their inputs and builds views.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any, TypeVar, cast

from cachetools import LRUCache
from sqlalchemy.orm import Session

from protocol.schemas import (
    BestEffectOut,
    ChangeOut,
    ConstantSetOut,
    KeepRateOut,
    KeepRatesOut,
    KeepRateTotalsOut,
    NearMissesOut,
    NearMissOut,
    TransferItem,
    TransferOut,
    TransferTrack,
)
from protocol.states import Direction, Part
from server.crud import change_kinds
from server.crud import noise as noise_crud
from server.crud.experiments import labelled, track_names
from server.crud.tracks import TrackState
from server.crud.transfer import tried_on_several_tracks
from server.rules.keep_rates import KeepRates, Tally, keep_rates
from server.rules.near_misses import NearMiss, near_misses
from server.rules.transfer import transfers
from server.trainpy.patches import PatchError
from server.trainpy.research_repo import ResearchRepo, UnknownCommit

T = TypeVar("T")


def near_miss_list(session: Session, repo: ResearchRepo, track: TrackState, limit: int) -> NearMissesOut:
    """The `limit` strongest near misses of the track, on its platform (server/rules/near_misses.py)."""
    estimate = noise_crud.noise(session, track.id, track.platform, track.harness_id)
    noise_sigma = estimate.sigma if estimate is not None else None

    def ranked() -> list[NearMiss]:
        return near_misses(change_kinds.reverted_gains(session, track.id, track.platform), noise_sigma)

    # The pooled noise changes with runs, not decisions: it is one of the arguments.
    found = NEAR_MISSES.get(session, (track.id, track.platform, noise_sigma), ranked)[:limit]
    experiments = labelled(session, (n.experiment_id for n in found))
    kinds = change_kinds.stored(session, list(experiments), track.platform)
    best = track.best_commit
    items = []
    for near in found:
        e, agent = experiments[near.experiment_id]
        items.append(
            NearMissOut(
                experiment_id=e.id,
                agent=agent,
                description=e.description,
                effect=near.effect,
                se=near.se,
                pooled_se=near.pooled_se,
                z=near.z,
                runs=e.compared_runs or 0,
                reference_runs=e.best_runs or 0,
                val_bpb=e.val_bpb,
                reference=e.best_before_commit,
                reference_is_best=e.best_before_commit is not None and e.best_before_commit == best,
                applies_to_best=best is not None
                and e.base_commit is not None
                and applies_to(repo, e.base_commit, e.commit_sha, best),
                reason=e.decision_reason,
                changes=change_view(e.changes_parsed, kinds.get(e.id, [])),
                finished_at=e.finished_at,
            )
        )
    return NearMissesOut(track=track.name, noise_sigma=noise_sigma, best=best, items=items)


@functools.lru_cache(maxsize=4096)
def applies_to(repo: ResearchRepo, base: str, commit: str, best: str) -> bool:
    """Whether the change from `base` to `commit` applies to `best` and changes it. Commits never
    change, so the answer is cached (a diff of two train.py files takes milliseconds)."""
    try:
        return repo.moved(base, commit, best).changes
    except (PatchError, UnknownCommit):  # UnknownCommit: the research repo lost one of them
        return False


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
    track: TrackState,
    *,
    part: Part | None = None,
    name: str | None = None,
    min_tried: int = 1,
    limit: int = 100,
) -> KeepRatesOut:
    """Keep rates by kind of change of the track, on its platform and harness (server/rules/keep_rates.py)."""
    pins = (track.id, track.platform, track.harness_id)
    rates: KeepRates = KEEP_RATES.get(
        session, pins, lambda: keep_rates(change_kinds.outcomes(session, *pins))
    )
    kinds = [
        entry
        for entry in rates.kinds
        if (part is None or entry.kind.part == part)
        and (name is None or entry.kind.name == name)
        and entry.tally.tried >= min_tried
    ]
    return KeepRatesOut(
        track=track.name,
        platform=track.platform,
        harness_id=track.harness_id,
        overall=KeepRateTotalsOut(unparsed=rates.unparsed, **_tally(rates.overall)),
        kinds_total=len(kinds),
        kinds=[
            KeepRateOut(
                part=entry.kind.part,
                name=entry.kind.name,
                direction=entry.kind.direction,
                alone=entry.alone,
                **_tally(entry.tally),
            )
            for entry in kinds[:limit]
        ],
    )


class SinceLastDecision:
    """What was computed last from the decided experiments, per database and arguments.

    A decided experiment's kinds, outcome and judgement never change, so the decided experiments'
    count and id sum (one aggregate) say when to compute again. Pages are fetched again on every
    decision, and computing reads every counted experiment: thousands of rows
    (docs/benchmarks.md, "Keep rates and near misses").
    """

    def __init__(self, size: int = 64) -> None:
        # Bounded: the arguments come from query strings (another `part` or `limit`, another entry).
        self._computed: LRUCache[tuple[Any, ...], tuple[tuple[int, int], Any]] = LRUCache(maxsize=size)
        self._lock = threading.Lock()

    def get(self, session: Session, arguments: tuple[Any, ...], compute: Callable[[], T]) -> T:
        place = (str(session.get_bind().engine.url), *arguments)
        state = change_kinds.decided(session)
        with self._lock:  # cachetools' caches are not thread-safe; requests run in threads
            computed = self._computed.get(place)
        if computed is None or computed[0] != state:
            computed = state, compute()  # two requests at once may both compute: the same answer
            with self._lock:
                self._computed[place] = computed
        return cast(T, computed[1])

    def clear(self) -> None:
        with self._lock:
            self._computed.clear()


KEEP_RATES = SinceLastDecision()
NEAR_MISSES = SinceLastDecision()


def _tally(tally: Tally) -> dict[str, Any]:
    best = tally.best
    return {
        "tried": tally.tried,
        "measured": tally.measured,
        "kept": tally.kept,
        "rate": tally.rate,
        "best": BestEffectOut(experiment_id=best.experiment_id, effect=best.effect, se=best.se)
        if best
        else None,
    }


def transfer_view(session: Session, limit: int = 100) -> TransferOut:
    """The `limit` newest changes tried on more than one track, with their outcome on each."""
    found = transfers(tried_on_several_tracks(session))[:limit]
    ids = {i for t in found for i in (t.first_experiment_id, *t.outcomes.values())}
    experiments = labelled(session, ids)
    tracks = track_names(session, (e.track_id for e, _agent in experiments.values()))
    items = []
    for change in found:
        first, agent = experiments[change.first_experiment_id]
        outcomes = []
        for experiment_id in change.outcomes.values():
            e, _agent = experiments[experiment_id]
            outcomes.append(
                TransferTrack(
                    track=tracks[e.track_id],
                    experiment_id=e.id,
                    status=e.status,
                    decision=e.decision,
                    effect=e.effect,
                    se=e.effect_se,
                    runs=e.compared_runs,
                    reference_runs=e.best_runs,
                    val_bpb=e.val_bpb,
                    ported_from=e.ported_from_id,
                )
            )
        items.append(
            TransferItem(
                description=first.description,
                agent=agent,
                first_experiment_id=first.id,
                tracks=outcomes,
            )
        )
    return TransferOut(items=items)
