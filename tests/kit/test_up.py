"""`autoresearch up` (what `make run` calls), run as a user would: a real server, a real sandboxed
worker and the real baseline train.py on the `test` preset; Ctrl-C, SIGTERM and SIGHUP must stop
everything."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from harness.config import HarnessSettings
from harness.data_layout import PreparedPaths
from testkit.processes import REPO_ROOT
from tests.fixtures_data import test_data  # noqa: F401  (session fixture)

pytestmark = pytest.mark.heavy


_UP = [sys.executable, "-m", "cli.main", "up", "--preset", "test"]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _start_up(data_dir: Path, port: int, **env: str) -> subprocess.Popen[str]:
    cmd = [*_UP, "--data-dir", str(data_dir), "--port", str(port), "--workers", "1"]
    # Its own session, so that the SIGINT below reaches `up` alone, as a terminal's Ctrl-C would.
    return subprocess.Popen(
        cmd,
        cwd=REPO_ROOT,
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def _wait_for(url: str, proc: subprocess.Popen[str], done, timeout_s: float) -> dict:
    deadline = time.monotonic() + timeout_s
    last: object = None
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
        try:
            answer = httpx.get(url, timeout=5.0)
            last = answer.json() if answer.status_code == 200 else answer.text
            if answer.status_code == 200 and done(last):
                return last  # type: ignore[return-value]
        except httpx.HTTPError as error:
            last = repr(error)
        time.sleep(0.5)
    raise AssertionError(f"{url} did not reach the wanted state within {timeout_s} s; last answer: {last}")


def _interrupt(proc: subprocess.Popen[str], data_dir: Path, sig: signal.Signals) -> str:
    proc.send_signal(sig)
    out, _ = proc.communicate(timeout=120)
    print(out)  # shown with a failure, whichever assertion it is
    assert proc.returncode == 0, out
    # Nothing that `up` started may outlive it: every child's command line names the data dir.
    left = subprocess.run(["pgrep", "-f", str(data_dir)], capture_output=True, text=True).stdout.split()
    assert left == [], f"processes left running: {left}"
    return out


def _data_dir(tmp_path: Path, paths: PreparedPaths) -> Path:
    """A data folder that starts from the session's prepared data (prepare re-checks it), to keep
    the tests short."""
    data_dir = tmp_path / "data"
    shutil.copytree(paths.root, data_dir / paths.root.relative_to(paths.root.parents[1]))
    return data_dir


def test_up_runs_the_baseline_and_each_stop_signal_works_as_ctrl_c(
    tmp_path: Path,
    test_data: tuple[HarnessSettings, PreparedPaths],  # noqa: F811
) -> None:
    """Two `up`s on one project, stopped by the three signals `up` takes (cli.up.STOP_SIGNALS):

    1. SIGTERM (systemd, docker, tmux) while the worker runs the baseline: the worker finishes it
       and delivers its result, then `up` stops the server and exits 0, leaving nothing running;
    2. a second `up` reuses the project (same tokens, no second baseline); its worker runs the
       baseline's repeats (the noise measurement); Ctrl-C lets the run finish, and a second
       signal, SIGHUP (a closed terminal), stops at once, leaving nothing running.

    One test, not three, because each `up` starts a server, a worker and real sandboxed runs
    (about 25 s apiece on a loaded machine); splitting it would start them again to prove nothing
    more."""
    data_dir = _data_dir(tmp_path, test_data[1])
    port = _free_port()
    api = f"http://127.0.0.1:{port}/api/v1"

    proc = _start_up(data_dir, port)
    try:
        _wait_for(f"{api}/experiments/1", proc, lambda e: e["status"] != "queued", 240)
    finally:
        out = _interrupt(proc, data_dir, signal.SIGTERM)
    assert "SIGTERM: finishing the current experiment, then exiting" in out, out
    assert "experiment 1: result recorded" in out, out
    assert "[up] stopping workers and server" in out
    tokens = json.loads((data_dir / "local-tokens.json").read_text())
    assert oct((data_dir / "local-tokens.json").stat().st_mode & 0o777) == "0o600"
    assert tokens["agent"] in out  # the banner shows the agent token to use

    def submit(token: str) -> int:
        headers = {"Authorization": f"Bearer {token}"}
        return httpx.post(f"{api}/experiments", json={}, headers=headers, timeout=5.0).status_code

    def any_running(runs: list[dict[str, object]]) -> bool:
        return any(run["state"] == "running" for run in runs)

    proc = _start_up(data_dir, port)
    try:
        listing = _wait_for(f"{api}/experiments", proc, lambda page: True, 120)
        baseline = httpx.get(f"{api}/experiments/1", timeout=5.0).json()
        unknown, known = submit("not-a-token"), submit(tokens["agent"])
        running = _wait_for(f"{api}/experiments/1", proc, lambda e: any_running(e["runs"]), 120)
        proc.send_signal(signal.SIGINT)
        time.sleep(1.0)
    finally:
        out = _interrupt(proc, data_dir, signal.SIGHUP)
    assert "[up] stopping now" in out, out
    assert [e["id"] for e in listing["items"]] == [1]
    assert baseline["decision"] == "keep", baseline
    assert baseline["result"]["status"] == "ok" and baseline["result"]["sandbox"] is True
    assert unknown == 401
    assert known not in (401, 403)  # accepted as an agent (the body is bad)
    assert all(run["number"] > 1 for run in running["runs"] if run["state"] == "running")  # a repeat
    assert json.loads((data_dir / "local-tokens.json").read_text()) == tokens
    assert not os.path.exists(data_dir / "local-tokens.tmp")


def test_up_refuses_a_port_another_server_holds_before_it_prints_or_starts_anything(tmp_path: Path) -> None:
    """With the port held, `up` printed "running at" and started a worker that talked to the other
    server (issue 51): now it says so first, and how to pick another port."""
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        port = other.getsockname()[1]
        refused = subprocess.run(
            [*_UP, "--data-dir", str(tmp_path / "data"), "--port", str(port)],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert refused.returncode == 1 and refused.stdout == ""
    assert refused.stderr == (
        f"autoresearch up: cannot listen on 127.0.0.1:{port} (Address already in use); another server "
        f"may be using it: stop that one, or pick another port with --port (e.g. --port {port + 1})\n"
    )
    assert not (tmp_path / "data").exists()  # nothing prepared, initialised or started


def test_an_idle_up_stops_within_5_s_of_sigterm_with_an_event_stream_open(
    tmp_path: Path,
    test_data: tuple[HarnessSettings, PreparedPaths],  # noqa: F811
) -> None:
    """An idle `up` took 21-37 s to stop (issue 51): the server waited for the event streams
    browsers and agents keep open, and the worker for its claim's long poll. Decided by the greedy
    rule, the baseline's one run leaves it idle; a client follows GET /events meanwhile."""
    data_dir = _data_dir(tmp_path, test_data[1])
    port = _free_port()
    api = f"http://127.0.0.1:{port}/api/v1"
    proc = _start_up(data_dir, port, DECISION_RULE="greedy")
    try:
        _wait_for(f"{api}/experiments/1", proc, lambda e: e["status"] == "kept", 240)
        with httpx.stream("GET", f"{api}/events", timeout=10.0) as events:
            assert events.status_code == 200
            started = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)
            stopped_in = time.monotonic() - started
    finally:
        out = _interrupt(proc, data_dir, signal.SIGTERM) if proc.poll() is None else proc.stdout.read()  # type: ignore[union-attr]
    assert proc.returncode == 0, out
    assert stopped_in < 5.0, (stopped_in, out)
    left = subprocess.run(["pgrep", "-f", str(data_dir)], capture_output=True, text=True).stdout.split()
    assert left == [], f"processes left running: {left}"
