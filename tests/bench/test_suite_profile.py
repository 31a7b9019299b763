"""bench/suite_profile.py: a test's CPU is the CPU of every process it started, counted in a real
cpuacct cgroup, including a process that outlives the test."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from bench.suite_profile import summary

REPO = Path(__file__).resolve().parents[2]

# The first test starts a process that burns 1 CPU second and is never waited for; the second
# waits until it has ended, doing nothing itself.
TESTS = """
import os, subprocess, sys, time
from pathlib import Path

BURN = "import time\\nt = time.process_time()\\nwhile time.process_time() - t < 1.0: pass"


def test_starts_a_burner(tmp_path_factory):
    burner = subprocess.Popen([sys.executable, "-c", BURN], start_new_session=True)
    Path(os.environ["BURNER_PID_FILE"]).write_text(str(burner.pid))


def test_waits_for_it():
    pid = int(Path(os.environ["BURNER_PID_FILE"]).read_text())
    deadline = time.monotonic() + 60
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        if Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z":
            break  # ended (a zombie until this process exits)
        time.sleep(0.05)
"""


def test_each_test_is_charged_the_cpu_of_the_processes_it_started(tmp_path: Path) -> None:
    (tmp_path / "test_burn.py").write_text(TESTS)
    out = tmp_path / "profile.jsonl"
    earlier = {"id": "test_old.py::test_of_an_earlier_session", "wall_s": 1, "cpu_s": 1}
    out.write_text(json.dumps(earlier) + "\n")
    env = {**os.environ, "SUITE_PROFILE_OUT": str(out), "BURNER_PID_FILE": str(tmp_path / "pid")}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "bench.suite_profile",
            "-p",
            "no:cacheprovider",
            "--rootdir",
            str(tmp_path),
            str(tmp_path / "test_burn.py"),
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    rows = {row["id"].split("::")[1]: row for row in map(json.loads, out.read_text().splitlines())}
    assert rows.keys() == {"test_starts_a_burner", "test_waits_for_it"}  # the earlier session's row gone
    # The burner's second is the first test's, though it ran on during the second.
    assert rows["test_starts_a_burner"]["cpu_s"] >= 0.95
    assert rows["test_waits_for_it"]["cpu_s"] < 0.5
    assert summary(list(rows.values()))[0].startswith("2 tests, ")
