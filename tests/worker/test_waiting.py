"""A worker without a server waits with clear log lines; its state folder is its own."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from harness.config import HarnessSettings
from harness.prepared import PreparedPaths
from tests.worker.processes import WorkerProcess, free_port


def worker(tmp: Path, settings: HarnessSettings, name: str, server: str, log: str) -> WorkerProcess:
    args = ["--server", server, "--cpu", "--name", name, "--preset", "test"]
    args += ["--data-dir", str(settings.data_dir), "--state-dir", str(tmp / "state")]
    env = {**os.environ, "AUTORESEARCH_WORKER_TOKEN": "no-server-to-check-it", "PYTHONUNBUFFERED": "1"}
    return WorkerProcess(name, args, env, tmp / log).start()


def test_waits_for_absent_server_and_keeps_its_state_folder_to_itself(
    tmp_path: Path, test_data: tuple[HarnessSettings, PreparedPaths]
) -> None:
    settings, _paths = test_data
    nobody = f"http://127.0.0.1:{free_port()}"  # nothing listens here
    first = worker(tmp_path, settings, "w", nobody, "first.log")
    try:
        first.wait_for_log(r"waiting for the server at .* to register: ConnectError.*; retry 2 in \d+\.\d s")

        second = worker(tmp_path, settings, "w", nobody, "second.log")
        assert second.wait(timeout=60) == 1
        assert f"another worker is using {tmp_path / 'state'}" in second.log()

        first.signal(signal.SIGTERM)  # stops waiting at once
        assert first.wait(timeout=30) == 0
    finally:
        first.stop()
