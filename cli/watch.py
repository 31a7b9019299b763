"""`autoresearch progress ID` and `autoresearch wait ID...`: a run's loss curve so far, and waiting
for any of several experiments' decisions (MCP's tools and the SDK's methods of the same names)."""

from __future__ import annotations

import argparse
import math
import sys

from cli import views
from cli.connection import add_connection_args, connect, reporting
from protocol.spread import spread


def register(subparsers: argparse._SubParsersAction) -> None:
    progress = subparsers.add_parser(
        "progress",
        help="a run's progress so far: phase, step, loss, share of the budget",
        description="A run's progress samples so far (default: the experiment's latest run with any), "
        "evenly spread over the run, the latest included.",
    )
    progress.add_argument("experiment_id", type=int, metavar="ID", help="the experiment's id")
    progress.add_argument("--run", type=int, metavar="N", help="this run of it (default: its latest)")
    progress.add_argument("--points", type=int, default=20, help="samples to show (default 20)")
    progress.add_argument("--json", action="store_true", help="print the API's answer (all samples) as JSON")
    add_connection_args(progress)
    progress.set_defaults(func=run_progress)

    wait = subparsers.add_parser(
        "wait",
        help="wait until any of the experiments is decided (or ended)",
        description="Wait until any of the experiments reaches a final state; print those that have. "
        "Exits 0 then, 1 after --timeout seconds with none.",
    )
    wait.add_argument("experiment_ids", type=int, nargs="+", metavar="ID", help="experiment ids")
    wait.add_argument("--timeout", type=float, metavar="S", help="give up after S seconds (default: never)")
    wait.add_argument("--json", action="store_true", help="print the decided experiments as JSON")
    add_connection_args(wait)
    wait.set_defaults(func=run_wait)


def run_progress(args: argparse.Namespace) -> int:
    if args.points < 1:
        raise SystemExit("autoresearch progress: --points must be at least 1")
    client = connect(args, "progress", token_required=False)
    with reporting("progress", client):
        answer = client.progress(args.experiment_id, args.run)
    if args.json:
        print(views.as_json(answer))
        return 0
    if answer.run is None:
        print(f"experiment {answer.experiment_id}: no progress yet")
        return 0
    print(f"experiment {answer.experiment_id}, run {answer.run}: {len(answer.events)} samples")
    for sample in spread(answer.events, args.points):
        print(f"  {sample.elapsed_s:7.1f} s  {views.progress(sample)}")
    return 0


def run_wait(args: argparse.Namespace) -> int:
    if args.timeout is not None and args.timeout <= 0:
        raise SystemExit("autoresearch wait: --timeout must be a positive number of seconds")
    client = connect(args, "wait", token_required=False)
    with reporting("wait", client):
        try:
            decided = client.wait(*args.experiment_ids, timeout=args.timeout or math.inf)
        except TimeoutError as exc:
            print(f"autoresearch wait: {exc}", file=sys.stderr)
            return 1
    print(views.as_json(decided) if args.json else "\n".join(views.summary(e) for e in decided))
    return 0
