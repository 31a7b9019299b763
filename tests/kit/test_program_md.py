"""The agent instructions that `init` puts in the research repo name only real commands, options
and endpoints, and state the rules an agent must keep."""

from __future__ import annotations

import argparse
import importlib
import re

from fastapi.routing import APIRoute

from cli.main import build_parser
from server.api.routes import ROUTERS
from server.project_init import DEFAULT_PROGRAM_MD

TEXT = DEFAULT_PROGRAM_MD.read_text()


def api_routes() -> set[tuple[str, str]]:
    """(method, path with every parameter written `{}`) of the API, without the /api/v1 prefix."""
    found = set()
    for name in ROUTERS:
        for route in importlib.import_module(f"server.api.routes.{name}").router.routes:
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
        r"`(?:(GET|POST) )?(/(?:best|leaderboard|experiments|commits|events|near-misses|keep-rates)[^`?\s]*)",
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
