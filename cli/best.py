"""`autoresearch best`: print or write the best train.py."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from cli import views
from cli.connection import add_connection_args, add_track_arg, connect, reporting, track_of
from cli.output_file import check_output_path, write_output


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "best",
        help="print the best train.py (or write it with -o)",
        description="The current best train.py: printed to standard output (a summary line goes to "
        "standard error), or written to a file with -o. Start every change from it.",
    )
    parser.add_argument("-o", "--output", type=Path, metavar="FILE", help="write train.py to FILE")
    parser.add_argument(
        "--json", action="store_true", help="print commit, val_bpb, experiment id and train.py as JSON"
    )
    add_track_arg(parser)
    add_connection_args(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    check_output_path("best", args.output, "train.py")
    client = connect(args, "best", token_required=False)
    with reporting("best", client):
        best = client.best(track_of(args))
    if args.json:
        print(views.as_json(best))
        return 0
    origin = f"experiment {best.experiment_id}" if best.experiment_id else "the baseline"
    about = f"best: val_bpb {views.bpb(best.val_bpb)}, {origin}, commit {best.commit}"
    if best.measured_on:
        about += f"; measured: {best.measured_on}"
    if args.output is None:
        print(f"# {about}", file=sys.stderr)
        sys.stdout.write(best.train_py)
        return 0
    write_output("best", args.output, best.train_py)
    print(f"wrote {args.output} ({about})")
    return 0
