"""The MCP tools take the REST API's inputs: a tool that mirrors a route has that route's query
parameters, or its request body's fields, with the same names, types, limits, defaults and
descriptions (the tools' own extras, such as `wait_s`, aside). Read from the tools the SDK lists and
from the OpenAPI document FastAPI publishes, in-process."""

from __future__ import annotations

import asyncio
import importlib.metadata
import json
from typing import Any

import pytest
from mcp.server.mcpserver import MCPServer
from mcp.types import CallToolResult, TextContent
from pydantic import BaseModel

from protocol.schemas import NoteIn, SimilarIn, SubmitIn
from server.mcp.answers import MCP_PAGE
from server.mcp.tools import build_mcp
from tests.server.api_document import openapi

# tool -> the route it mirrors (GET, query parameters)
QUERY_TOOLS = {
    "search": "/experiments",
    "notes": "/notes",
    "near_misses": "/near-misses",
    "keep_rates": "/keep-rates",
}
# tool -> the request body it takes, flat
BODY_TOOLS: dict[str, type[BaseModel]] = {
    "submit": SubmitIn,
    "post_note": NoteIn,
    "similar": SimilarIn,
}
TOOL_EXTRAS = {"submit": {"wait_s", "log_lines"}, "similar": {"experiment_id"}, "search": {"fields"}}


def resolved(schema: Any, definitions: dict[str, Any]) -> Any:
    """`schema` with every `$ref` replaced by its definition and without titles (names differ)."""
    if isinstance(schema, list):
        return [resolved(item, definitions) for item in schema]
    if not isinstance(schema, dict):
        return schema
    if "$ref" in schema:
        return resolved(definitions[schema["$ref"].rsplit("/", 1)[-1]], definitions)
    return {key: resolved(value, definitions) for key, value in schema.items() if key != "title"}


def tool_inputs() -> dict[str, tuple[dict[str, Any], list[str]]]:
    """Each tool's input properties (references resolved) and required names, as the SDK makes them
    (before they are listed shorter: test_listed_tools_are_short)."""
    server = build_mcp(lambda: None)  # type: ignore[arg-type, return-value]
    tools = asyncio.run(MCPServer.list_tools(server))
    inputs = {}
    for tool in tools:
        schema = tool.input_schema
        properties = resolved(schema["properties"], schema.get("$defs", {}))
        inputs[tool.name] = (properties, sorted(schema.get("required", [])))
    return inputs


@pytest.mark.parametrize(("tool", "path"), QUERY_TOOLS.items())
def test_a_listing_tool_takes_its_routes_query_parameters(tool: str, path: str) -> None:
    document = openapi()
    definitions = document["components"]["schemas"]
    parameters = [p for p in document["paths"][path]["get"]["parameters"] if p["in"] == "query"]
    properties, required = tool_inputs()[tool]
    assert set(properties) - TOOL_EXTRAS.get(tool, set()) == {p["name"] for p in parameters}
    for parameter in parameters:
        expected = resolved(parameter["schema"], definitions)
        if "description" in parameter:
            expected["description"] = parameter["description"]
        # OpenAPI leaves out a null default: the parameter is optional, as its `required` says.
        expected.setdefault("default", None)
        if parameter["name"] == "limit":  # an agent's first page is shorter (server.mcp.answers)
            expected["default"] = MCP_PAGE
        assert properties[parameter["name"]] == expected, parameter["name"]
    assert required == sorted(p["name"] for p in parameters if p.get("required"))


@pytest.mark.parametrize(("tool", "model"), BODY_TOOLS.items())
def test_a_tool_that_sends_a_body_takes_its_fields(tool: str, model: type[BaseModel]) -> None:
    schema = model.model_json_schema()
    body = resolved(schema["properties"], schema.get("$defs", {}))
    properties, required = tool_inputs()[tool]
    extras = TOOL_EXTRAS.get(tool, set())
    assert {k: v for k, v in properties.items() if k not in extras} == body
    assert required == sorted(schema.get("required", []))


def test_every_tool_says_what_it_changes_and_the_server_its_version() -> None:
    """Annotations let a client run the reads without asking its user (issue 29)."""
    server = build_mcp(lambda: None)  # type: ignore[arg-type, return-value]
    annotations = {tool.name: tool.annotations for tool in asyncio.run(server.list_tools())}
    assert all(a is not None and a.open_world_hint is False for a in annotations.values()), annotations
    reads = {name for name, a in annotations.items() if a is not None and a.read_only_hint}
    assert reads == set(annotations) - {"submit", "port", "post_note", "cancel"}
    submit, post_note, cancel = annotations["submit"], annotations["post_note"], annotations["cancel"]
    assert submit is not None and submit.idempotent_hint and submit.destructive_hint is False
    assert annotations["port"] == submit  # a port queues one experiment per train.py, as a submission
    assert post_note is not None and post_note.idempotent_hint is False
    assert cancel is not None and cancel.destructive_hint and cancel.idempotent_hint
    assert server.version == importlib.metadata.version("autoresearch-server") != ""


def test_submit_says_that_the_same_train_py_again_is_the_existing_experiment() -> None:
    """An agent learns it from the tool's own text (issue 29); test_mcp_follow.py shows it does."""
    tools = {tool.name: tool for tool in asyncio.run(build_mcp(lambda: None).list_tools())}  # type: ignore[arg-type]
    text = " ".join((tools["submit"].description or "").split())
    assert "The same train.py submitted again returns the existing experiment (`existing`)" in text


def test_listed_tools_are_short_and_closed() -> None:
    """What every agent reads first (issue 51): no output schemas, no titles, an optional argument
    as what it takes, and no argument beyond those listed (a call with another is refused)."""
    tools = asyncio.run(build_mcp(lambda: None).list_tools())  # type: ignore[arg-type]
    for tool in tools:
        text = json.dumps(tool.input_schema)
        assert tool.output_schema is None and '"title"' not in text and '"null"' not in text, tool.name
        assert tool.input_schema["additionalProperties"] is False
    search = next(tool for tool in tools if tool.name == "search").input_schema["properties"]
    assert search["agent"] == {
        "description": "an agent's name",
        "maxLength": 100,
        "pattern": "^[^\\x00]*$",
        "type": "string",
    }


def test_arguments_that_fail_a_tools_schema_are_a_tool_error_in_words() -> None:
    """Not pydantic's raw text with its link (issue 29): which argument, and why."""
    server = build_mcp(lambda: None)  # type: ignore[arg-type, return-value]
    result = asyncio.run(server.call_tool("wait", {"experiment_ids": [], "wait_s": -1}))
    assert isinstance(result, CallToolResult) and result.is_error
    (content,) = result.content
    assert isinstance(content, TextContent)
    assert content.text.startswith("bad-arguments: wait: experiment_ids: List should have at least 1 item")
    assert "wait_s: Input should be greater than or equal to 0" in content.text
    assert "pydantic" not in content.text and "http" not in content.text
    assert result.structured_content is not None and result.structured_content["kind"] == "bad-arguments"
    assert result.structured_content["errors"][1] == {
        "argument": "wait_s",
        "problem": "Input should be greater than or equal to 0",
    }
