"""Workers starting on one host: they share the data cache, wait for an absent server with clear
log lines, and each keeps its state folder to itself."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from testkit.processes import WorkerProcess, free_port

NOBODY = f"http://127.0.0.1:{free_port()}"  # nothing listens here


def worker(tmp: Path, data_dir: Path, name: str, state: str, log: str) -> WorkerProcess:
    args = ["--server", NOBODY, "--cpu", "--name", name, "--preset", "test"]
    args += ["--data-dir", str(data_dir), "--state-dir", str(tmp / state)]
    env = {**os.environ, "AUTORESEARCH_WORKER_TOKEN": "no-server-to-check-it", "PYTHONUNBUFFERED": "1"}
    return WorkerProcess(name, args, env, tmp / log).start()


def test_workers_share_fresh_data_cache_wait_for_server_and_own_their_state(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"  # nothing prepared yet: both workers start at once on it
    workers = [worker(tmp_path, data_dir, name, name, f"{name}.log") for name in ("a", "b")]
    try:
        ids = set()
        for w in workers:
            ids.add(w.wait_for_log(r"data ready in .*, harness id (\w+)", timeout=120).group(1))
            w.wait_for_log(r"waiting for the server at .* to register: ConnectError.*; retry 2 in \d+\.\d s")
        assert len(ids) == 1  # one prepared cache, the same harness for both
        assert len(list((data_dir / "prepared").iterdir())) == 1

        intruder = worker(tmp_path, data_dir, "c", "a", "intruder.log")  # a's state folder
        assert intruder.wait(timeout=60) == 1
        assert f"another worker is using {tmp_path / 'a'}" in intruder.log()

        for w in workers:
            w.signal(signal.SIGTERM)  # ends the wait at once
        assert [w.wait(timeout=30) for w in workers] == [0, 0]
    finally:
        for w in workers:
            w.stop()
