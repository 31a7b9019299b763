"""Strict tools (issue 51): an argument a tool does not take is refused, naming the one it probably
meant, where the SDK would drop it and answer a call that was not asked (`notes {"experiment_id":
5}` returned every note, `search {"state": "kept"}` every experiment); and one thing has one
name across the tools."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from mcp.types import CallToolResult, TextContent

from server.mcp.arguments import meant
from server.mcp.tools import build_mcp
from tests.mcp_session import TRANSPORTS, call, connect_mcp, tool_error
from tests.server.conftest import Live

SERVER = build_mcp(lambda: None)  # type: ignore[arg-type, return-value]  (refusals call no API)
TOOLS = {tool.name: tool for tool in asyncio.run(SERVER.list_tools())}


def refusal(tool: str, arguments: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    result = asyncio.run(SERVER.call_tool(tool, arguments))
    assert isinstance(result, CallToolResult) and result.is_error
    (content,) = result.content
    assert isinstance(content, TextContent) and result.structured_content is not None
    return content.text, result.structured_content


@pytest.mark.parametrize("tool", sorted(TOOLS))
def test_every_tool_refuses_an_argument_it_does_not_take(tool: str) -> None:
    text, problem = refusal(tool, {"no_such_argument": 1})
    assert text.startswith(f"bad-arguments: {tool}: no_such_argument: unknown argument; "), text
    assert problem["kind"] == "bad-arguments"
    assert [error["argument"] for error in problem["errors"]] == ["no_such_argument"]


def test_an_unknown_argument_names_the_one_it_probably_meant() -> None:
    text, _ = refusal("search", {"state": "kept", "limit": 3})
    assert text == "bad-arguments: search: state: unknown argument; did you mean `status`?"
    text, _ = refusal("wait", {"experiment_ids": [1], "timeout_s": 30, "feilds": ["id"]})
    assert "timeout_s: unknown argument; did you mean `wait_s`?" in text
    assert "feilds: unknown argument; did you mean `fields`?" in text
    text, _ = refusal("progress", {"experiment": 1})
    assert text == "bad-arguments: progress: experiment: unknown argument; did you mean `experiment_id`?"
    text, _ = refusal("best", {"verbose": True})  # nothing alike: what it takes instead
    assert text == "bad-arguments: best: verbose: unknown argument; it takes track, train_py"
    text, _ = refusal("noise", {"platfrm": "cpu"})
    assert text == "bad-arguments: noise: platfrm: unknown argument; it takes track"
    assert meant("zzz", {"status", "agent"}) is None


def test_an_experiment_is_experiment_id_in_every_tool() -> None:
    names = {name for tool in TOOLS.values() for name in tool.input_schema.get("properties", {})}
    assert {n for n in names if "experiment" in n} == {"experiment_id", "experiment_ids"}
    assert {n for n in names if "wait" in n or "timeout" in n} == {"wait_s"}


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_filters_by_their_own_names_filter(live: Live, worker_factory: Any, transport: str) -> None:
    worker = worker_factory(live)
    worker.run_next(1.0)  # the baseline, kept
    agent = live.client("agent")
    second = agent.submit("wider", train_py=agent.best().train_py.replace("WIDTH = 64", "WIDTH = 96"))
    worker.run_next(1.1)  # reverted
    agent.post_note("about the baseline", experiment_id=1)
    agent.post_note("about the wider one", experiment_id=second.id)

    async def scenario() -> dict[str, Any]:
        async with connect_mcp(live.url, live.token("agent"), transport) as client:
            return {
                "notes": await call(client, "notes", {"experiment_id": second.id}),
                "kept": await call(client, "search", {"status": "kept"}),
                "state": await tool_error(client, "search", {"state": "kept"}),
            }

    out = asyncio.run(scenario())
    assert [note["text"] for note in out["notes"]["items"]] == ["about the wider one"]
    assert [e["id"] for e in out["kept"]["items"]] == [1]
    text, problem = out["state"]
    assert text == "bad-arguments: search: state: unknown argument; did you mean `status`?"
    assert problem["errors"] == [{"argument": "state", "problem": "unknown argument; did you mean `status`?"}]
