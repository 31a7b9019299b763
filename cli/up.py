"""`autoresearch up`: one machine in one command: prepare, init, then server plus N workers.

This is what `make run` calls. Everything it does is idempotent: a second `up` reuses the
prepared data, the research repo, the database and the local tokens of the first.

It takes its port before anything else (the server inherits the listening socket), so a port that
another server holds is said at once, and its workers never talk to that other server.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from cli.system_packages import ensure as ensure_system_packages

TOKENS_FILE = "local-tokens.json"
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "up",
        help="prepare data, init the project, start the server and N workers (make run)",
        description="Start a complete local setup: prepare the data for the preset (once), create the "
        "research repo and queue the baseline (once), create a local agent and worker token (once, "
        "kept in DATA_DIR/local-tokens.json), then run the server and N CPU or GPU workers until "
        "Ctrl-C, SIGTERM or SIGHUP: the workers finish their current experiments, then everything "
        "stops; a second one stops at once (the running experiments are given back). The port is "
        "taken first: one another server holds is refused before anything starts.",
    )
    parser.add_argument("--preset", default=None, help="harness preset: cpu (default), test or h100")
    parser.add_argument("--data-dir", type=Path, help="data folder (default: $DATA_DIR, else data)")
    parser.add_argument("--host", default="127.0.0.1", help="server address (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8000, help="server port (default 8000)")
    parser.add_argument("--workers", type=int, default=1, help="number of workers (default 1)")
    parser.add_argument("--gpu", action="store_true", help="one worker per GPU 0..N-1 instead of CPU workers")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from harness.config import load_settings
    from harness.data.errors import DataError
    from harness.prepare import prepare

    if args.workers < 0:
        raise SystemExit("autoresearch up: --workers must be 0 or more")
    listener = _listen(args.host, args.port)
    if args.workers > 0:  # before anything starts: workers run every train.py in bubblewrap
        ensure_system_packages("run", "autoresearch up")
    harness_overrides = {"data_dir": args.data_dir} if args.data_dir else {}
    try:
        settings = load_settings(args.preset, **harness_overrides)
    except ValueError as exc:
        raise SystemExit(f"autoresearch up: {exc}") from exc
    data_dir = settings.data_dir.absolute()
    data_dir.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "DATA_DIR": str(data_dir), "PRESET": settings.preset}

    print(f"[up] preparing the {settings.data_source} data for preset {settings.preset} in {data_dir}")
    try:
        prepare(settings)
    except DataError as exc:
        raise SystemExit(f"autoresearch up: {exc}") from exc
    _init_once(env)
    tokens = _local_tokens(data_dir, env)

    url = f"http://{args.host}:{args.port}"
    # SIGTERM (systemd, docker, tmux kill) and SIGHUP (a closed terminal) stop everything as Ctrl-C.
    for stop_signal in STOP_SIGNALS:
        signal.signal(stop_signal, _interrupt)
    children: list[subprocess.Popen] = []
    try:
        # Own sessions: Ctrl-C reaches only `up`, which then stops the children in order.
        server = subprocess.Popen(
            [_exe(), "serve", "--fd", str(listener.fileno()), "--log-level", "warning"],
            env=env,
            start_new_session=True,
            pass_fds=[listener.fileno()],
        )
        listener.close()  # the server holds its own copy
        children.append(server)
        _wait_healthy(url, server)
        worker_env = {**env, "AUTORESEARCH_WORKER_TOKEN": tokens["worker"]}
        for i in range(args.workers):
            device = ["--gpu", str(i)] if args.gpu else ["--cpu"]
            name = f"local-{'gpu' if args.gpu else 'cpu'}{i}"
            cmd = [_exe(), "work", "--server", url, *device, "--name", name]
            children.append(subprocess.Popen(cmd, env=worker_env, start_new_session=True))
        _print_banner(url, tokens["agent"], args.workers)
        _wait_any(children)
    except KeyboardInterrupt:
        with contextlib.suppress(OSError):  # after SIGHUP the terminal may be gone
            print("\n[up] stopping workers and server ...", flush=True)
    finally:
        listener.close()
        _stop(children, lambda: _busy(url, tokens["agent"]))
    return 0


def _listen(host: str, port: int) -> socket.socket:
    """The server's listening socket, or the reason there is none and how to pick another port."""
    listener = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind((host, port))
        listener.listen(2048)
    except OSError as exc:
        listener.close()
        raise SystemExit(
            f"autoresearch up: cannot listen on {host}:{port} ({exc.strerror}); another server may "
            f"be using it: stop that one, or pick another port with --port (e.g. --port {port + 1})"
        ) from exc
    return listener


