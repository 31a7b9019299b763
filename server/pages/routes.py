"""The human pages: leaderboard, one experiment, agents, workers, notes (server-rendered HTML).

Handlers are plain functions, so FastAPI runs them in its thread pool like the API's reads. The
pages change nothing; they honour PUBLIC_READS like the API (see `Reader`).
"""

from __future__ import annotations

from typing import Annotated, Literal
from urllib.parse import urlencode

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import HTMLResponse
from sqlalchemy.orm import Session

from protocol.states import ExperimentStatus
from server import history
from server.api.deps import Ctx, Reader
from server.api.params import Cursor
from server.core.problems import Problem
from server.crud import pages, standings
from server.crud.experiments import get_view
from server.crud.leases import progress_of
from server.crud.notes import list_notes
from server.crud.results import latest_result
from server.crud.similar import similar_to_experiment
from server.crud.tracks import TrackState, all_tracks, by_name, current_best
from server.models import Experiment, Track
from server.pages.diff_view import render_diff
from server.pages.templating import templates

router = APIRouter(include_in_schema=False, default_response_class=HTMLResponse)

# The events that change what each page shows; pages refresh their live sections on them.
DECISION_EVENTS = "finished,kept,reverted,rebased,stale"
LEADERBOARD_EVENTS = f"queued,started,{DECISION_EVENTS}"
SUMMARISED = "summarised"  # near misses and keep rates count a decision once its change is summarised
LOG_LIMIT = 200_000  # characters of the log shown on the page; the API's /log has all of it
NOTES_SHOWN = 100  # notes per page (the newest); GET /api/v1/notes pages through all of them
NEAR_MISSES_SHOWN = 10  # on the leaderboard, strongest first; GET /api/v1/near-misses has more
KEEP_RATES_SHOWN = 50  # kinds of change on the agents page, most tried first; GET /api/v1/keep-rates


def _optional(value: str | None) -> str | None:
    """An empty form field ("all") means no filter."""
    if value is None or not value.strip():
        return None
    return value.strip()


def _status_filter(value: str | None) -> str | None:
    status = _optional(value)
    if status is not None and status not in set(ExperimentStatus):
        raise Problem(
            422, "unknown-status", f"status {status[:20]!r} is not one of {', '.join(ExperimentStatus)}"
        )
    return status


TrackParam = Annotated[str | None, Query(max_length=40)]


def _page_track(session: Session, name: str | None) -> tuple[TrackState, list[Track]]:
    """The track a page shows (`name`, else the first not archived) and every track (the
    selector); 404 for a name no track has."""
    tracks = all_tracks(session)
    name = _optional(name)
    if name is None:
        chosen = next((t for t in tracks if t.archived_at is None), tracks[0])
    else:
        found = by_name(session, name)
        if found is None:
            raise Problem(404, "unknown-track", f"no track named {name[:40]!r}")
        chosen = found
    return current_best(session, chosen.id), tracks


@router.get("/")
def leaderboard(
    request: Request,
    ctx: Ctx,
    _reader: Reader,
    track: TrackParam = None,
    status: Annotated[str | None, Query(max_length=20)] = None,
    agent: Annotated[str | None, Query(max_length=100)] = None,
    sort: pages.SortKey = "id",
    order: Literal["asc", "desc"] = "desc",
    page: Annotated[int, Query(ge=1, le=10_000_000)] = 1,
) -> HTMLResponse:
    status, agent = _status_filter(status), _optional(agent)
    with ctx.db.read() as session:
        shown, tracks = _page_track(session, track)
        totals = pages.status_totals(session, shown.id)
        plotted = request.app.state.pages_chart.view(session, totals, shown.id)
        summary = pages.summary(session, totals, plotted.plotted.crashed_runs, shown.id)
        table = pages.table_page(
            session,
            status=status,
            agent=agent,
            sort=sort,
            descending=order == "desc",
            page=page,
            track_id=shown.id,
        )
        agents = pages.agent_choices(session)
        near = history.near_miss_list(session, ctx.repo, shown, NEAR_MISSES_SHOWN)
    chosen = shown.name if track is not None else None  # the default track stays out of the links
    params = {
        "track": chosen,
        "status": status,
        "agent": agent,
        "sort": sort,
        "order": order,
        "page": table.page,
    }

    def table_url(**changes: object) -> str:
        merged = {**params, **changes}
        return "/?" + urlencode({k: v for k, v in merged.items() if v is not None and v != ""})

    return templates.TemplateResponse(
        request,
        "leaderboard.html",
        {
            "nav": "leaderboard",
            "track": shown,
            "tracks": tracks,
            "live_events": f"{LEADERBOARD_EVENTS},{SUMMARISED}",
            "summary": summary,
            "chart": plotted.markup,
            "table": table,
            "agents": agents,
            "statuses": list(ExperimentStatus),
            "params": params,
            "table_url": table_url,
            "near": near,
        },
    )


