"""docker/gpu-worker.sh: each worker container claims a different GPU of its host, for its lifetime.

There is no GPU here, so each run of the script gets a private /dev (bubblewrap) holding stand-in
files named like GPU device nodes, and a stand-in `autoresearch` on PATH that prints its
arguments and then waits, holding the inherited lock as the real worker would. The locks, the
processes and the shared folder are real.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.kit.settings_catalog import REPO

SCRIPT = REPO / "docker" / "gpu-worker.sh"
FAKE_AUTORESEARCH = '#!/bin/sh\necho "autoresearch $*"\nexec sleep 300\n'


class Host:
    """A folder standing in for one GPU host: its device nodes, its shared data volume."""

    def __init__(self, root: Path, gpus: int) -> None:
        self.root = root
        self.data = root / "data"
        self.bin = root / "bin"
        self.bin.mkdir()
        (self.bin / "autoresearch").write_text(FAKE_AUTORESEARCH)
        (self.bin / "autoresearch").chmod(0o755)
        self.devices = []
        for index in range(gpus):
            node = root / f"nvidia{index}"
            node.write_text("")
            self.devices.append(node)
        self.processes: list[subprocess.Popen[str]] = []

    def start(self, *args: str) -> subprocess.Popen[str]:
        """One worker container's entrypoint: the script with this host's GPUs in its /dev."""
        bwrap = shutil.which("bwrap")
        assert bwrap, "bubblewrap is needed (apt-get install bubblewrap)"
        argv = [bwrap, "--unshare-user", "--die-with-parent", "--bind", "/", "/", "--dev", "/dev"]
        for node in self.devices:
            argv += ["--ro-bind", str(node), f"/dev/{node.name}"]
        env = {"PATH": f"{self.bin}:{os.environ['PATH']}", "DATA_DIR": str(self.data)}
        process = subprocess.Popen(
            [*argv, "sh", str(SCRIPT), *args],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        self.processes.append(process)
        return process

    def stop(self, process: subprocess.Popen[str]) -> None:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=30)

    def close(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                self.stop(process)


@pytest.fixture
def host(tmp_path: Path) -> Iterator[Host]:
    host = Host(tmp_path, gpus=2)
    try:
        yield host
    finally:
        host.close()


def started_as(process: subprocess.Popen[str]) -> str:
    """The command line the script handed over to (first line the stand-in prints)."""
    assert process.stdout is not None
    line = process.stdout.readline()
    assert line, f"the script exited with {process.wait(timeout=30)}: {process.stderr.read()}"  # type: ignore[union-attr]
    return line.strip()


def test_each_worker_takes_a_free_gpu_and_keeps_it_while_it_runs(host: Host) -> None:
    first = host.start("--stop-now")
    assert started_as(first) == f"autoresearch work --gpu 0 --state-dir {host.data}/workers/gpu0 --stop-now"
    second = host.start()
    assert started_as(second) == f"autoresearch work --gpu 1 --state-dir {host.data}/workers/gpu1"

    third = host.start()
    assert third.wait(timeout=30) == 1
    assert "all 2 GPUs of this host already have a worker" in third.stderr.read()  # type: ignore[union-attr]

    host.stop(first)  # the worker on GPU 0 dies: the kernel releases its lock
    replacement = host.start()
    assert started_as(replacement) == f"autoresearch work --gpu 0 --state-dir {host.data}/workers/gpu0"
    assert second.poll() is None


def test_no_visible_gpu_is_an_error_that_names_the_fix(tmp_path: Path) -> None:
    host = Host(tmp_path, gpus=0)
    process = host.start()
    assert process.wait(timeout=30) == 1
    message = process.stderr.read()  # type: ignore[union-attr]
    assert "no GPU is visible in this container" in message
    assert "NVIDIA Container Toolkit" in message
