"""Experiments: submit, read, list, diff, log, progress, cancel, retry."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header, Path, Query, Response
from fastapi.responses import PlainTextResponse
from starlette.concurrency import run_in_threadpool

from protocol.result import ProgressEvent
from protocol.schemas import (
    CancelOut,
    ExperimentOut,
    ExperimentPage,
    PortIn,
    ProgressOut,
    SimilarOut,
    SubmitIn,
    SubmitOut,
)
from server.api.deps import Admin, Agent, Ctx, Reader, Responses
from server.api.params import ExperimentsQuery, since_utc
from server.context import AppContext
from server.core.problems import unknown_experiment
from server.crud import experiments as crud
from server.crud.experiments import Touched
from server.crud.leases import progress_of
from server.crud.results import latest_result
from server.crud.similar import similar_to_experiment
from server.crud.tracks import named_or_only
from server.flows import cancel, ports
from server.flows.submit import submit
from server.models import Experiment
from server.rules.failures import log_with_message
from server.trainpy.patches import make_patch

router = APIRouter(prefix="/experiments", tags=["experiments"])
ExperimentId = Annotated[int, Path(ge=1, le=2**62)]
RunNumber = Annotated[int | None, Query(ge=1, le=10_000, description="a run's number (default: the latest)")]
_ERRORS: Responses = {
    401: {"description": "missing or unknown token"},
    403: {"description": "wrong kind of token"},
    404: {"description": "no such experiment (or track, or base)"},
}


def _train_py(ctx: AppContext, commit: str | None) -> str:
    """train.py of a commit as text ("" for none: the baseline's base)."""
    return ctx.repo.train_py(commit).decode("utf-8", "replace") if commit else ""


def _commits(ctx: AppContext, experiment_id: int) -> tuple[str, str | None]:
    """An experiment's commit and base commit; Problem 404 when there is no such experiment."""
    with ctx.db.read() as session:
        experiment = session.get(Experiment, experiment_id)
    if experiment is None:
        raise unknown_experiment(experiment_id)
    return experiment.commit_sha, experiment.base_commit


@router.post(
    "",
    status_code=201,
    responses={
        200: {
            "model": SubmitOut,
            "description": "the same train.py was already submitted: that experiment",
        },
        409: {"description": "the project has no baseline yet, or the track is archived"},
        413: {"description": "patch or train.py over the size limit"},
        422: {
            "description": "invalid change (precise reason in `detail`), a base of another track, or no "
            "track named where there are several"
        },
        429: {"description": "too many queued experiments for this agent"},
        **_ERRORS,
    },
)
async def submit_experiment(
    ctx: Ctx,
    agent: Agent,
    body: SubmitIn,
    response: Response,
    idempotency_key: Annotated[str | None, Header(max_length=200)] = None,
) -> SubmitOut:
    """Queue a change of train.py: a unified diff against `base` (default: the best) or a whole file.
    The answer lists the earlier experiments whose change resembles it (`similar`)."""
    outcome = await run_in_threadpool(submit, ctx, agent, body, idempotency_key)
    response.status_code = 201 if outcome.created else 200
    response.headers["Location"] = f"/api/v1/experiments/{outcome.experiment_id}"
    assert outcome.view is not None
    return SubmitOut(**dict(outcome.view), similar=outcome.similar)


@router.get("", responses=_ERRORS)
def list_experiments(
    ctx: Ctx, _reader: Reader, query: Annotated[ExperimentsQuery, Query()]
) -> ExperimentPage:
    """Experiments, newest first, one page at a time (follow `next_cursor`); of one track, or of all."""
    with ctx.db.read() as session:
        return crud.list_page(
            session,
            track_id=named_or_only(session, query.track).id if query.track is not None else None,
            status=query.status,
            agent=query.agent,
            base=query.base,
            since=since_utc(query.since),
            limit=query.limit,
            before_id=int(query.cursor) if query.cursor else None,
            text=query.text,
            touched=Touched(constant=query.constant, line=query.line),
        )


def _view(ctx: AppContext, experiment_id: int) -> ExperimentOut | None:
    with ctx.db.read() as session:
        return crud.get_view(session, experiment_id)


@router.get("/{experiment_id}", responses=_ERRORS)
async def get_experiment(ctx: Ctx, _reader: Reader, experiment_id: ExperimentId) -> ExperimentOut:
    """Status, result and metrics, decision and its reason, timing."""
    # What agents poll: async, so that only the database work goes to a thread (a sync endpoint
    # takes a second thread hop to validate its answer).
    view = await run_in_threadpool(_view, ctx, experiment_id)
    if view is None:
        raise unknown_experiment(experiment_id)
    return view


class DiffResponse(PlainTextResponse):
    media_type = "text/x-diff"


@router.get("/{experiment_id}/diff", response_class=DiffResponse, responses=_ERRORS)
def get_diff(ctx: Ctx, _reader: Reader, experiment_id: ExperimentId) -> DiffResponse:
    """The unified diff of train.py from the experiment's base to its commit."""
    commit, base = _commits(ctx, experiment_id)
    return DiffResponse(make_patch(_train_py(ctx, base), _train_py(ctx, commit)))


class PythonResponse(PlainTextResponse):
    media_type = "text/x-python; charset=utf-8"


@router.get("/{experiment_id}/train.py", response_class=PythonResponse, responses=_ERRORS)
def get_train_py(ctx: Ctx, _reader: Reader, experiment_id: ExperimentId) -> PythonResponse:
    """The experiment's whole train.py, as plain text."""
    commit, _base = _commits(ctx, experiment_id)
    return PythonResponse(_train_py(ctx, commit))


@router.get("/{experiment_id}/log", response_class=PlainTextResponse, responses=_ERRORS)
def get_log(
    ctx: Ctx, _reader: Reader, experiment_id: ExperimentId, run: RunNumber = None
) -> PlainTextResponse:
    """The end of a run's output (as the harness captured it; default: the latest run with a
    result), then the harness's verdict and message (its traceback once); empty until a result
    arrives."""
    with ctx.db.read() as session:
        experiment = session.get(Experiment, experiment_id)
        if experiment is None:
            raise unknown_experiment(experiment_id)
        result = latest_result(session, experiment_id, run)
    if result is None:
        return PlainTextResponse("")
    return PlainTextResponse(
        log_with_message(result.log_tail, result.status, result.error_class, result.error_message)
    )


@router.get("/{experiment_id}/progress", responses=_ERRORS)
def get_progress(
    ctx: Ctx, _reader: Reader, experiment_id: ExperimentId, run: RunNumber = None
) -> ProgressOut:
    """The stored progress samples (loss curve) of a run's latest attempt, oldest first (default:
    the latest run that reported progress)."""
    with ctx.db.read() as session:
        if session.get(Experiment, experiment_id) is None:
            raise unknown_experiment(experiment_id)
        number, samples = progress_of(session, experiment_id, run)
    return ProgressOut(
        experiment_id=experiment_id,
        run=number,
        events=[ProgressEvent.model_validate(sample, from_attributes=True) for sample in samples],
    )


@router.post(
    "/{experiment_id}/port",
    status_code=201,
    responses={
        200: {
            "model": SubmitOut,
            "description": "the same train.py is on that track already: that experiment",
        },
        409: {"description": "not kept, the track is archived, or the change does not apply to its best"},
        422: {"description": "the experiment's own track, or a bad track name"},
        **_ERRORS,
    },
)
async def port_experiment(
    ctx: Ctx, agent: Agent, experiment_id: ExperimentId, body: PortIn, response: Response
) -> SubmitOut:
    """Carry a kept experiment's change to another track: applied to that track's best as a rebase
    is, queued as a new experiment of the caller's (`ported_from`), and decided there on its own
    runs."""
    outcome = await run_in_threadpool(ports.port, ctx, agent, experiment_id, body)
    response.status_code = 201 if outcome.created else 200
    response.headers["Location"] = f"/api/v1/experiments/{outcome.experiment_id}"
    assert outcome.view is not None
    return SubmitOut(**dict(outcome.view), similar=outcome.similar)


@router.post(
    "/{experiment_id}/cancel", responses={409: {"description": "already decided or ended"}, **_ERRORS}
)
def cancel_experiment(ctx: Ctx, agent: Agent, experiment_id: ExperimentId) -> CancelOut:
    """Cancel a queued experiment at once, or ask the worker running it to stop; cancelling a
    cancelled experiment answers it as it is (twice is once)."""
    cancel.cancel(ctx, agent, experiment_id)
    view = _view(ctx, experiment_id)
    assert view is not None
    return CancelOut(experiment=view)


@router.post(
    "/{experiment_id}/retry",
    responses={409: {"description": "not infra_failed or cancelled, or it has a result"}, **_ERRORS},
)
def retry_experiment(ctx: Ctx, admin: Admin, experiment_id: ExperimentId) -> ExperimentOut:
    """Queue an `infra_failed` or `cancelled` experiment again, at the back, with its attempts reset
    (e.g. once the broken workers are fixed). Admin only."""
    cancel.retry(ctx, admin, experiment_id)
    view = _view(ctx, experiment_id)
    assert view is not None
    return view


# Has this been tried? -----------------------------------------------------------------------


@router.get("/{experiment_id}/similar", responses=_ERRORS)
def get_similar(ctx: Ctx, _reader: Reader, experiment_id: ExperimentId) -> SimilarOut:
    """The other experiments whose change is the same or nearly the same as this one's (earlier and
    later), most alike first, with their outcomes (docs/api.md, "Similar experiments")."""
    with ctx.db.read() as session:
        experiment = session.get(Experiment, experiment_id)
        if experiment is None:
            raise unknown_experiment(experiment_id)
        return SimilarOut(experiment_id=experiment_id, similar=similar_to_experiment(session, experiment))
