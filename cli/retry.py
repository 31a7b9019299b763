"""`autoresearch retry ID`: queue an infra_failed or cancelled experiment again (admin)."""

from __future__ import annotations

import argparse

from cli import views
from cli.connection import add_connection_args, connect, reporting


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "retry",
        help="queue an infra_failed or cancelled experiment again (admin token)",
        description="Put an experiment that ended infra_failed (its workers broke) or cancelled back "
        "in the queue, at the back, with its attempts reset. Needs an admin token.",
    )
    parser.add_argument("experiment_id", type=int, metavar="ID", help="the experiment's id")
    parser.add_argument("--json", action="store_true", help="print the experiment as JSON")
    add_connection_args(parser, token_kind="admin")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    client = connect(args, "retry", token_required=True)
    with reporting("retry", client):
        experiment = client.retry(args.experiment_id)
    queued = f"experiment {experiment.id} is queued again (attempts reset)"
    print(views.as_json(experiment) if args.json else queued)
    return 0
