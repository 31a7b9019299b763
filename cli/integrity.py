"""`autoresearch integrity`: the runs that ended in an integrity class, and an admin clearing them."""

from __future__ import annotations

import argparse

from cli import views
from cli.connection import add_connection_args, connect, reporting
from protocol.schemas import IntegrityEventOut


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "integrity",
        help="integrity events: runs that ended non_causal or score_over_budget (clear: admin)",
        description="List the runs that ended in an integrity class, newest first, with their evidence; "
        "an agent with an event not cleared has its queued experiments held. `--clear ID -m WHY` "
        "clears one (admin token).",
    )
    parser.add_argument("--open", action="store_true", help="only the events not cleared")
    parser.add_argument("-n", "--limit", type=int, default=50, help="events to show (default 50)")
    parser.add_argument("--clear", type=int, metavar="ID", help="clear this event (admin token)")
    parser.add_argument("-m", "--note", help="why it is cleared (with --clear; kept with the event)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")
    add_connection_args(parser, token_kind="admin")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.clear is not None and not args.note:
        raise SystemExit("autoresearch integrity: --clear ID needs -m WHY (kept with the event)")
    client = connect(args, "integrity", token_required=args.clear is not None)
    with reporting("integrity", client):
        if args.clear is not None:
            cleared = client.clear_integrity_event(args.clear, args.note)
            print(views.as_json(cleared) if args.json else line(cleared))
            return 0
        answer = client.integrity_events(open_only=args.open, limit=args.limit)
    if args.json:
        print(views.as_json(answer))
    elif not answer.items:
        print("no integrity events" + (" open" if args.open else ""))
    else:
        print("\n".join(line(event) for event in answer.items))
    return 0


def line(event: IntegrityEventOut) -> str:
    state = f"cleared by {event.cleared_by}: {event.clear_note}" if event.cleared_at else "OPEN (agent held)"
    where = f"experiment {event.experiment_id} run {event.run}"
    head = f"{event.id:>4}  {event.agent}  {where}  {event.error_class}"
    return f"{head}  {state}\n      {event.evidence or ''}"
