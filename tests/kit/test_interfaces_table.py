"""docs/agents.md's "One action, four interfaces" table against the code: the REST routes FastAPI
publishes, the SDK's methods, the CLI's parser and the MCP server's tools and resources, all read
in-process. A renamed method, command, option, tool or route fails here until the table says it."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest

from cli.main import build_parser
from client import Client
from server.mcp.tools import build_mcp
from tests.kit.cli_commands import commands
from tests.server.api_document import openapi

TABLE = Path(__file__).resolve().parents[2] / "docs" / "agents.md"
COLUMNS = ["action", "REST", "SDK", "CLI", "MCP"]
# The actions the issue names as one word everywhere: the SDK's method and MCP's tool carry the
# name, the CLI's command the same with hyphens.
ONE_NAME = ["submit", "search", "similar", "near_misses", "keep_rates", "progress", "wait", "cancel", "best"]
ONE_NAME += ["notes"]


def table_rows() -> list[dict[str, str]]:
    text = TABLE.read_text()
    section = text.split("## One action, four interfaces", 1)[1].split("\n## ", 1)[0]
    lines = [line for line in section.splitlines() if line.startswith("|")]
    header = [cell.strip() for cell in lines[0].strip("|").split("|")]
    assert header == COLUMNS
    return [
        dict(zip(COLUMNS, (cell.strip() for cell in line.strip("|").split("|")), strict=True))
        for line in lines[2:]
    ]


def quoted(cell: str) -> list[str]:
    """The backticked items of a cell; a cell without any must say `-` (not offered there)."""
    items = re.findall(r"`([^`]+)`", cell)
    assert items or cell == "-", f"cell {cell!r}: name each item in backticks, or write -"
    return items


def template(path: str) -> str:
    """`/experiments/{id}/diff?x=` -> `/experiments/{}/diff`: names of path parameters aside."""
    return re.sub(r"\{[^}]*\}", "{}", path.split("?", 1)[0])


ROWS = table_rows()


def mcp_offers() -> tuple[set[str], set[str]]:
    server = build_mcp(lambda: None)  # type: ignore[arg-type, return-value]
    tools = {tool.name for tool in asyncio.run(server.list_tools())}
    resources = {str(resource.uri) for resource in asyncio.run(server.list_resources())}
    resources |= {template(str(t.uri_template)) for t in asyncio.run(server.list_resource_templates())}
    return tools, resources


def test_the_table_lists_the_actions_an_agent_needs() -> None:
    assert len(ROWS) >= 15
    assert {row["action"] for row in ROWS} >= {"search", "near misses", "keep rates", "cancel", "notes"}


def test_every_route_in_the_table_exists() -> None:
    paths = openapi()["paths"]
    routes = {(method.upper(), template(path)) for path, item in paths.items() for method in item}
    for row in ROWS:
        for item in quoted(row["REST"]):
            method, _, path = item.partition(" ")
            assert (method, template(path)) in routes, f"{row['action']}: no route {item}"


def test_every_sdk_method_in_the_table_exists() -> None:
    for row in ROWS:
        for item in quoted(row["SDK"]):
            name = item.split("(", 1)[0]
            assert callable(getattr(Client, name, None)), f"{row['action']}: Client has no method {name}"


def test_every_cli_command_and_option_in_the_table_exists() -> None:
    parsers = {" ".join(path): parser for path, parser, _ in commands(build_parser())}
    for row in ROWS:
        for item in quoted(row["CLI"]):
            name, *words = item.split()
            assert name in parsers, f"{row['action']}: no command `autoresearch {name}`"
            options = {o for action in parsers[name]._actions for o in action.option_strings}
            for word in words:
                if word.startswith("-"):
                    assert word in options, f"{row['action']}: `autoresearch {name}` has no {word}"
                else:  # a placeholder for an argument, as the command's usage names it
                    assert word.rstrip(".") in parsers[name].format_usage(), (row["action"], word)


def test_the_mcp_column_names_every_tool_and_resource_and_nothing_else() -> None:
    tools, resources = mcp_offers()
    named = set()
    for row in ROWS:
        for item in quoted(row["MCP"]):
            name = template(item) if "://" in item else item.split("(", 1)[0]
            assert name in tools | resources, f"{row['action']}: MCP offers no {item}"
            named.add(name)
    assert named == tools | resources, f"not in the table: {(tools | resources) - named}"


@pytest.mark.parametrize("name", ONE_NAME)
def test_an_action_with_one_name_has_it_everywhere(name: str) -> None:
    tools, _ = mcp_offers()
    rows = [row for row in ROWS if name in [item.split("(", 1)[0] for item in quoted(row["MCP"])]]
    assert rows, f"no row has the MCP tool {name}"
    for row in rows:
        assert name in [item.split("(", 1)[0] for item in quoted(row["SDK"])], row
        assert name.replace("_", "-") in [item.split()[0] for item in quoted(row["CLI"])], row
    assert name in tools
