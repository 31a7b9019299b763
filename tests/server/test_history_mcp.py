"""Near misses and keep rates, the leaderboard and the noise as MCP tools, through the official
SDK's own client over both transports (stdio: `autoresearch mcp` as a subprocess; streamable HTTP:
/mcp/ on the server), against a live server whose history a simulated worker played: the tools
answer what the REST API answers, and bad inputs are tool errors."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pydantic import BaseModel

from client import Client
from server.main import create_app
from server.mcp.answers import MCP_PAGE, rounded
from tests.mcp_session import TRANSPORTS, call, connect_mcp
from tests.server.conftest import Live, init_with_small_baseline, make_settings, serve
from tests.server.history_play import NOISE, SOURCE, play_history


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """One played history for the module (SQLite; the API tests cover PostgreSQL)."""
    folder = tmp_path_factory.mktemp("history-mcp")
    settings = make_settings(folder, **NOISE)
    init_with_small_baseline(settings, folder, SOURCE)
    app = create_app(settings)
    with serve(app) as url:
        live = Live(url, app, settings)
        ids = play_history(live)
        yield live, live.token("agent", "reader"), ids


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_history_tools_answer_what_the_api_answers(history: Any, transport: str) -> None:
    live, token, ids = history

    async def scenario() -> dict[str, Any]:
        async with connect_mcp(live.url, token, transport) as client:
            tools = {tool.name: tool for tool in (await client.list_tools()).tools}
            out: dict[str, Any] = {"tools": tools}
            out["near"] = await call(client, "near_misses", {})
            out["near_one"] = await call(client, "near_misses", {"limit": 1})
            out["rates"] = await call(client, "keep_rates", {})
            out["leaderboard"] = await call(client, "leaderboard", {})
            out["noise"] = await call(client, "noise", {})
            out["lr"] = await call(client, "keep_rates", {"part": "constant", "name": "LEARNING_RATE"})
            out["bad_limit"] = await client.call_tool("near_misses", {"limit": 0})
            out["bad_part"] = await client.call_tool("keep_rates", {"part": "function"})
            return out

    out = asyncio.run(scenario())
    with Client(live.url) as reader:
        # The API's answers, numbers rounded as every MCP answer is (server.mcp.answers); the
        # listing tools' first page is MCP_PAGE long.
        def api(answer: BaseModel) -> Any:
            return rounded(answer.model_dump(mode="json"))

        assert out["near"] == api(reader.near_misses(limit=MCP_PAGE))
        assert out["near_one"] == api(reader.near_misses(limit=1))
        assert out["rates"] == api(reader.keep_rates(limit=MCP_PAGE))
        assert out["lr"] == api(reader.keep_rates(part="constant", name="LEARNING_RATE", limit=MCP_PAGE))
        assert out["leaderboard"] == api(reader.leaderboard())
        assert out["noise"] == api(reader.noise())
    assert [n["experiment_id"] for n in out["near"]["items"]] == [ids["lr up, near"], ids["decay up, near"]]
    assert [(k["name"], k["direction"]) for k in out["lr"]["kinds"]] == [
        ("LEARNING_RATE", "up"),
        ("LEARNING_RATE", "down"),
    ]
    # Inputs are the API's: limits in the input schema (outputs are its models, as compared above).
    schema = out["tools"]["near_misses"].input_schema["properties"]["limit"]
    assert (schema["minimum"], schema["maximum"]) == (1, 100)
    assert out["tools"]["keep_rates"].input_schema["$defs"]["Part"]["enum"] == ["constant", "region"]
    for bad in (out["bad_limit"], out["bad_part"]):
        assert bad.is_error
    assert "limit" in "".join(getattr(block, "text", "") for block in out["bad_limit"].content)
