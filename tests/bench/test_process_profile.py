"""bench/process_profile.py: a command's CPU by kind of process, every process it starts counted,
sampled from /proc."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from bench.process_profile import KINDS, kind_of, profile, report

REPO = Path(__file__).resolve().parents[2]

# A process that burns 1 CPU second and then idles a second (so that a sample sees all it used, on a
# busy machine too), its command line ending in a marker of this test's own (other tests' workers
# and sandboxes may run beside it).
BURN = "import time\nt = time.process_time()\nwhile time.process_time() - t < 1.0: pass\ntime.sleep(1.0)"
# The profiled command: a burner of its own, then one started by a child of its (a grandchild). The
# burner's command comes in $BURN, so that no other command line holds the marker.
RUN_BURNER = "import json, os, subprocess; subprocess.run(json.loads(os.environ['BURN']), check=True)"
COMMAND = (
    f"import subprocess, sys\nexec({RUN_BURNER!r})\nsubprocess.run([sys.executable, '-c', {RUN_BURNER!r}])"
)


def test_every_process_the_command_starts_is_counted_by_its_kind(monkeypatch: pytest.MonkeyPatch) -> None:
    marker = f"burner-{uuid.uuid4()}"
    monkeypatch.setenv("BURN", json.dumps([sys.executable, "-c", BURN, marker]))
    code, by_kind = profile([sys.executable, "-c", COMMAND], 0.05, ((marker, "burner"), *KINDS))
    assert code == 0
    cpu_s, processes = by_kind["burner"]
    # Two burners of 1 CPU-s each, and their interpreters' starts.
    assert processes == 2 and 2.0 <= cpu_s <= 2.5, by_kind
    assert report(by_kind)[0].endswith("CPU-s seen in all")


def test_the_command_s_exit_status_is_passed_on() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench.process_profile", "--", sys.executable, "-c", "raise SystemExit(3)"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 3, done.stderr
    assert "CPU-s seen in all" in done.stdout


def test_a_process_is_known_by_the_first_marker_in_its_command_line() -> None:
    assert kind_of("python -I -B -u -m harness.runner.scoring.scorer {} cli.main serve") == "scorer"
    assert (
        kind_of("bwrap --unshare-all -- python -m harness.runner.sandboxed.train_entry {}") == "train sandbox"
    )
    assert kind_of("python -m cli.main work --server http://x") == "worker"
    assert kind_of("python -m cli.main token create") == "other autoresearch command"
    assert kind_of("/usr/bin/git status") == "other: git"
    assert kind_of("") == "other: (no command line)"
