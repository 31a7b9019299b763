"""Has this been tried? through MCP, with the official SDK's client over both transports: search by
the constant a change set or the lines it changed, the similar experiments of a proposed change
and of an existing one, the submit tool's `similar`, a change submitted as a patch, and a bad
change as a tool error. No worker runs here: what is asked about is queued, not measured (the
outcomes' fields are the API's, tested in tests/server/test_similar_api.py)."""

from __future__ import annotations

import difflib
from typing import Any

import pytest
from mcp import Client

from testkit.candidates import bigram
from testkit.processes import Project
from tests.mcp_session import TRANSPORTS, call, run, tool_error


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_an_agent_asks_whether_a_change_was_tried_and_searches_by_what_changes_touched(
    project: Project, transport: str
) -> None:
    with project.agent() as agent:
        tried = agent.submit("lr 0.2", train_py=bigram(0.2))
        code = agent.submit(
            "zero grads as None", train_py=bigram(0.05).replace("set_to_none=True", "set_to_none=False")
        )

    lines = difflib.unified_diff(
        bigram(0.05).splitlines(True), bigram(0.5).splitlines(True), "a/train.py", "b/train.py"
    )
    as_patch = "".join(lines)

    async def scenario(client: Client) -> dict[str, Any]:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        return {
            "tools": tools,
            "by_constant": await call(client, "search", {"constant": "LEARNING_RATE"}),
            "by_line": await call(client, "search", {"line": "set_to_none=False"}),
            "nearby": await call(client, "similar", {"train_py": bigram(0.21)}),
            "far": await call(client, "similar", {"train_py": bigram(0.01)}),  # down, where 0.2 went up
            "of_tried": await call(client, "similar", {"experiment_id": tried.id}),
            "both": await tool_error(
                client, "similar", {"experiment_id": tried.id, "train_py": bigram(0.21)}
            ),
            "submitted": await call(
                client, "submit", {"description": "lr 0.205", "train_py": bigram(0.205), "wait_s": 0}
            ),
            "as_patch": await call(
                client, "submit", {"description": "lr 0.5, a patch", "patch": as_patch, "wait_s": 0}
            ),
            "bad": await tool_error(
                client,
                "similar",
                {"patch": "--- a/train.py\n+++ b/train.py\n@@ -1 +1 @@\n-no\n+x\n"},
            ),
        }

    out = run(project, transport, scenario)
    # The tool's inputs are the REST body's (SimilarIn), flat.
    schema = out["tools"]["similar"].input_schema
    assert "unified diff" in schema["properties"]["patch"]["description"] and "required" not in schema
    assert [e["id"] for e in out["by_constant"]["items"]] == [tried.id]
    assert [e["id"] for e in out["by_line"]["items"]] == [code.id]
    (nearby,) = out["nearby"]["similar"]
    assert nearby["experiment_id"] == tried.id and nearby["kind"] == "nearby_constants"
    assert nearby["status"] == "queued" and nearby["detail"] == "LEARNING_RATE 0.2 (here 0.21)"
    assert out["far"]["similar"] == []
    assert out["of_tried"] == {"experiment_id": tried.id, "similar": []}
    text, problem = out["both"]  # an experiment and a change: which one?
    assert text.startswith("bad-arguments: similar: give experiment_id or a change")
    assert problem["kind"] == "bad-arguments"
    assert [s["experiment_id"] for s in out["submitted"]["similar"]] == [tried.id]
    # A change given as a patch of the best: queued on it, its diff the patch's.
    submitted = out["as_patch"]
    assert submitted["decided"] is False and submitted["experiment"]["status"] == "queued"
    assert "-LEARNING_RATE = 0.05\n+LEARNING_RATE = 0.5\n" in submitted["diff"]
    text, problem = out["bad"]
    assert text.startswith("patch-does-not-apply (422)") and problem["kind"] == "patch-does-not-apply"
    with project.agent() as agent:  # asking queued nothing
        assert submitted["experiment"]["base"] == agent.best().commit
        assert len(agent.search().items) == 5  # the baseline, the two above, the two submitted