@router.get("/experiments/{experiment_id}")
def experiment_page(
    request: Request, ctx: Ctx, _reader: Reader, experiment_id: Annotated[int, Path(ge=1, le=2**62)]
) -> HTMLResponse:
    with ctx.db.read() as session:
        view = get_view(session, experiment_id)
        if view is None:
            return templates.TemplateResponse(
                request, "not_found.html", {"what": f"experiment {experiment_id}"}, status_code=404
            )
        place = pages.run_place(session, experiment_id)
        base_id = pages.experiment_id_of_commit(session, view.base)
        notes = list_notes(session, experiment_id=experiment_id, limit=NOTES_SHOWN).items
        experiment = session.get(Experiment, experiment_id)
        assert experiment is not None
        similar = similar_to_experiment(session, experiment)
        log = latest_result(session, experiment_id)
        progress_run, stored = progress_of(session, experiment_id)
        several_tracks = len(all_tracks(session)) > 1
    new = ctx.repo.train_py(view.commit).decode("utf-8", "replace")
    old = ctx.repo.train_py(view.base).decode("utf-8", "replace") if view.base else ""
    samples = [[s.step, s.loss, s.fraction, s.elapsed_s, s.phase, s.tokens_per_s] for s in stored]
    log_text = log.log_tail if log is not None else ""
    return templates.TemplateResponse(
        request,
        "experiment.html",
        {
            "nav": None,
            "live_events": f"queued,started,progress,note,{DECISION_EVENTS}",
            "live_experiment": experiment_id,
            "e": view,
            "several_tracks": several_tracks,
            "place": place,
            "notes": notes,
            "similar": similar,
            "base_id": base_id,
            "diff": render_diff(old, new),
            "log_text": log_text[-LOG_LIMIT:],
            "log_cut": max(0, len(log_text) - LOG_LIMIT),
            "error_message": log.error_message if log is not None else None,
            "samples": samples,
            "progress_run": progress_run,
            "active": view.status in (ExperimentStatus.QUEUED, ExperimentStatus.RUNNING),
        },
    )


@router.get("/agents")
def agents_page(request: Request, ctx: Ctx, _reader: Reader, track: TrackParam = None) -> HTMLResponse:
    with ctx.db.read() as session:
        shown, tracks = _page_track(session, track)
        rows = standings.agent_standings(session, shown.id)
        contributions = pages.best_contributions(session, shown.id)
        rates = history.keep_rate_table(session, shown, limit=KEEP_RATES_SHOWN)
    return templates.TemplateResponse(
        request,
        "agents.html",
        {
            "nav": "agents",
            "track": shown,
            "tracks": tracks,
            "live_events": f"{DECISION_EVENTS},{SUMMARISED}",
            "agents": rows,
            "contributions": contributions,
            "rates": rates,
        },
    )


@router.get("/workers")
def workers_page(request: Request, ctx: Ctx, _reader: Reader) -> HTMLResponse:
    with ctx.db.read() as session:
        rows = pages.workers(session, ctx.settings.lease_seconds, all_tracks(session))
    return templates.TemplateResponse(
        request,
        "workers.html",
        {
            "nav": "workers",
            "live_events": f"started,{DECISION_EVENTS}",
            # Heartbeats are not events: refresh now and then so that "online" stays true.
            "live_every_s": max(5, int(ctx.settings.lease_seconds / 3)),
            "workers": rows,
            "online_window_s": int(2 * ctx.settings.lease_seconds),
        },
    )


@router.get("/transfer")
def transfer_page(request: Request, ctx: Ctx, _reader: Reader) -> HTMLResponse:
    with ctx.db.read() as session:
        answer = history.transfer_view(session)
        names = [t.name for t in all_tracks(session)]
    shown = {t.track for item in answer.items for t in item.tracks}
    return templates.TemplateResponse(
        request,
        "transfer.html",
        {
            "nav": "transfer",
            "live_events": DECISION_EVENTS,
            "items": answer.items,
            "track_names": [name for name in names if name in shown],
        },
    )


@router.get("/notes")
def notes_page(
    request: Request,
    ctx: Ctx,
    _reader: Reader,
    author: Annotated[str | None, Query(max_length=100)] = None,
    cursor: Cursor = None,
) -> HTMLResponse:
    author = _optional(author)
    with ctx.db.read() as session:
        page = list_notes(
            session, author=author, limit=NOTES_SHOWN, before_id=int(cursor) if cursor else None
        )
        authors = pages.note_authors(session)
    older = {"author": author, "cursor": page.next_cursor}
    return templates.TemplateResponse(
        request,
        "notes.html",
        {
            "nav": "notes",
            "live_events": "note",
            "notes": page.items,
            "next_cursor": page.next_cursor,
            "next_query": urlencode({k: v for k, v in older.items() if v}),
            "authors": authors,
            "author": author,
        },
    )
