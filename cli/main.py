"""Entry point of the `autoresearch` command: one module per command, each with `register()`."""

from __future__ import annotations

import argparse
import importlib
import os
import sys

# Each module defines `register(subparsers)`, which adds its command(s) and sets `func`.
COMMAND_MODULES: list[str] = [
    "work",
    "prepare",
    "serve",
    "db",
    "init",
    "token",
    "up",
    "submit",
    "status",
    "best",
    "results_tsv",
    "agent",
    "run",
    "retry",
    "notes",
    "mcp",
    "similar",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="autoresearch",
        description="Autonomous experiment server for small LLM pretraining research.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMAND_MODULES:
        importlib.import_module(f"cli.{name}").register(sub)
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
