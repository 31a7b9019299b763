"""`autoresearch cancel ID`: cancel a queued or running experiment (its agent's token, or an admin's)."""

from __future__ import annotations

import argparse

from cli import views
from cli.connection import add_connection_args, connect, reporting


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "cancel",
        help="cancel a queued or running experiment",
        description="Cancel an experiment: a queued one never runs; a running one is stopped by its "
        "worker at its next heartbeat (a result that arrives anyway is recorded, not compared). "
        "Needs the token of the agent that submitted it, or an admin token.",
    )
    parser.add_argument("experiment_id", type=int, metavar="ID", help="the experiment's id")
    parser.add_argument("--json", action="store_true", help="print the experiment as JSON")
    add_connection_args(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    client = connect(args, "cancel", token_required=True)
    with reporting("cancel", client):
        experiment = client.cancel(args.experiment_id).experiment
    print(views.as_json(experiment) if args.json else views.summary(experiment))
    return 0
