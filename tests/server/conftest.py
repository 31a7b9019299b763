"""Fixtures for the server tests: real SQLite files, a real PostgreSQL server, a live uvicorn server.

`postgres_url` uses $TEST_POSTGRES_URL when set; otherwise it starts a throwaway PostgreSQL
cluster (initdb into a temporary folder, as user postgres when running as root) on a free port,
and removes it at the end of the session. Each test gets its own database on it.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack
from dataclasses import dataclass
from pathlib import Path

import pytest
from fastapi import FastAPI
from sqlalchemy.engine import make_url

from client import Client
from protocol.schemas import ClaimOut, ResultOutcome
from server.context import AppContext
from server.core.config import ServerSettings
from server.crud.tokens import create_token
from server.main import create_app
from server.project_init import init_project
from server.serving import served_in_thread
from testkit.pg_scratch import copy_database, new_database, scratch_cluster

HARNESS_ID = "test-harness"
DEVICE = "cpu"
BASELINE = '''"""A tiny train.py for server tests (never executed by them)."""

LEARNING_RATE = 0.01
WARMUP_STEPS = 10
DEPTH = 4
WIDTH = 64


def build_model(ctx):
    raise NotImplementedError


def train(model, ctx):
    raise NotImplementedError
'''


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A PostgreSQL server URL (superuser), for the session."""
    given = os.environ.get("TEST_POSTGRES_URL")
    if given:
        yield given
        return
    with scratch_cluster() as url:
        yield url


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh, empty database: a SQLite file, then a PostgreSQL database (the test runs on both)."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'db.sqlite'}"
    return new_database(request.getfixturevalue("postgres_url"))


def make_settings(tmp_path: Path, database_url: str | None = None, **overrides: object) -> ServerSettings:
    """Settings of a test server. The protocol tests report one run per experiment, so they judge
    with the greedy rule; the noise-aware rule's tests ask for it (`decision_rule="noise_aware"`)."""
    values: dict[str, object] = {
        "data_dir": tmp_path / "data",
        "database_url": database_url or "",
        "harness_id": HARNESS_ID,
        "platform": DEVICE,
        "admin_token": "admin-secret",
        "decision_rule": "greedy",
        **overrides,
    }
    return ServerSettings(**values)  # type: ignore[arg-type]


def init_with_small_baseline(settings: ServerSettings, tmp_path: Path, source: str = BASELINE) -> int:
    folder = tmp_path / "baseline"
    folder.mkdir(exist_ok=True)
    (folder / "train.py").write_text(source)
    (folder / "program.md").write_text("# Instructions\nMake val_bpb lower.\n")
    return init_project(settings, folder / "train.py", folder / "program.md")


@dataclass
class Live:
    """A running server with helpers to make tokens and SDK clients."""

    url: str
    app: FastAPI
    settings: ServerSettings

    @property
    def ctx(self) -> AppContext:
        return self.app.state.ctx

    def token(self, kind: str, name: str | None = None) -> str:
        with self.ctx.db.write() as session:
            return create_token(session, kind, name or f"{kind}-{uuid.uuid4().hex[:8]}")

    def client(self, kind: str | None = None, name: str | None = None) -> Client:
        return Client(self.url, self.token(kind, name) if kind else None)

    def admin(self) -> Client:
        return Client(self.url, "admin-secret")


def serve(app: FastAPI, port: int | None = None) -> AbstractContextManager[str]:
    """Run `app` with uvicorn in a thread (on a free port unless given); yield its URL."""
    return served_in_thread(app, port or 0)


LiveFactory = Callable[..., Live]


