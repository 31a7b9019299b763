"""Every command and sub-command of the `autoresearch` CLI, read from its parser."""

from __future__ import annotations

import argparse
from collections.abc import Iterator


def commands(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser, str | None]]:
    """(command path, its parser, its one-line help) for every command and sub-command."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help for choice in action._choices_actions}
            for name, subparser in action.choices.items():
                yield (*path, name), subparser, helps.get(name)
                yield from commands(subparser, (*path, name))
