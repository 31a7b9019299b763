"""The FastAPI application: `create_app(settings)` builds it, `autoresearch serve` runs it.

Starting the app migrates the database (Alembic upgrade), opens the research repo, pins the
first track's harness id and platform (from the settings), and puts each track's best branch
where the database says it is (a crash between the two writes can leave git behind). One
process per research repo: git writes are serialised by an in-process lock and events are
broadcast in-process.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from functools import partial

from cachetools import TTLCache
from fastapi import FastAPI
from starlette.concurrency import run_in_threadpool

from protocol.events import EventType, Queued
from server.api.router import ROUTERS
from server.context import AppContext
from server.core.body_limit import BodyLimit
from server.core.config import ServerSettings, get_settings
from server.core.db import Database, create_db_engine
from server.core.migrate import upgrade
from server.core.no_nul import RefuseNul
from server.core.openapi import install_openapi
from server.core.problems import install_problem_handlers
from server.core.rate_limit import PerCallerLimit
from server.core.request_metrics import RequestTimer, request_times
from server.crud.requeue import requeue_unmeasured_best
from server.crud.tokens import sync_env_admin
from server.crud.tracks import TrackState, all_tracks, current_best, load_track
from server.events import Broadcaster
from server.fleet import Fleet, queued_runs
from server.flows import leases, summaries, workers
from server.flows.decisions import carry_ahead, queue_best_repeats
from server.harness_pin import configured_harness_id, pin
from server.mcp.http import mount_mcp
from server.metrics import metrics_registry
from server.models import utcnow
from server.pages import register as register_pages
from server.presence import Presence
from server.standings_cache import TotalsCache
from server.trainpy.research_repo import ResearchRepo

log = logging.getLogger(__name__)
API_PREFIX = "/api/v1"
# A checkpoint a second, by a task that holds no lock, instead of SQLite's own inside a commit that
# reaches 1000 pages, which stalled the writers queued behind it (docs/benchmarks.md, "API load").
WAL_CHECKPOINT_SECONDS = 1.0


class StartupError(RuntimeError):
    pass


def build_context(settings: ServerSettings) -> AppContext:
    url = settings.resolved_database_url
    repo_path = settings.resolved_research_repo
    if not (repo_path / "HEAD").is_file():
        raise StartupError(f"no research repo at {repo_path}: run `autoresearch init` first (RESEARCH_REPO)")
    upgrade(url)
    db = Database(create_db_engine(url, settings.sqlite_busy_timeout_ms, checkpoint_in_background=True))
    repo = ResearchRepo(repo_path)
    harness_id = configured_harness_id(settings)
    with db.write() as session:
        first = load_track(session, lock=True)
        if first.best_commit is None:
            raise StartupError(f"the database at {url} has no project: run `autoresearch init` first")
        pin(first, harness_id, settings.platform or None)
        sync_env_admin(session, settings.admin_token)
        session.flush()
        for track in all_tracks(session):
            state = current_best(session, track.id)
            if state.best_commit is not None and repo.best(state.branch) != state.best_commit:
                log.warning(
                    "git branch %s was at %s; moving it to the database's best %s",
                    state.branch,
                    repo.best(state.branch),
                    state.best_commit,
                )
                repo.set_best(state.best_commit, state.branch)
    context = AppContext(
        settings=settings,
        db=db,
        repo=repo,
        bus=Broadcaster(
            history_size=settings.sse_history,
            max_subscribers=settings.sse_max_subscribers,
            max_per_client=settings.sse_max_per_client,
        ),
        presence=Presence(write_every_s=min(10.0, settings.lease_seconds / 3)),
        principals=TTLCache(maxsize=10_000, ttl=settings.token_cache_seconds),
        totals=TotalsCache(),
        request_times=request_times(),
        fleet=Fleet(settings.fleet_progress_per_s),
        note_limit=PerCallerLimit(settings.notes_per_minute, window_s=60.0),
    )
    summaries.backfill(context)  # experiments from before migration 0009: what their changes touched
    with db.read() as session:
        tracks = [track.id for track in all_tracks(session, archived=False)]
    for track_id in tracks:
        queue_what_the_best_is_due(context, track_id)
    # Experiments decided before change_kinds existed, or while no server ran to summarise them.
    summarised = summaries.summarise_pending(context)
    if summarised:
        log.info("summarised the changes of %d decided experiments (keep rates, near misses)", summarised)
    return context


def queue_what_the_best_is_due(ctx: AppContext, track_id: int) -> None:
    """At start, one of two things for a track, under its lock. A measured best gets the repeats it
    is due (after a migration, or a switch from the greedy rule): it is run again until its value
    rests on its measuring runs (NOISE_RUNS for the baseline, BEST_REPEATS repeats for a kept
    change). A best with no valid measurement because its runs lost
    their workers (e.g. a first start without a working sandbox) is queued again: nothing is
    compared until it is measured."""
    with ctx.transaction() as tx:
        track: TrackState = current_best(tx.session, track_id, lock=True)
        if track.best_experiment_id is None:
            return
        again = requeue_unmeasured_best(tx.session, track.id, utcnow())
        if again is not None:
            log.warning(
                "the best of track %s, experiment %d, has no valid measurement: queued again",
                track.name,
                again.id,
            )
            tx.emit(
                Queued(
                    experiment_id=again.id,
                    attempts=0,
                    why="the best has no valid measurement",
                    track=track.name,
                ),
            )
            return
        if queued := queue_best_repeats(ctx, tx.session, track):
            log.info("queued %d repeat(s) of the best, experiment %d", queued, track.best_experiment_id)


async def _in_background(
    wait: Callable[[], Awaitable[object]], work: Callable[[], object], what: str
) -> None:
    """`work` in a thread each time `wait()` returns, for as long as the server runs. A failure is
    logged and the next round goes on: a database hiccup must not stop any of the server's
    background work for good."""
    while True:
        await wait()
        try:
            await run_in_threadpool(work)
        except Exception:
            log.exception("%s failed", what)


def _every(seconds: float) -> Callable[[], Awaitable[None]]:
    return lambda: asyncio.sleep(seconds)


def _each_event(bus: Broadcaster, seconds: float) -> Callable[[], Awaitable[None]]:
    """Returns every `seconds` once an event was published since the last return (a decision is
    an event)."""
    seen = -1

    async def wait() -> None:
        nonlocal seen
        await asyncio.sleep(seconds)
        while bus.last_event_id == seen:
            await asyncio.sleep(seconds)
        seen = bus.last_event_id

    return wait


def _each_keep(ctx: AppContext) -> Callable[[], Awaitable[None]]:
    """Returns after each keep (at once for those since the last return)."""
    kept = ctx.bus.signal(EventType.KEPT)

    async def wait() -> None:
        await kept.wait()
        kept.clear()

    return wait


def create_app(settings: ServerSettings | None = None) -> FastAPI:
    settings = settings or get_settings()
    ctx = build_context(settings)

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        ctx.bus.bind(asyncio.get_running_loop())
        # Everything alive now (modules, the app, the ORM's mappers) lives as long as the process.
        # Frozen, Python's full collections no longer scan it, and requests no longer wait on
        # them (docs/benchmarks.md has the pauses before and after).
        gc.collect()
        gc.freeze()
        tasks = [
            asyncio.create_task(
                _in_background(
                    _every(ctx.settings.lease_sweep_seconds),
                    partial(leases.expire_leases, ctx),
                    "expiring leases",
                )
            ),
            asyncio.create_task(
                _in_background(
                    _each_event(ctx.bus, ctx.settings.standings_refresh_seconds),
                    partial(ctx.totals.refresh, ctx.db),
                    "recomputing the agent standings",
                )
            ),
            asyncio.create_task(ctx.fleet.keep_counted(lambda: workers.online(ctx))),
            asyncio.create_task(
                ctx.fleet.keep_looking(lambda n: ctx.in_worker_thread(queued_runs, ctx.db, n), ctx.bus)
            ),
            asyncio.create_task(
                _in_background(
                    _each_event(ctx.bus, summaries.SWEEP_SECONDS),
                    partial(summaries.summarise_pending, ctx),
                    "summarising the changes of decided experiments",
                )
            ),
            # After each keep, the changes queued on the former best are carried onto the new one
            # with no lock held, so that the claims re-applying them find it done (server/trainpy/carry.py).
            asyncio.create_task(
                _in_background(_each_keep(ctx), partial(carry_ahead, ctx), "carrying queued changes")
            ),
        ]
        if ctx.db.sqlite:  # the WAL into the database file by a thread that holds no lock (core/db.py)
            tasks.append(
                asyncio.create_task(
                    _in_background(_every(WAL_CHECKPOINT_SECONDS), ctx.db.checkpoint, "checkpointing the WAL")
                )
            )
        try:
            async with mcp_sessions.run():
                yield
        finally:
            for task in tasks:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            ctx.repo.close()
            ctx.db.dispose()

    app = FastAPI(
        title="autoresearch server",
        version="1",
        description="Agents submit changes of train.py; workers run them; the server keeps or reverts. "
        "See docs/api.md.",
        lifespan=lifespan,
        openapi_url=f"{API_PREFIX}/openapi.json",
        docs_url="/docs",
        redoc_url=None,
    )
    app.state.ctx = ctx
    app.state.metrics = metrics_registry(ctx)
    install_problem_handlers(app)
    install_openapi(app)
    for router in ROUTERS:
        app.include_router(router, prefix=API_PREFIX)
    register_pages(app)
    mcp_sessions = mount_mcp(app, ctx)
    app.add_middleware(BodyLimit, max_bytes=settings.max_request_bytes)
    app.add_middleware(RefuseNul)
    app.add_middleware(RequestTimer, times=ctx.request_times, api_prefix=API_PREFIX)
    return app
