"""GET /experiments filters and cursor pages; the server's CLI commands as a user runs them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from client import ApiError, Client


def test_filters_and_cursor_pages(live, worker_factory, baseline_source: str) -> None:
    worker = worker_factory(live)
    worker.run_next(1.0)
    live.ctx.settings.max_queued_per_agent = 100
    alice, bob = live.client("agent", "alice"), live.client("agent", "bob")
    before = datetime.now(UTC)
    mine = [alice.submit(f"a{i}", train_py=baseline_source + f"# a{i}\n").id for i in range(7)]
    theirs = [bob.submit(f"b{i}", train_py=baseline_source + f"# b{i}\n").id for i in range(3)]
    worker.run_next(2.0)  # alice's first: reverted
    everything = list(alice.iter_search(limit=3))
    assert [e.id for e in everything] == sorted(mine + theirs + [1], reverse=True)
    assert [e.id for e in alice.iter_search(agent="alice", limit=2)] == mine[::-1]
    assert [e.id for e in alice.iter_search(status="reverted")] == [mine[0]]
    assert [e.id for e in alice.iter_search(agent="baseline")] == [1]
    best = alice.best().commit
    assert {e.id for e in alice.iter_search(base=best)} == set(mine + theirs)
    assert alice.search(since=(datetime.now(UTC) + timedelta(hours=1)).isoformat()).items == []
    assert len(list(alice.iter_search(since=before.isoformat()))) == 10
    for params, words in (
        ({"cursor": "abc"}, "cursor"),
        ({"limit": 0}, "limit"),
        ({"since": "2025-01-01T00:00:00"}, "since"),  # no time zone
        ({"since": "0.5"}, "since"),  # not a Unix time either
        ({"since": "2025-02-30T00:00:00Z"}, "day is out of range"),
    ):
        response = alice.http.get("/experiments", params=params)
        assert response.status_code == 422 and words in response.json()["detail"]
    assert [e.id for e in alice.iter_search(agent="nobody")] == []


@given(total=st.integers(0, 12), limit=st.integers(1, 5))
@settings(max_examples=15, deadline=None)
def test_cursor_pages_cover_every_row_once(total: int, limit: int) -> None:
    """list_page over a real SQLite database: pages join up to all ids, newest first, no repeats."""
    from server.core.db import Database, create_db_engine
    from server.core.migrate import upgrade
    from server.crud.experiments import list_page
    from server.models import Experiment, utcnow

    with tempfile.TemporaryDirectory() as folder:
        url = f"sqlite:///{folder}/db.sqlite"
        upgrade(url)
        db = Database(create_db_engine(url))
        with db.write() as session:
            session.add_all(
                Experiment(
                    source="agent",
                    description=f"e{i}",
                    commit_sha="0" * 40,
                    status="queued",
                    cancel_requested=False,
                    created_at=utcnow(),
                    queued_at=utcnow(),
                )
                for i in range(total)
            )
        seen: list[int] = []
        cursor = None
        with db.read() as session:
            while True:
                page = list_page(
                    session, status=None, agent=None, base=None, since=None, limit=limit, before_id=cursor
                )
                assert len(page.items) <= limit
                seen += [item.id for item in page.items]
                if page.next_cursor is None:
                    break
                cursor = int(page.next_cursor)
        db.dispose()
        assert seen == list(range(total, 0, -1))


def test_commits_resolve_from_unique_prefixes(tmp_path: Path) -> None:
    from server.core.db import Database, create_db_engine
    from server.core.migrate import upgrade
    from server.crud.experiments import resolve_commit
    from server.models import Experiment, utcnow

    url = f"sqlite:///{tmp_path}/db.sqlite"
    upgrade(url)
    db = Database(create_db_engine(url))
    shas = ["abcd1" + "0" * 35, "abcd2" + "0" * 35, "abcd2" + "0" * 35, "ffff" + "1" * 36]
    with db.write() as session:
        session.add_all(
            Experiment(
                source="agent",
                description="e",
                commit_sha=sha,
                status="queued",
                cancel_requested=False,
                created_at=utcnow(),
                queued_at=utcnow(),
            )
            for sha in shas
        )
    with db.read() as session:
        assert resolve_commit(session, "ABCD1") == shas[0]
        assert resolve_commit(session, "abcd2") == shas[1]  # two experiments, one commit
        assert resolve_commit(session, shas[3]) == shas[3]
        with pytest.raises(LookupError, match="more than one commit"):
            resolve_commit(session, "abcd")
        with pytest.raises(LookupError, match="no experiment"):
            resolve_commit(session, "abce")
    db.dispose()


@dataclass
class Ran:
    code: int
    out: str
    err: str


@pytest.fixture
def cli(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Callable[..., Ran]:
    """Run `autoresearch ARGS` in this process (its real entry point) with extra environment."""
    from cli.main import main

    def run(env: dict[str, str], *args: str) -> Ran:
        with monkeypatch.context() as patch:
            for name, value in env.items():
                patch.setenv(name, value)
            code = main(list(args))
        captured = capsys.readouterr()
        return Ran(code, captured.out, captured.err)

    return run


def test_cli_init_token_db_and_serve(tmp_path: Path, baseline_source: str, cli: Callable[..., Ran]) -> None:
    """init, token and db in this process; serve as its own process, as an operator starts it."""
    from testkit.pg_scratch import free_port

    (tmp_path / "train.py").write_text(baseline_source)
    (tmp_path / "program.md").write_text("# program\n")
    env = {
        "DATA_DIR": str(tmp_path / "data"),
        "HARNESS_ID": "cli-test",
        "DATABASE_URL": "",
        "TOKEN_CACHE_SECONDS": "0",
    }
    files = ["--train-py", str(tmp_path / "train.py"), "--program-md", str(tmp_path / "program.md")]
    first = cli(env, "init", *files, "--json")
    assert first.code == 0 and json.loads(first.out) == {
        "research_repo": str(tmp_path / "data" / "research.git"),
        "database": f"sqlite:///{tmp_path / 'data' / 'autoresearch.db'}",
        "experiment_id": 1,
    }
    again = cli(env, "init", *files)
    assert again.code == 2 and "already has a project" in again.err
    missing = cli(
        {**env, "DATA_DIR": str(tmp_path / "other")}, "init", "--train-py", str(tmp_path / "nope.py")
    )
    assert missing.code == 2 and "nope.py: no such file" in missing.err
    token = cli(env, "token", "create", "--kind", "agent", "--name", "alice")
    assert token.code == 0 and token.out.startswith("ara_")
    assert "exists already" in cli(env, "token", "create", "--kind", "agent", "--name", "alice").err
    assert "--name" in cli(env, "token", "create", "--kind", "agent", "--name", "bad name!").err
    assert cli(env, "db", "current").out.strip() == "0015"
    assert json.loads(cli(env, "db", "current", "--json").out) == {"revision": "0015"}
    robot = json.loads(cli(env, "token", "create", "--kind", "worker", "--name", "gpu-1", "--json").out)
    assert robot["kind"] == "worker" and robot["name"] == "gpu-1" and robot["token"].startswith("arw_")
    revoked = cli(env, "token", "revoke", "--kind", "worker", "--name", "gpu-1", "--json")
    assert json.loads(revoked.out) == {"kind": "worker", "name": "gpu-1", "revoked": True}
    assert cli(env, "token", "revoke", "--kind", "worker", "--name", "gpu-1").code == 2  # revoked already
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "cli.main", "serve", "--port", str(port), "--log-level", "warning"],
        env={**os.environ, **env},
    )
    try:
        client = Client(f"http://127.0.0.1:{port}", token.out.strip())
        deadline = time.monotonic() + 60
        while True:
            try:
                assert client.experiment(1).status == "queued"
                break
            except Exception:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise
                time.sleep(0.2)
        assert client.submit("x", train_py=baseline_source + "# x\n").agent == "alice"
        assert cli(env, "token", "revoke", "--kind", "agent", "--name", "alice").code == 0
        with pytest.raises(ApiError) as caught:  # TOKEN_CACHE_SECONDS=0: revocation counts at once
            client.submit("y", train_py=baseline_source + "# y\n")
        assert caught.value.status == 401
    finally:
        server.terminate()
        server.wait(20)
    clash = cli({**env, "HARNESS_ID": "another"}, "serve", "--port", str(free_port()))
    assert clash.code == 2 and "harness_id 'cli-test'" in clash.err
    # Decision settings out of range are refused at start, naming the setting and its range.
    for setting, value, allowed in (
        ("ALPHA", "0.7", "0.0 < ALPHA <= 0.5"),
        ("ALPHA", "0", "0.0 < ALPHA <= 0.5"),
        ("NOISE_RUNS", "1", "2 <= NOISE_RUNS <= 100"),
        ("BEST_REPEATS", "0", "1 <= BEST_REPEATS <= 100"),
        ("MAX_RUNS", "many", "2 <= MAX_RUNS <= 100"),
        ("SCREEN_MARGIN", "-0.5", "0.0 <= SCREEN_MARGIN <= 5.0"),
        ("FUTILITY_MARGIN", "9", "0.0 <= FUTILITY_MARGIN <= 5.0"),
        ("MIN_DELTA", "-0.001", "0.0 <= MIN_DELTA <= 1.0"),
        ("BEST_RERUN_EVERY", "-1", "0 <= BEST_RERUN_EVERY <= 10000"),
        ("DECISION_RULE", "lucky", "DECISION_RULE is one of noise_aware, greedy"),
    ):
        refused = cli({**env, setting: value}, "serve", "--port", str(free_port()))
        assert refused.code == 2, (setting, refused.err)
        assert f"{setting}={value} is not allowed: {allowed}" in refused.err
