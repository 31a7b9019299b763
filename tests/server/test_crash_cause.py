"""A crash states its cause (issue 51): the decision's reason quotes the exception's last line, and
an answer that carries the log and the harness's message shows the traceback once (the REST log,
the MCP tool `experiment`). The worker's side is simulated with the texts a real run of a
train.py importing a missing module gives (tests/runner/test_failures.py runs one)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from server.rules.failures import cause, in_short, log_with_message, shown_once
from tests.mcp_session import TRANSPORTS, call, connect_mcp
from tests.server.conftest import Live

TRACEBACK = """Traceback (most recent call last):
  File "/harness/runner/sandboxed/train_entry.py", line 154, in main
    candidate = import_candidate(config["candidate"])
  File "/sandbox/candidate/train.py", line 2, in <module>
    import flash_attn
ModuleNotFoundError: No module named 'flash_attn'"""
MESSAGE = f"importing train.py failed:\n{TRACEBACK}"
LOG = f"[harness] bubblewrap sandbox; device cpu\n{TRACEBACK}\n"


def test_the_cause_is_the_messages_last_line_and_the_traceback_is_shown_once() -> None:
    assert cause(MESSAGE) == "ModuleNotFoundError: No module named 'flash_attn'"
    assert cause("out of memory (limit 4 GB): a sandbox process was killed\n\n") == (
        "out of memory (limit 4 GB): a sandbox process was killed"
    )
    assert cause(None) is None and cause(" \n") is None
    assert cause("x" * 1000) == "x" * 297 + "..."
    assert in_short(MESSAGE) == "importing train.py failed: ModuleNotFoundError: No module named 'flash_attn'"
    assert in_short("killed at the hard deadline") == "killed at the hard deadline"
    assert shown_once(MESSAGE, LOG) == in_short(MESSAGE)  # the log has the traceback
    assert shown_once(MESSAGE, "[harness] nothing printed") == MESSAGE  # it does not: in full
    shown = log_with_message(LOG, "crash", "import_error", MESSAGE)
    assert shown == f"{LOG}\n[crash: import_error] {in_short(MESSAGE)}\n"
    alone = log_with_message("", "crash", "import_error", MESSAGE)
    assert alone == f"\n[crash: import_error] {MESSAGE}\n" and alone.count("Traceback") == 1


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_an_import_failure_is_decided_with_its_cause_and_answered_with_one_traceback(
    live: Live, worker_factory: Any, transport: str
) -> None:
    worker = worker_factory(live)
    worker.run_next(1.0)
    agent = live.client("agent")
    train_py = agent.best().train_py.replace("WIDTH = 64", "WIDTH = 72")
    crashed = agent.submit("flash attention", train_py=train_py)
    worker.run_next(None, status="crash", error_class="import_error", error_message=MESSAGE, log_tail=LOG)

    async def scenario() -> dict[str, Any]:
        async with connect_mcp(live.url, live.token("agent"), transport) as client:
            asked = {"experiment_id": crashed.id}
            text = (await client.call_tool("experiment", asked)).content[0].text  # type: ignore[union-attr]
            return {"text": text, "answer": await call(client, "experiment", asked)}

    out = asyncio.run(scenario())
    reason = agent.experiment(crashed.id).reason
    assert reason == (
        "run ended crash (import_error, ModuleNotFoundError: No module named 'flash_attn'): "
        "only ok results with a val_bpb can be kept"
    )
    assert agent.log(crashed.id).count("Traceback") == 1
    assert out["text"].count("Traceback") == 1 and out["text"].count("import_candidate") == 1, out["text"]
    answer = out["answer"]
    assert answer["experiment"]["reason"] == reason
    assert answer["experiment"]["result"]["error_message"] == in_short(MESSAGE)
    assert TRACEBACK in answer["log_tail"]
