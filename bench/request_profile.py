"""Where a request's CPU goes: one poll and one submit, profiled in-process against a real app.

    python bench/request_profile.py [--requests 200] [--top 12] [--db sqlite|postgresql] [--statements]

A fresh project is made with the server's own `init_project` (the built-in baseline train.py,
SQLite in a temporary folder or a scratch PostgreSQL database), and the real app (`create_app`)
answers through Starlette's TestClient, in this process. Three requests are measured:

- GET /api/v1/healthz: the reference (routing, middleware, a `SELECT 1`), the floor of any request;
- GET /api/v1/experiments/{id}: an agent's poll of its latest experiment;
- POST /api/v1/experiments: a submit of a patch on the baseline (a new change each time, as
  bench/api_load.py sends).

Each is first timed without a profiler: CPU per request (this process's user + system time,
client side included: compare with the reference) and wall time. Then the SQL statements one
request sends are counted (a SQLAlchemy `before_cursor_execute` listener: each is a round trip to
PostgreSQL), with the connections it checks out of the pool (each one more round trip there, the
pool's ping, and a BEGIN and a COMMIT or ROLLBACK on either database); `--statements` lists them.
Then yappi (CPU clock, every
thread: sync routes run in the thread pool) profiles the same requests, and the functions that
spend the most CPU are listed, first by own time and then, among the project's own, by total.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # testkit, beside bench/

import httpx2  # what Starlette's TestClient answers with
import yappi
from api_load import HARNESS_ID, PLATFORM, unique_change
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import Engine, event

from server.core.config import ServerSettings
from server.core.db import Database, create_db_engine
from server.crud.tokens import create_token
from server.crud.tracks import load_track
from server.main import create_app
from server.project_init import DEFAULT_PROGRAM_MD, DEFAULT_TRAIN_PY, init_project
from server.trainpy.patches import make_patch
from testkit.pg_scratch import new_database, scratch_cluster

REPO_ROOT = Path(__file__).resolve().parents[1]


def new_project(database_url: str, folder: Path) -> tuple[ServerSettings, str, str]:
    """A project made by the server's own `init_project`: its settings, an agent token, the baseline."""
    settings = ServerSettings(
        data_dir=folder,
        database_url=database_url,
        harness_id=HARNESS_ID,
        platform=PLATFORM,
        max_queued_per_agent=1_000_000,
        admin_token="",
    )
    init_project(settings, DEFAULT_TRAIN_PY, DEFAULT_PROGRAM_MD)
    db = Database(create_db_engine(settings.resolved_database_url))
    with db.write() as session:
        token = create_token(session, "agent", "profile-agent")
    with db.read() as session:
        baseline = load_track(session).baseline_commit
    db.dispose()
    assert baseline is not None
    return settings, token, baseline


@contextmanager
def project_app(database_url: str, folder: Path) -> Iterator[tuple[FastAPI, TestClient, str, str]]:
    """The app on a new project; yields it, its client, an agent token and the baseline commit."""
    settings, token, baseline = new_project(database_url, folder)
    app = create_app(settings)
    with TestClient(app) as http:
        yield app, http, token, baseline


def requests_of(
    http: TestClient, token: str, baseline: str, count: int
) -> dict[str, Callable[[], httpx2.Response]]:
    """The three requests; submits send patches made beforehand (making one is the client's work)."""
    headers = {"Authorization": f"Bearer {token}"}
    source = DEFAULT_TRAIN_PY.read_text()
    patches = iter([make_patch(source, unique_change(source, uuid.uuid4().hex)) for _ in range(count)])

    def submit() -> httpx2.Response:
        body = {"description": "profiled change", "patch": next(patches), "base": baseline}
        return http.post("/api/v1/experiments", json=body, headers=headers)

    latest = submit().json()["id"]
    return {
        "GET /healthz (reference)": lambda: http.get("/api/v1/healthz"),
        "poll GET /experiments/{id}": lambda: http.get(f"/api/v1/experiments/{latest}", headers=headers),
        "submit POST /experiments": submit,
    }


def cost(request: Callable[[], httpx2.Response], count: int) -> tuple[float, float]:
    """CPU and wall milliseconds per request, over `count` requests after 5 to warm up."""
    for _ in range(5):
        request().raise_for_status()
    cpu, wall = time.process_time(), time.perf_counter()
    for _ in range(count):
        request().raise_for_status()
    return (time.process_time() - cpu) * 1000 / count, (time.perf_counter() - wall) * 1000 / count


