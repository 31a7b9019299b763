"""The agent instructions that `init` puts in the research repo name only real commands, options,
endpoints and MCP tools, state the rules an agent must keep, and make the research memory part of
the loop: read the notes and results first, ask whether a change was tried, leave one note per
finding."""

from __future__ import annotations

import argparse
import asyncio
import re

from fastapi.routing import APIRoute

from cli.main import build_parser
from server.api.router import ROUTERS
from server.mcp.tools import build_mcp
from server.project_init import DEFAULT_PROGRAM_MD

TEXT = DEFAULT_PROGRAM_MD.read_text()


def api_routes() -> set[tuple[str, str]]:
    """(method, path with every parameter written `{}`) of the API, without the /api/v1 prefix."""
    found = set()
    for route in (route for router in ROUTERS for route in router.routes):
        if isinstance(route, APIRoute):
            path = re.sub(r"\{[^}]*\}", "{}", route.path)
            found |= {(method, path) for method in route.methods}
    return found


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def test_the_rules_are_stated() -> None:
    for rule in ("Only `train.py` changes", "The time budget is fixed", "The harness is fixed", "never stop"):
        assert rule in TEXT, rule


def test_every_endpoint_it_names_exists() -> None:
    routes = api_routes()
    named = re.findall(
        r"`(?:(GET|POST) )?"
        r"(/(?:best|leaderboard|experiments|commits|events|near-misses|keep-rates|notes|similar)[^`?\s]*)",
        TEXT,
    )
    assert len(named) >= 8
    for method, path in named:
        assert (method or "GET", re.sub(r"\{[^}]*\}", "{}", path)) in routes, (method, path)


def test_every_command_and_option_it_shows_exists() -> None:
    commands = subcommands(build_parser())
    lines = re.sub(r"\\\n\s*", " ", TEXT).splitlines()  # join continued command lines
    shown = [line.split("autoresearch ", 1)[1] for line in lines if re.search(r"^\s*autoresearch \w", line)]
    assert len(shown) >= 5
    for command_line in shown:
        name = command_line.split()[0]
        assert name in commands, command_line
        options = commands[name]._option_string_actions
        for option in re.findall(r"(?<!\S)(--?[a-z][a-z-]*)", command_line.split("#")[0]):
            assert option in options, (command_line, option)


def loop_steps() -> dict[int, str]:
    """The numbered steps of "The loop", by number."""
    loop = TEXT.split("## The loop", 1)[1].split("\n## ", 1)[0]
    return {
        int(number): body for number, body in re.findall(r"^(\d)\. (.*?)(?=^\d\. |\Z)", loop, re.M | re.S)
    }


def test_agents_read_notes_and_results_first_ask_what_was_tried_and_leave_one_note_per_finding() -> None:
    steps = loop_steps()
    assert sorted(steps) == list(range(1, 8))
    read = steps[1]
    assert read.startswith("**Read the state.**")
    assert "Read the recent notes and results before you propose anything." in read
    assert "autoresearch notes" in read and "autoresearch status" in read and "`GET /notes`" in read
    edit, submit = steps[3], steps[4]
    assert "autoresearch similar train.py" in edit and "`POST /similar`" in edit
    assert "autoresearch submit" in submit
    note = steps[6]
    assert note.startswith("**Leave one note per finding**")
    assert "autoresearch note -e" in note and "`POST /notes`" in note


def test_its_list_of_mcp_tools_is_the_registrys_and_every_tool_it_names_exists() -> None:
    """The list is the tool registry's, every tool in the order it is registered (issue 51: it had
    left out wait, progress, cancel, leaderboard and noise)."""
    tools = [tool.name for tool in asyncio.run(build_mcp(lambda: None).list_tools())]  # type: ignore[arg-type]
    listed = re.search(r"offers the same steps as\s+tools: (.*?)\. This file", TEXT, re.S)
    assert listed is not None
    assert re.findall(r"`(\w+)`", listed.group(1)) == tools
    named = set()
    for pair in re.findall(r"MCP tools? `(\w+)`(?: and `(\w+)`)?", TEXT):
        named |= {name for name in pair if name}
    assert named <= set(tools), named - set(tools)
