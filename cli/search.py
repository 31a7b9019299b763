"""`autoresearch search`: experiments by what they changed or say (GET /experiments; MCP's
`search`), before trying something again."""

from __future__ import annotations

import argparse

from cli import views
from cli.connection import add_connection_args, add_track_arg, connect, reporting, track_of
from protocol.schemas import PAGE_LIMIT
from protocol.states import ExperimentStatus


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "search",
        help="find experiments by the constant they set, a line they changed, or their words",
        description="Experiments newest first, filtered by what a change set or touched and what its "
        "description says: was this tried, and what came of it? The filters combine.",
    )
    parser.add_argument("--constant", help="a constant the change set (its exact name), e.g. MATRIX_LR")
    parser.add_argument("--line", help="text one of its changed lines contains (case-sensitive)")
    parser.add_argument("--text", help="words its description or hypothesis contains (any case)")
    parser.add_argument("--agent", help="only this agent's experiments")
    parser.add_argument("--state", choices=list(ExperimentStatus), help="only experiments in this state")
    parser.add_argument("-n", "--limit", type=int, default=20, help="at most this many (default 20)")
    parser.add_argument("--json", action="store_true", help="print the API's answer as JSON")
    add_track_arg(parser, "only this track's experiments (default: $AUTORESEARCH_TRACK, else every track's)")
    add_connection_args(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if not 1 <= args.limit <= PAGE_LIMIT:
        raise SystemExit(f"autoresearch search: --limit must be between 1 and {PAGE_LIMIT}")
    if not (args.constant or args.line or args.text or args.agent or args.state):
        raise SystemExit(
            "autoresearch search: say what to look for: --constant, --line, --text, --agent or --state "
            "(`autoresearch status` lists the recent experiments)"
        )
    client = connect(args, "search", token_required=False)
    with reporting("search", client):
        page = client.search(
            track=track_of(args),
            constant=args.constant,
            line=args.line,
            text=args.text,
            agent=args.agent,
            status=args.state,
            limit=args.limit,
        )
    if args.json:
        print(views.as_json(page))
    else:
        print(views.table(page.items) if page.items else "no experiments match")
        if page.next_cursor:
            print(f"(more match: raise --limit, up to {PAGE_LIMIT})")
    return 0
