"""A real autoresearch server for the page tests: `autoresearch init`'s code path, then uvicorn.

The project is created with the server's own `init_project` (research git repo plus SQLite
database), tokens with the server's own `create_token`, and the app runs in a uvicorn child
process on a socket bound here to a free port on 127.0.0.1 (handed over with --fd, so no other
process can take the port in between).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from server.core.config import ServerSettings
from server.core.db import Database, create_db_engine
from server.crud.tokens import create_token
from server.project_init import init_project

HARNESS_ID = "pages-test-harness"
PLATFORM = "pages-test-device"
# The server's own uvicorn configuration (server/serving.py), on the socket handed over.
SERVE_ON_FD = """
import sys
from server.main import create_app
from server.serving import Server, uvicorn_config
Server(uvicorn_config(create_app(), fd=int(sys.argv[1]), log_level="warning")).run()
"""


@dataclass(frozen=True)
class LiveServer:
    url: str
    data_dir: Path
    agent_tokens: dict[str, str]
    worker_token: str


def init_research(data_dir: Path, agents: tuple[str, ...]) -> tuple[ServerSettings, dict[str, str], str]:
    """A new project in `data_dir`; returns its settings, agent tokens by name, and a worker token."""
    settings = ServerSettings(data_dir=data_dir, harness_id=HARNESS_ID, platform=PLATFORM)
    program_md = data_dir / "program.md"  # the agents' instructions; the pages never show them
    program_md.write_text("# Page tests\n\nLower val_bpb by changing train.py.\n")
    init_project(settings, program_md=program_md)
    db = Database(create_db_engine(settings.resolved_database_url))
    try:
        with db.write() as session:
            agent_tokens = {name: create_token(session, "agent", name) for name in agents}
            worker_token = create_token(session, "worker", "pages-worker")
    finally:
        db.dispose()
    return settings, agent_tokens, worker_token


def _wait_ready(url: str, process: subprocess.Popen[bytes], timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the server exited with {process.returncode} before it was ready")
        try:
            if httpx.get(f"{url}/api/v1/healthz", timeout=2.0).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"the server at {url} was not ready within {timeout_s} s")


@contextmanager
def live_server(
    data_dir: Path, agents: tuple[str, ...] = ("alice", "bob"), env: dict[str, str] | None = None
) -> Iterator[LiveServer]:
    """A new project in `data_dir` served on 127.0.0.1; `env` adds server settings (PUBLIC_READS...)."""
    _settings, agent_tokens, worker_token = init_research(data_dir, agents)
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    env = {
        **os.environ,
        "DATA_DIR": str(data_dir),
        "HARNESS_ID": HARNESS_ID,
        "PLATFORM": PLATFORM,
        "SSE_KEEPALIVE_SECONDS": "2",
        # The page tests report one run per experiment: the greedy rule judges it (a test of the
        # noise-aware rule's pages sets DECISION_RULE).
        "DECISION_RULE": "greedy",
        **(env or {}),
    }
    command = [sys.executable, "-c", SERVE_ON_FD, str(listener.fileno())]
    process = subprocess.Popen(command, env=env, cwd=data_dir, pass_fds=[listener.fileno()])
    listener.close()  # the child holds its own copy of the socket
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_ready(url, process)
        yield LiveServer(url, data_dir, agent_tokens, worker_token)
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