def _busy(url: str, token: str) -> bool:
    """Whether the server has an experiment running or queued (or cannot say)."""
    headers = {"Authorization": f"Bearer {token}"}
    try:
        for status in ("running", "queued"):
            query = {"status": status, "limit": 1}
            answer = httpx.get(f"{url}/api/v1/experiments", params=query, headers=headers, timeout=2.0)
            if answer.status_code != 200 or answer.json()["items"]:
                return True
    except (httpx.HTTPError, ValueError, KeyError):
        return True
    return False


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _exe() -> str:
    return str(Path(sys.executable).with_name("autoresearch"))


def _init_once(env: dict[str, str]) -> None:
    """Run `autoresearch init` unless the database already has a project."""
    from server.core.config import ServerSettings

    settings = ServerSettings(data_dir=Path(env["DATA_DIR"]))
    if settings.resolved_research_repo.exists():
        return
    if subprocess.run([_exe(), "init"], env=env).returncode != 0:
        raise SystemExit("autoresearch up: `autoresearch init` failed (its message is above)")


def _local_tokens(data_dir: Path, env: dict[str, str]) -> dict[str, str]:
    """An agent and a worker token for this machine, created once and kept readable by the owner only."""
    path = data_dir / TOKENS_FILE
    if path.exists():
        return json.loads(path.read_text())
    tokens = {}
    for kind in ("agent", "worker"):
        name = f"local-{kind}"
        out = subprocess.run(
            [_exe(), "token", "create", "--kind", kind, "--name", name],
            env=env,
            check=True,
            capture_output=True,
            text=True,
        )
        tokens[kind] = out.stdout.strip()
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(tokens))
    tmp.chmod(0o600)
    tmp.replace(path)
    return tokens


def _wait_healthy(url: str, server: subprocess.Popen, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise SystemExit(f"autoresearch up: the server exited with code {server.returncode}")
        try:
            if httpx.get(f"{url}/api/v1/healthz", timeout=1.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise SystemExit(
        f"autoresearch up: the server did not answer at {url}/api/v1/healthz within {timeout_s:.0f} s"
    )


def _print_banner(url: str, agent_token: str, workers: int) -> None:
    print(
        f"\n  autoresearch is running at {url}   ({workers} worker(s); Ctrl-C stops everything)\n\n"
        f"  leaderboard:  {url}/\n"
        f"  API docs:     {url}/docs\n"
        f"  agent token:  {agent_token}\n\n"
        f"  submit a change:  AUTORESEARCH_SERVER={url} AUTORESEARCH_TOKEN={agent_token} \\\n"
        "                    .venv/bin/autoresearch submit my_train.py -m 'what I changed' --wait\n",
        flush=True,
    )


def _wait_any(children: list[subprocess.Popen]) -> None:
    """Block until one child exits (then stop the rest) or Ctrl-C."""
    while all(child.poll() is None for child in children):
        time.sleep(0.5)
    for child in children:
        if child.returncode is not None:
            command = child.args if isinstance(child.args, list) else [child.args]
            print(f"[up] {' '.join(map(str, command[1:3]))} exited with code {child.returncode}; stopping")


def _stop(children: list[subprocess.Popen], busy: Callable[[], bool]) -> None:
    """Workers first, then the server. A worker's first SIGTERM lets it finish the experiment it
    runs and deliver the result; another stop signal to `up` (a second Ctrl-C) passes a second
    SIGTERM on, which cancels the run and gives its lease back (worker/signals.py). When nothing
    is `busy` (running or queued), there is nothing to finish: the server stops with the workers,
    which then stop within their claim's long poll."""
    if not children:
        return
    workers, server = children[1:], children[0]

    def stop_now(signum: int, frame: object) -> None:
        with contextlib.suppress(OSError):
            print("[up] stopping now: the running experiments are cancelled and given back", flush=True)
        _terminate(workers)

    for stop_signal in STOP_SIGNALS:
        signal.signal(stop_signal, stop_now)
    idle = not busy()
    if not idle and any(worker.poll() is None for worker in workers):
        with contextlib.suppress(OSError):
            print("[up] the workers finish their current experiments first (again: stop now)", flush=True)
    _terminate(children if idle else workers)
    for worker in workers:
        worker.wait()  # a run ends within its budget and scoring; a second signal ends it sooner
    for stop_signal in STOP_SIGNALS:  # from here on nothing may abandon the server's stop
        signal.signal(stop_signal, signal.SIG_IGN)
    _terminate([server])
    try:
        server.wait(timeout=30)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()


def _terminate(children: list[subprocess.Popen]) -> None:
    for child in children:
        if child.poll() is None:
            child.send_signal(signal.SIGTERM)
