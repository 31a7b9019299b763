"""Following changes through MCP without blocking (issue 29): `submit` answers at once, `progress`
shows a run's loss curve beside the best's, a tool that waits sends progress notifications, `wait`
answers the first decisions of several, and `cancel` ends one's own experiment; over both
transports, against a live server and a simulated worker (the protocol's other side,
tests/server/conftest.py)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from tests.mcp_session import TRANSPORTS, call, connect_mcp, tool_error
from tests.server.conftest import Live, SimWorker
from tests.server.history_play import SOURCE


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_submit_answers_at_once_then_progress_wait_and_cancel_follow_it(
    live: Live, worker_factory: Any, transport: str
) -> None:
    worker: SimWorker = worker_factory(live)
    baseline = worker.claim()
    assert baseline is not None
    worker.client.send_progress(baseline.lease_id, [{"step": 1, "loss": 4.0, "fraction": 0.1}])
    worker.client.send_progress(baseline.lease_id, [{"step": 2, "loss": 3.5, "fraction": 0.2}])
    worker.report(baseline, 1.0)
    token = live.token("agent")

    async def scenario() -> dict[str, Any]:
        out: dict[str, Any] = {}
        async with connect_mcp(live.url, token, transport) as client:
            started = time.monotonic()
            out["submitted"] = await call(
                client, "submit", {"description": "lr up", "train_py": SOURCE.replace("0.01", "0.02", 1)}
            )
            out["submit_s"] = time.monotonic() - started
            first = out["submitted"]["experiment"]["id"]
            out["again"] = await call(
                client,
                "submit",
                {"description": "lr up again", "train_py": SOURCE.replace("0.01", "0.02", 1)},
            )
            out["waited_queued"] = await call(client, "wait", {"experiment_ids": [first], "wait_s": 0})

            claim = await asyncio.to_thread(worker.claim)
            assert claim is not None and claim.experiment_id == first
            await asyncio.to_thread(
                worker.client.send_progress, claim.lease_id, [{"step": 1, "loss": 4.2, "fraction": 0.1}]
            )
            out["progress"] = await call(client, "progress", {"experiment_id": first})
            heard: list[tuple[float, float | None, str | None]] = []

            async def on_progress(progress: float, total: float | None, message: str | None) -> None:
                heard.append((progress, total, message))

            waited = await client.call_tool(
                "experiment", {"experiment_id": first, "wait_s": 1.0}, progress_callback=on_progress
            )
            assert not waited.is_error, waited.content
            out["heard"] = heard

            second = (
                await call(
                    client,
                    "submit",
                    {"description": "lr down", "train_py": SOURCE.replace("0.01", "0.005", 1)},
                )
            )["experiment"]["id"]
            out["cancelled"] = await call(client, "cancel", {"experiment_id": second})
            out["waited"] = await call(client, "wait", {"experiment_ids": [first, second], "wait_s": 0})
            out["cancel_again"] = await call(client, "cancel", {"experiment_id": second})
            out["bad_edit"] = await tool_error(
                client, "submit", {"description": "x", "edits": [{"old": "no such text", "new": "y"}]}
            )
            out["ids"] = (first, second)
        return out

    out = asyncio.run(scenario())
    first, second = out["ids"]
    submitted = out["submitted"]
    assert submitted["decided"] is False and submitted["experiment"]["status"] == "queued"
    again = out["again"]  # the same train.py: the tool's text says so (test_mcp_schemas.py)
    assert again["existing"] is True and again["experiment"]["id"] == first
    assert out["submit_s"] < 10  # nothing waited for a decision (no worker has even claimed it)
    assert out["waited_queued"] == {
        "decided": [],
        "pending": {str(first): "queued"},
        "next_step": f"not decided yet: call `wait` with experiment_ids [{first}] to wait more "
        "(each call waits at most 8 s)",
    }
    progress = out["progress"]
    assert [e["loss"] for e in progress["experiment"]["events"]] == [4.2]
    assert progress["best"]["experiment_id"] == 1 and [e["loss"] for e in progress["best"]["events"]] == [
        4.0,
        3.5,
    ]
    assert out["heard"] and set(out["heard"]) == {
        (0.1, 1.0, f"experiment {first}: running, run 1 train step 1, loss 4.2000")
    }
    assert out["cancelled"]["experiment"]["status"] == "cancelled"
    waited = out["waited"]
    assert [e["id"] for e in waited["decided"]] == [second] and waited["decided"][0]["status"] == "cancelled"
    assert waited["pending"] == {str(first): "running"}
    assert out["cancel_again"] == out["cancelled"]  # twice is once (the tool's idempotent hint)
    text, _ = out["bad_edit"]  # the edit that names no place of train.py, in words
    assert text.startswith("edit-not-found (422): edit 1: `old` does not occur") and "'no such text'" in text
