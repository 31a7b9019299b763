"""`autoresearch up` (what `make run` calls), run as a user would: a real server, a real sandboxed
worker and the real baseline train.py on the `test` preset; Ctrl-C must stop everything."""

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
from tests.worker.processes import REPO_ROOT

pytestmark = pytest.mark.heavy


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _start_up(data_dir: Path, port: int) -> subprocess.Popen[str]:
    cmd = [sys.executable, "-m", "cli.main", "up", "--preset", "test", "--data-dir", str(data_dir)]
    cmd += ["--port", str(port), "--workers", "1"]
    # Its own session, so that the SIGINT below reaches `up` alone, as a terminal's Ctrl-C would.
    return subprocess.Popen(
        cmd,
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def _wait_for(url: str, proc: subprocess.Popen[str], done, timeout_s: float) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
        try:
            answer = httpx.get(url, timeout=5.0)
            if answer.status_code == 200 and done(answer.json()):
                return answer.json()
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise AssertionError(f"{url} did not reach the wanted state within {timeout_s} s")


def _interrupt(proc: subprocess.Popen[str], data_dir: Path, sig: signal.Signals = signal.SIGINT) -> str:
    proc.send_signal(sig)
    out, _ = proc.communicate(timeout=120)
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


def test_up_runs_the_baseline_and_ctrl_c_stops_everything(
    tmp_path: Path,
    test_data: tuple[HarnessSettings, PreparedPaths],
) -> None:
    data_dir = _data_dir(tmp_path, test_data[1])
    port = _free_port()
    api = f"http://127.0.0.1:{port}/api/v1"

    proc = _start_up(data_dir, port)
    try:
        baseline = _wait_for(f"{api}/experiments/1", proc, lambda e: e["decision"] is not None, 240)
    finally:
        out = _interrupt(proc, data_dir)
    assert baseline["decision"] == "keep", baseline
    assert baseline["result"]["status"] == "ok"
    assert baseline["result"]["sandbox"] is True
    tokens = json.loads((data_dir / "local-tokens.json").read_text())
    assert oct((data_dir / "local-tokens.json").stat().st_mode & 0o777) == "0o600"
    assert tokens["agent"] in out  # the banner shows the agent token to use

    # A second `up` reuses the project: same tokens, no second baseline.
    def submit_status(token: str) -> int:
        headers = {"Authorization": f"Bearer {token}"}
        return httpx.post(f"{api}/experiments", json={}, headers=headers, timeout=5.0).status_code

    proc = _start_up(data_dir, port)
    try:
        listing = _wait_for(f"{api}/experiments", proc, lambda page: True, 120)
        unknown, known = submit_status("not-a-token"), submit_status(tokens["agent"])
    finally:
        _interrupt(proc, data_dir)
    assert [e["id"] for e in listing["items"]] == [1]
    assert unknown == 401
    assert known not in (401, 403)  # accepted as an agent (the body is bad)
    assert json.loads((data_dir / "local-tokens.json").read_text()) == tokens
    assert not os.path.exists(data_dir / "local-tokens.tmp")


@pytest.mark.parametrize("signals", [(signal.SIGTERM,), (signal.SIGHUP, signal.SIGINT)])
def test_sigterm_and_sighup_stop_everything_like_ctrl_c(
    tmp_path: Path, test_data: tuple[HarnessSettings, PreparedPaths], signals: tuple[signal.Signals, ...]
) -> None:
    """As systemd, docker or tmux stop a program (SIGTERM), or a closed terminal (SIGHUP), while the
    worker runs the baseline: the worker finishes it and delivers its result, then `up` stops the
    server and exits 0. A second signal (Ctrl-C again) stops at once, leaving nothing running."""
    data_dir = _data_dir(tmp_path, test_data[1])
    port = _free_port()
    proc = _start_up(data_dir, port)
    try:
        _wait_for(
            f"http://127.0.0.1:{port}/api/v1/experiments/1", proc, lambda e: e["status"] != "queued", 240
        )
    finally:
        for sig in signals[:-1]:
            proc.send_signal(sig)
            time.sleep(1.0)
        out = _interrupt(proc, data_dir, signals[-1])
    assert "[up] stopping workers and server" in out
    if len(signals) == 1:
        assert "SIGTERM: finishing the current experiment, then exiting" in out, out
        assert "experiment 1: result recorded" in out, out
    else:
        assert "[up] stopping now" in out, out
