"""docs/agents.md's examples run against the real baseline (issue 51: its example edit named
`MATRIX_LR = 0.02` where the baseline says 0.04, so copying it failed): every Python block runs
as printed against a live server whose best is harness/baseline/train.py, a simulated worker
deciding what it submits, and every edit docs/agents.md and docs/api.md show applies to the
baseline."""

from __future__ import annotations

import asyncio
import json
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import harness
from tests.server.conftest import Live, LiveFactory, sim_worker

DOCS = Path(__file__).resolve().parents[2] / "docs"
AGENTS_MD = (DOCS / "agents.md").read_text()
REAL_BASELINE = (Path(harness.__file__).parent / "baseline" / "train.py").read_text()


def python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, re.S)


def shown_edits() -> list[dict[str, str]]:
    """Every search/replace edit written in the docs, as JSON or as a Python literal."""
    found = []
    for doc in ("agents.md", "api.md"):
        for old, new in re.findall(r'\{"old": ("[^"]*"), "new": ("[^"]*")\}', (DOCS / doc).read_text()):
            found.append({"old": json.loads(old), "new": json.loads(new)})
    return found


@pytest.fixture
def deciding(live_factory: LiveFactory) -> Iterator[Live]:
    """A server on the real baseline, measured, and a worker that reports a run for whatever is
    queued next until the test ends."""
    live = live_factory(baseline=REAL_BASELINE)
    worker = sim_worker(live)
    worker.run_next(1.0)
    done = threading.Event()

    def decide() -> None:
        while not done.is_set():
            claim = worker.claim(wait_s=0.5)
            if claim is not None:
                worker.report(claim, 0.99)

    thread = threading.Thread(target=decide)
    thread.start()
    try:
        yield live
    finally:
        done.set()
        thread.join()


def test_every_edit_the_docs_show_applies_to_the_real_baseline() -> None:
    edits = shown_edits()
    assert len(edits) >= 2
    for edit in edits:
        assert REAL_BASELINE.count(edit["old"]) == 1, edit


def test_the_mcp_loop_example_runs_as_printed(deciding: Live) -> None:
    example = next(block for block in python_blocks(AGENTS_MD) if "async def one_change" in block)
    names: dict[str, Any] = {"__name__": "docs_example"}  # not __main__: its own print is for a user
    exec(compile(example, "docs/agents.md", "exec"), names)
    answer = asyncio.run(names["one_change"](deciding.url, deciding.token("agent")))
    assert answer["decided"] is True and answer["experiment"]["decision"] == "keep", answer
    assert "-MATRIX_LR = 0.04\n+MATRIX_LR = 0.05" in answer["diff"]


def test_the_sdk_example_runs_as_printed(deciding: Live, capsys: pytest.CaptureFixture[str]) -> None:
    (example,) = [block for block in python_blocks(AGENTS_MD) if "c.near_misses(" in block]
    exec(compile(example, "docs/agents.md", "exec"), {"url": deciding.url, "token": deciding.token("agent")})
    assert capsys.readouterr().err == ""
