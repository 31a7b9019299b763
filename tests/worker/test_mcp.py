"""The MCP server through the official SDK's own client, over both transports: stdio
(`autoresearch mcp` started as a subprocess, as a coding agent starts it) and streamable HTTP
(/mcp/ on the server, with the agent's bearer token). A real server and a real worker run real
sandboxed train.py files on the `test` preset: a change submitted through MCP is followed to its
decision (run once, by whichever transport submits it first).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from mcp import Client

from harness.config import HarnessSettings
from harness.data_layout import PreparedPaths
from testkit.candidates import bigram
from testkit.processes import InitialisedProject, Project, serve
from tests.fixtures_data import test_data  # noqa: F401  (session fixture)
from tests.mcp_session import TRANSPORTS, call, run, tool_error
from tests.worker.conftest import LEASE_SECONDS

pytestmark = pytest.mark.heavy

TOOLS = {
    "best",
    "submit",
    "experiment",
    "search",
    "leaderboard",
    "noise",
    "notes",
    "post_note",
    "similar",
}
TOOLS |= {"near_misses", "keep_rates"}  # has this been tried (tests/server/test_history_mcp.py)
TOOLS |= {"wait", "progress", "cancel"}  # following without blocking (tests/server/test_mcp_follow.py)
TOOLS |= {"tracks", "port", "transfer"}  # tracks (tests/server/test_tracks.py)


@pytest.fixture(scope="module")
def loop_project(
    tmp_path_factory: pytest.TempPathFactory,
    initialised: InitialisedProject,
    test_data: tuple[HarnessSettings, PreparedPaths],  # noqa: F811
) -> Iterator[Project]:
    """One project and worker for both transports' research loop. The second transport submits
    the same change, so it finds the first's experiment (the same train.py is never queued
    twice) and follows the whole MCP path without two more real runs; either alone runs it."""
    project = serve(initialised.copy_to(tmp_path_factory.mktemp("mcp-loop")), test_data[0], LEASE_SECONDS)
    try:
        project.worker("gpu0")
        yield project
    finally:
        project.close()


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_an_agent_lists_tools_submits_and_follows_a_change_to_its_decision(
    loop_project: Project, transport: str
) -> None:
    project = loop_project

    async def scenario(client: Client) -> dict[str, Any]:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        with project.agent() as agent:
            best_by_rest = agent.best().train_py
            baseline = agent.experiment(1).commit  # the base, kept or not by the other transport
        best = await call(client, "best", {"train_py": True})
        submitted = await call(
            client,
            "submit",
            {
                "description": "learning rate 0.05 -> 0.2",
                "hypothesis": "the bigram underfits at 0.05",
                "train_py": bigram(0.2),
                "base": baseline,
            },
        )
        experiment_id = submitted["experiment"]["id"]
        # As an agent with a 10 s read timeout would: short waits until the decision comes.
        for _ in range(60):
            waited = await call(client, "wait", {"experiment_ids": [experiment_id], "wait_s": 5})
            if waited["decided"]:
                break
        decided = await call(client, "experiment", {"experiment_id": experiment_id})
        followed = await call(client, "experiment", {"experiment_id": experiment_id})
        found = await call(client, "search", {"text": "0.05 -> 0.2"})
        return {
            "tools": tools,
            "best": best,
            "best_by_rest": best_by_rest,
            "decided": decided,
            "followed": followed,
            "found": found,
        }

    out = run(project, transport, scenario, read_timeout_s=10)
    assert set(out["tools"]) == TOOLS
    # Inputs and descriptions are the REST API's request body (SubmitIn), flat.
    submit_schema = out["tools"]["submit"].input_schema
    assert submit_schema["required"] == ["description"]
    description = submit_schema["properties"]["description"]
    assert description["maxLength"] == 500 and description["minLength"] == 1
    assert "unified diff" in submit_schema["properties"]["patch"]["description"]
    # The baseline, or the change itself when the other transport's run kept it.
    assert out["best"]["train_py"] == out["best_by_rest"] in (bigram(0.05), bigram(0.2))
    assert out["best"]["commit"]

    decided = out["decided"]
    experiment = decided["experiment"]
    assert decided["decided"] is True, decided
    assert experiment["status"] in ("kept", "reverted") and experiment["decision"] in ("keep", "revert")
    assert experiment["result"]["status"] == "ok" and experiment["val_bpb"] > 0, (
        experiment,
        decided["log_tail"],
    )
    assert experiment["reason"] and "+LEARNING_RATE = 0.2" in decided["diff"]
    assert decided["log_tail"]  # the harness's captured output of the run
    # The same experiment as the REST API sees it.
    with project.agent() as agent:
        assert agent.experiment(experiment["id"]).status == experiment["status"]
    assert out["followed"]["experiment"]["status"] == experiment["status"]
    assert [e["id"] for e in out["found"]["items"]] == [experiment["id"]]


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_bad_patch_and_a_bad_link_are_tool_errors_with_the_problem(
    project: Project, transport: str
) -> None:
    bad_patch = "--- a/train.py\n+++ b/train.py\n@@ -1,1 +1,1 @@\n-not a line of train.py\n+x = 1\n"

    async def scenario(client: Client) -> dict[str, Any]:
        return {
            "patch": await tool_error(
                client, "submit", {"description": "bad", "patch": bad_patch, "wait_s": 0}
            ),
            "too_long": await tool_error(client, "submit", {"description": "x" * 501, "train_py": "x = 1\n"}),
            "unknown": await tool_error(client, "experiment", {"experiment_id": 999}),
            "link": await tool_error(client, "post_note", {"text": "about nothing", "experiment_id": 999}),
            "note": await call(client, "post_note", {"text": "bigram lr: 0.2 next", "experiment_id": 1}),
            "notes": await call(client, "notes", {"experiment_id": 1}),
        }

    out = run(project, transport, scenario)
    # The API problem's kind and status, then its detail with the hunk that failed; the problem too.
    text, problem = out["patch"]
    assert text.startswith("patch-does-not-apply (422): hunk 1 (@@ -1,1) does not apply"), text
    assert problem["kind"] == "patch-does-not-apply" and problem["status"] == 422
    assert problem["detail"] in text
    text, _ = out["too_long"]
    assert "description" in text and "500" in text  # the input schema's own limit, before any request
    text, problem = out["unknown"]
    assert text == "unknown-experiment (404): no experiment 999" and problem["kind"] == "unknown-experiment"
    text, problem = out["link"]
    assert text.startswith("unknown-experiment (404)") and problem["status"] == 404, text
    assert out["note"]["author"] == "agent-1" and out["note"]["experiment_id"] == 1
    assert [n["text"] for n in out["notes"]["items"]] == ["bigram lr: 0.2 next"]
    with project.agent() as agent:  # nothing was queued by the refused calls
        assert [e.id for e in agent.search().items] == [1]


def test_the_http_transport_needs_an_agent_token(project: Project) -> None:
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"},
        },
    }
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    url = f"{project.url}/mcp/"
    for token in (None, "not-a-token", project.worker_token):
        auth = {"Authorization": f"Bearer {token}"} if token else {}
        answer = httpx.post(url, content=json.dumps(initialize), headers={**headers, **auth})
        assert answer.status_code == 401, (token, answer.text)
    answer = httpx.post(
        url,
        content=json.dumps(initialize),
        headers={**headers, "Authorization": f"Bearer {project.agent_token}"},
    )
    assert answer.status_code == 200, answer.text