class InitialisedProjects:
    """`autoresearch init` once per baseline and database server in a test process, then copied:
    a project's data folder (the SQLite database, the research repo) and, on PostgreSQL, its
    database as a template. Init runs git init and every migration and queues the baseline; a
    copy is the same state (to its timestamps), at a fraction of the cost (docs/benchmarks.md)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.made: dict[tuple[str, str | None], ServerSettings] = {}

    def copy_into(self, settings: ServerSettings, baseline: str) -> None:
        """Give `settings` (a fresh data folder; SQLite, or an empty PostgreSQL database) an
        initialised project."""
        url = make_url(settings.resolved_database_url)
        server = None
        if url.get_backend_name() == "postgresql":
            server = url.set(database="postgres").render_as_string(hide_password=False)
        key = (baseline, server)
        if key not in self.made:
            folder = Path(tempfile.mkdtemp(dir=self.root))
            template = make_settings(folder, new_database(server) if server else None)
            init_with_small_baseline(template, folder, baseline)
            self.made[key] = template
        template = self.made[key]
        shutil.copytree(template.data_dir, settings.data_dir)
        if server:
            copy_database(template.resolved_database_url, settings.resolved_database_url)
        elif settings.database_url:  # a SQLite file elsewhere than the data folder
            shutil.copyfile(make_url(template.resolved_database_url).database, url.database)


@pytest.fixture(scope="session")
def initialised_projects(tmp_path_factory: pytest.TempPathFactory) -> InitialisedProjects:
    return InitialisedProjects(tmp_path_factory.mktemp("initialised"))


@pytest.fixture
def live_factory(tmp_path: Path, initialised_projects: InitialisedProjects) -> Iterator[LiveFactory]:
    """Start initialised servers: live_factory(database_url=None, baseline=BASELINE, **settings)."""
    with ExitStack() as stack:
        started: list[Live] = []

        def start(database_url: str | None = None, baseline: str = BASELINE, **overrides: object) -> Live:
            settings = make_settings(tmp_path / f"project-{len(started)}", database_url, **overrides)
            initialised_projects.copy_into(settings, baseline)
            app = create_app(settings)
            started.append(Live(stack.enter_context(serve(app)), app, settings))
            return started[-1]

        yield start


@pytest.fixture
def live(live_factory: LiveFactory) -> Live:
    """A running server on SQLite with the small baseline queued as experiment 1."""
    return live_factory()


@pytest.fixture
def live_any_db(live_factory: LiveFactory, database_url: str) -> Live:
    """A running server, once on SQLite and once on PostgreSQL."""
    return live_factory(database_url)


@dataclass
class SimWorker:
    """A worker made of the real SDK that runs nothing: it reports the results a test chooses.

    The real worker (worker/) and runner (harness/runner) have their own tests; here the server's
    side of the protocol is under test.
    """

    client: Client
    worker_id: str

    def claim(self, wait_s: float = 0.0) -> ClaimOut | None:
        return self.client.claim(self.worker_id, wait_s=wait_s)

    def report(
        self, claim: ClaimOut, val_bpb: float | None = 1.0, status: str = "ok", **fields: object
    ) -> ResultOutcome:
        result = {
            "status": status,
            "val_bpb": val_bpb if status == "ok" else None,
            "device": DEVICE,
            "harness_id": HARNESS_ID,
            "training_seconds": 3.0,
            "total_seconds": 5.5,
            "peak_memory_mb": 2048.0,
            "tokens": 123456,
            "steps": 42,
            "num_params": 1000,
            "log_tail": f"step 42 loss 3.1 ({claim.experiment_id})",
            **fields,
        }
        return self.client.result(claim.lease_id, str(uuid.uuid4()), result)

    def run_next(self, val_bpb: float | None = 1.0, **fields: object) -> ResultOutcome:
        """Claim the next experiment and report a result for it; return the server's answer."""
        claim = self.claim()
        assert claim is not None, "nothing to claim"
        return self.report(claim, val_bpb, **fields)


def sim_worker(live: Live, name: str = "gpu0", token: str | None = None) -> SimWorker:
    client = Client(live.url, token or live.token("worker"))
    answer = client.register(name=name, device=DEVICE, memory_gb=80.0, harness_id=HARNESS_ID)
    return SimWorker(client, answer.worker_id)


@pytest.fixture
def worker_factory() -> Callable[..., SimWorker]:
    """sim_worker(live, name="gpu0", token=None): a registered SimWorker."""
    return sim_worker


@pytest.fixture
def baseline_source() -> str:
    return BASELINE


@pytest.fixture(scope="module")
def seeded_live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Live, dict[str, str]]]:
    """A server with history (kept, reverted, crashed, queued, running experiments) and tokens.

    Claims never wait here (CLAIM_MAX_WAIT_S=0), so that generated requests stay quick.
    """
    folder = tmp_path_factory.mktemp("seeded")
    settings = make_settings(folder, claim_max_wait_s=0.0)
    init_with_small_baseline(settings, folder)
    app = create_app(settings)
    with serve(app) as url:
        live = Live(url, app, settings)
        tokens = {
            "agent": live.token("agent", "seed-agent"),
            "worker": live.token("worker", "seed-worker"),
            "admin": "admin-secret",
        }
        worker = sim_worker(live, "seed-gpu", tokens["worker"])
        worker.run_next(1.0)
        agent = Client(url, tokens["agent"])
        for i in range(5):
            agent.submit(f"seed {i}", train_py=BASELINE + f"# seed {i}\n", hypothesis="h")
        worker.run_next(0.99)
        worker.run_next(1.2)
        worker.run_next(None, status="crash", error_class="train_error")
        worker.claim()
        yield live, tokens
