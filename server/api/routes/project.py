"""The project's state: best, leaderboard, noise, what was tried on a commit, agents."""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated

from fastapi import APIRouter, Path, Query
from fastapi.responses import PlainTextResponse

from client.schemas import AgentsOut, BestOut, ChildrenOut, LeaderboardOut, NoiseListOut, RuleOut
from server.api.deps import Ctx, Reader, Responses
from server.core.problems import Problem
from server.crud import noise, standings
from server.crud.experiments import by_commit, children, resolve_commit
from server.crud.project import load_project

router = APIRouter(tags=["project"])
_AUTH: Responses = {401: {"description": "reads need a token (PUBLIC_READS=false)"}}


def _best(ctx: Ctx) -> BestOut:
    with ctx.db.read() as session:
        best = standings.best(session)
    if best is None:
        raise Problem(409, "not-initialised", "the project has no baseline yet; run `autoresearch init`")
    return BestOut(
        **asdict(best),
        measured=best.val_bpb is not None,
        train_py=ctx.repo.train_py(best.commit).decode("utf-8", "replace"),
    )


@router.get("/best", responses={**_AUTH, 409: {"description": "not initialised"}})
def get_best(ctx: Ctx, _reader: Reader) -> BestOut:
    """The current best: commit, val_bpb, its experiment and its train.py."""
    return _best(ctx)


class MarkdownResponse(PlainTextResponse):
    media_type = "text/markdown; charset=utf-8"


@router.get(
    "/program", response_class=MarkdownResponse, responses={**_AUTH, 409: {"description": "not initialised"}}
)
def get_program(ctx: Ctx, _reader: Reader) -> MarkdownResponse:
    """program.md of the best commit: the rules every agent follows (the train.py contract, the
    time budget, the sandbox, how decisions are made)."""
    return MarkdownResponse(ctx.repo.program_md(_best(ctx).commit).decode("utf-8", "replace"))


@router.get("/leaderboard", responses={**_AUTH, 409: {"description": "not initialised"}})
def get_leaderboard(ctx: Ctx, _reader: Reader) -> LeaderboardOut:
    """The kept lineage from the baseline, the best results, and each agent's standing."""
    best = _best(ctx).model_copy(update={"train_py": ""})
    with ctx.db.read() as session:
        project = load_project(session)
        return LeaderboardOut(
            best=best,
            noise=noise.current_view(session, project.platform, project.harness_id),
            lineage=standings.lineage(session),
            top=standings.top_results(session, project.platform),
            agents=standings.agent_standings(session, ctx.totals.current(ctx.db)),
        )


@router.get("/noise", responses=_AUTH)
def get_noise(ctx: Ctx, _reader: Reader) -> NoiseListOut:
    """The decision rule's settings, and the run-to-run noise of val_bpb per platform and harness
    (sigma, its degrees of freedom, the runs it rests on); `current` marks the one decisions use."""
    settings = ctx.settings
    with ctx.db.read() as session:
        project = load_project(session)
        estimates = noise.estimates(session, project.platform, project.harness_id)
    return NoiseListOut(rule=RuleOut.model_validate(settings, from_attributes=True), estimates=estimates)


@router.get("/commits/{sha}/children", responses={**_AUTH, 404: {"description": "unknown commit"}})
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
def get_agents(ctx: Ctx, _reader: Reader) -> AgentsOut:
    """Every agent with its standing (same ordering as the leaderboard; at most
    STANDINGS_REFRESH_SECONDS old)."""
    with ctx.db.read() as session:
        return AgentsOut(agents=standings.agent_standings(session, ctx.totals.current(ctx.db)))
