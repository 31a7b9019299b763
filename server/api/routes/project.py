"""A track's state: best, program, leaderboard, noise, agents; and what was tried on a commit."""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated

from fastapi import APIRouter, Path, Query
from fastapi.responses import PlainTextResponse

from protocol.schemas import AgentsOut, BestOut, ChildrenOut, LeaderboardOut, NoiseListOut, RuleOut
from server.api.deps import Ctx, Reader, Responses
from server.api.params import TrackQuery
from server.core.problems import Problem
from server.crud import noise, standings
from server.crud.experiments import by_commit, children, resolve_commit
from server.crud.tracks import TrackState, resolve

router = APIRouter(tags=["project"])
_AUTH: Responses = {
    401: {"description": "reads need a token (PUBLIC_READS=false)"},
    404: {"description": "no such track"},
    422: {"description": "no track named where there are several"},
}


def _best(ctx: Ctx, track: TrackState) -> BestOut:
    with ctx.db.read() as session:
        best = standings.best(session, track)
    if best is None:
        raise Problem(409, "not-initialised", "the project has no baseline yet; run `autoresearch init`")
    return BestOut(
        **asdict(best),
        measured=best.val_bpb is not None,
        train_py=ctx.repo.train_py(best.commit).decode("utf-8", "replace"),
    )


def _track(ctx: Ctx, name: str | None) -> TrackState:
    with ctx.db.read() as session:
        return resolve(session, name)


@router.get("/best", responses={**_AUTH, 409: {"description": "not initialised"}})
def get_best(ctx: Ctx, _reader: Reader, track: TrackQuery = None) -> BestOut:
    """A track's current best: commit, val_bpb, its experiment and its train.py."""
    return _best(ctx, _track(ctx, track))


class MarkdownResponse(PlainTextResponse):
    media_type = "text/markdown; charset=utf-8"


@router.get(
    "/program", response_class=MarkdownResponse, responses={**_AUTH, 409: {"description": "not initialised"}}
)
def get_program(ctx: Ctx, _reader: Reader, track: TrackQuery = None) -> MarkdownResponse:
    """program.md of a track's best commit: the rules its agents follow (the train.py contract, the
    time budget, the sandbox, how decisions are made)."""
    best = _best(ctx, _track(ctx, track))
    return MarkdownResponse(ctx.repo.program_md(best.commit).decode("utf-8", "replace"))


@router.get("/leaderboard", responses={**_AUTH, 409: {"description": "not initialised"}})
def get_leaderboard(ctx: Ctx, _reader: Reader, track: TrackQuery = None) -> LeaderboardOut:
    """A track's kept lineage from its baseline, its best results, and each agent's standing on it."""
    state = _track(ctx, track)
    best = _best(ctx, state).model_copy(update={"train_py": ""})
    with ctx.db.read() as session:
        return LeaderboardOut(
            best=best,
            noise=noise.current_view(session, state.id, state.platform, state.harness_id, state.name),
            lineage=standings.lineage(session, state.id),
            top=standings.top_results(session, state),
            agents=standings.agent_standings(session, state.id, ctx.totals.current(ctx.db)),
        )


@router.get("/noise", responses=_AUTH)
def get_noise(ctx: Ctx, _reader: Reader, track: TrackQuery = None) -> NoiseListOut:
    """The decision rule's settings, and the run-to-run noise of val_bpb of a track per platform and
    harness (sigma, its degrees of freedom, the runs it rests on); `current` marks the one its
    decisions use."""
    settings = ctx.settings
    with ctx.db.read() as session:
        state = resolve(session, track)
        estimates = noise.estimates(
            session, state.id, state.platform, state.harness_id, state.name, settings.offsets_half_life_h
        )
    return NoiseListOut(rule=RuleOut.model_validate(settings, from_attributes=True), estimates=estimates)


@router.get(
    "/commits/{sha}/children",
    responses={401: _AUTH[401], 404: {"description": "unknown commit"}},
)
def get_children(
    ctx: Ctx,
    _reader: Reader,
    sha: Annotated[str, Path(pattern=r"^[0-9a-fA-F]{4,40}$")],
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
) -> ChildrenOut:
    """The experiments tried on top of a commit (newest first)."""
    with ctx.db.read() as session:
        try:
            commit = resolve_commit(session, sha)
        except LookupError as exc:
            raise Problem(404, "unknown-commit", str(exc)) from exc
        own = by_commit(session, commit)
        return ChildrenOut(
            commit=commit, experiment_id=own.id if own else None, children=children(session, commit, limit)
        )


@router.get("/agents", responses=_AUTH)
def get_agents(ctx: Ctx, _reader: Reader, track: TrackQuery = None) -> AgentsOut:
    """Every agent with its standing on a track (same ordering as the leaderboard; at most
    STANDINGS_REFRESH_SECONDS old)."""
    with ctx.db.read() as session:
        state = resolve(session, track)
        return AgentsOut(agents=standings.agent_standings(session, state.id, ctx.totals.current(ctx.db)))
