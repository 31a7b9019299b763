"""Entry point of the `autoresearch` command: one module per command, each with `register()`."""

from __future__ import annotations

import argparse
import os
import sys
from types import ModuleType

from cli import (
    agent,
    best,
    cancel,
    db,
    history,
    init,
    integrity,
    mcp,
    notes,
    prepare,
    results_tsv,
    retry,
    run,
    search,
    serve,
    similar,
    status,
    submit,
    token,
    tracks,
    up,
    watch,
    work,
)

# The commands, in the order `autoresearch --help` lists them; each module's `register(subparsers)`
# adds its command(s) and sets `func`.
COMMANDS: tuple[ModuleType, ...] = (work, prepare, serve, db, init, token, up, submit, status, best)
COMMANDS += (results_tsv, agent, run, retry, notes, mcp, similar, search, cancel, history, watch, integrity)
COMMANDS += (tracks,)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="autoresearch",
        description="Autonomous experiment server for small LLM pretraining research.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for command in COMMANDS:
        command.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code = int(args.func(args) or 0)
        sys.stdout.flush()  # here, not at exit, where a broken pipe could no longer be caught
        return code
    except BrokenPipeError:
        # The reader went away (`autoresearch status 8 | head -5`): end quietly, as other tools do.
        # Python would otherwise complain again when it flushes stdout at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, what a shell reports for a tool ended by the broken pipe


if __name__ == "__main__":
    sys.exit(main())
