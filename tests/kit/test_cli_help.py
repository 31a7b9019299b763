"""`--help` works for every registered command, and every command and option says what it does."""

from __future__ import annotations

import argparse

import pytest

from cli.main import COMMANDS, build_parser, main
from tests.kit.cli_commands import commands

ALL_COMMANDS = [path for path, _, _ in commands(build_parser())]


def test_every_command_module_registers_a_command() -> None:
    assert len({path[0] for path in ALL_COMMANDS}) >= len(COMMANDS)
    expected = {"init", "prepare", "serve", "work", "up", "db", "run", "submit", "status", "best"}
    assert expected | {"export", "import", "token", "agent"} <= {path[0] for path in ALL_COMMANDS}


@pytest.mark.parametrize("path", ALL_COMMANDS, ids=" ".join)
def test_help_works(path: tuple[str, ...], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main([*path, "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: autoresearch {' '.join(path)}")


# Commands whose standard output is not an answer: long-running processes that log, a protocol, or
# a file format of its own. Every other command prints an answer, and has --json.
NOT_AN_ANSWER = {
    ("work",): "a worker process: it logs while it runs",
    ("serve",): "the server process: it logs while it runs",
    ("up",): "the server and workers: they log while they run",
    ("agent",): "an agent loop: it logs while it runs",
    ("mcp",): "its standard output is the MCP protocol",
    ("export",): "its standard output is results.tsv (with -o, only a message on stderr)",
}


def test_every_command_that_prints_an_answer_has_json() -> None:
    leaves = {path: parser for path, parser, _ in commands(build_parser()) if not parser._subparsers}
    assert set(NOT_AN_ANSWER) <= set(leaves)
    without = [
        " ".join(path)
        for path, parser in leaves.items()
        if path not in NOT_AN_ANSWER and not any("--json" in a.option_strings for a in parser._actions)
    ]
    assert not without, f"commands without --json: {without}"


def test_every_command_and_option_is_described() -> None:
    undocumented = []
    for path, parser, one_line in commands(build_parser()):
        if not one_line:
            undocumented.append(" ".join(path))
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction | argparse._SubParsersAction):
                continue
            if not action.help:
                undocumented.append(f"{' '.join(path)} {action.option_strings or action.dest}")
    assert not undocumented, f"no help text: {undocumented}"