@contextmanager
def sql_sent(engine: Engine) -> Iterator[tuple[list[str], list[int]]]:
    """The SQL statements sent on `engine` in the block, and a count of its pool checkouts."""
    statements: list[str] = []
    checkouts = [0]

    def sent(_conn: object, _cursor: object, statement: str, *_args: object) -> None:
        statements.append(" ".join(statement.split()))

    def checkout(*_args: object) -> None:
        checkouts[0] += 1

    event.listen(engine, "before_cursor_execute", sent)
    event.listen(engine.pool, "checkout", checkout)
    try:
        yield statements, checkouts
    finally:
        event.remove(engine, "before_cursor_execute", sent)
        event.remove(engine.pool, "checkout", checkout)


def count_sql(engine: Engine, request: Callable[[], httpx2.Response], count: int) -> tuple[list[str], int]:
    """The statements of the last of `count` requests, and the pool checkouts per request."""
    with sql_sent(engine) as (statements, checkouts):
        for _ in range(count):
            del statements[:]
            request().raise_for_status()
    return statements, checkouts[0] // count


def where(stat: yappi.YFuncStat) -> str:
    path = Path(stat.module)
    shown = path.relative_to(REPO_ROOT) if path.is_relative_to(REPO_ROOT) else Path(*path.parts[-2:])
    return f"{stat.name} ({shown}:{stat.lineno})"


def ours(stat: yappi.YFuncStat) -> bool:
    path = Path(stat.module)
    return path.is_relative_to(REPO_ROOT) and ".venv" not in path.parts and "bench" not in path.parts


def profile(request: Callable[[], httpx2.Response], count: int, top: int) -> None:
    yappi.clear_stats()
    yappi.set_clock_type("cpu")
    yappi.start(builtins=False, profile_threads=True)
    for _ in range(count):
        request()
    yappi.stop()
    stats = list(yappi.get_func_stats())
    print(f"    top {top} by own CPU (ms per request, calls per request):")
    for stat in sorted(stats, key=lambda s: s.tsub, reverse=True)[:top]:
        print(f"      {stat.tsub * 1000 / count:7.3f}  {stat.ncall / count:6.1f}  {where(stat)}")
    print(f"    top {top} of the project's functions by total CPU (ms per request, calls per request):")
    for stat in sorted(filter(ours, stats), key=lambda s: s.ttot, reverse=True)[:top]:
        print(f"      {stat.ttot * 1000 / count:7.3f}  {stat.ncall / count:6.1f}  {where(stat)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=200, help="requests of each kind")
    parser.add_argument("--top", type=int, default=12, help="functions listed per request")
    parser.add_argument("--db", default="sqlite", choices=["sqlite", "postgresql"])
    parser.add_argument("--statements", action="store_true", help="list the SQL of one request of each kind")
    args = parser.parse_args()
    with ExitStack() as stack:
        folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="request-profile-")))
        database_url = (
            new_database(stack.enter_context(scratch_cluster()))
            if args.db == "postgresql"
            else f"sqlite:///{folder / 'profile.db'}"
        )
        app, http, token, baseline = stack.enter_context(project_app(database_url, folder))
        requests = requests_of(http, token, baseline, 2 * args.requests + 40)
        print(f"{args.db}, {args.requests} requests of each kind, in-process (client CPU included):")
        costs = {name: cost(request, args.requests) for name, request in requests.items()}
        reference = costs["GET /healthz (reference)"][0]
        for name, (cpu, wall) in costs.items():
            print(f"  {name:28s} {cpu:6.2f} ms CPU ({cpu / reference:4.1f}x healthz), {wall:6.2f} ms wall")
        engine = app.state.ctx.db.engine
        for name, request in requests.items():
            statements, checkouts = count_sql(engine, request, 10)
            print(f"  {name:28s} {len(statements):3d} SQL statements, {checkouts} connection checkouts")
            for statement in statements if args.statements else []:
                print(f"      {statement[:150]}")
        for name, request in requests.items():
            print(f"  {name}, profiled:")
            profile(request, args.requests, args.top)


if __name__ == "__main__":
    main()
