"""`schemathesis run --checks all` against a live server: the OpenAPI document says what it does.

Runs the schemathesis command (every phase, every check) over real HTTP against a server with
history (see `seeded_live`), once with an agent token and once with a worker token, so that
every operation is reached with the token it is meant for and refused (403) with the other.
GET /events is left out: it is an endless stream (see test_events_and_ops.py). The one allowance,
in schemathesis.toml: a change of train.py (POST /experiments, POST /similar) whose patch does not
parse or apply, or whose edit names no one place of train.py, is a 422 (JSON Schema cannot say
which patches apply). Few examples per operation keep each run to a couple of minutes.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.heavy

MAX_EXAMPLES = 10


@pytest.mark.parametrize("kind", ["agent", "worker"])
def test_schemathesis_finds_no_failures(seeded_live, kind: str, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    live, tokens = seeded_live
    command = shutil.which("schemathesis", path=str(Path(sys.executable).parent))
    assert command is not None, "schemathesis is in requirements.txt"
    ran = subprocess.run(
        [
            command,
            "--config-file",
            str(Path(__file__).with_name("schemathesis.toml")),
            "run",
            f"{live.url}/api/v1/openapi.json",
            "--checks",
            "all",
            "--header",
            f"Authorization: Bearer {tokens[kind]}",
            "--exclude-path",
            "/api/v1/events",
            "--max-examples",
            str(MAX_EXAMPLES),
            "--seed",
            "1",
            "--no-color",
            "--report-dir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=tmp_path,
    )
    assert ran.returncode == 0, ran.stdout[-20000:] + ran.stderr[-5000:]
