"""`autoresearch agent --strategy random`: the built-in agent, a control for LLM agents."""

from __future__ import annotations

import argparse
import random
import signal
import threading
from types import FrameType

from agent.mutation import NoConstantsError
from agent.random_agent import run_random_agent
from cli.connection import add_connection_args, add_track_arg, connect, reporting, track_of


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "agent",
        help="run a built-in agent (random hyperparameter search) against the server",
        description="Research without an LLM: take the best train.py, move one or two of its "
        "top-level UPPER_CASE numeric constants at random (powers of two double or halve, other ints "
        "and floats scale log-uniformly, fractions stay between 0 and 1), submit the change, wait for "
        "the decision, repeat. Runs until Ctrl-C (or --count experiments). Use it as the control that "
        "LLM agents must beat: give it its own agent token so the leaderboard compares them.",
    )
    parser.add_argument(
        "--strategy", choices=["random"], default="random", help="how to propose changes (default random)"
    )
    parser.add_argument("--seed", type=int, help="random seed, for a reproducible sequence of proposals")
    parser.add_argument(
        "--count", type=int, default=0, help="stop after this many experiments (default 0: never)"
    )
    parser.add_argument(
        "--parallel",
        type=int,
        default=1,
        help="experiments in flight at once (default 1: each starts from the last decision)",
    )
    parser.add_argument("--poll", type=float, default=2.0, metavar="S", help="seconds between status checks")
    parser.add_argument(
        "--skip-tried",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="ask the server whether a draw was already tried (the same change, or the same constants "
        "at nearby values) and draw again if so (default: on)",
    )
    add_track_arg(parser)
    add_connection_args(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.count < 0:
        raise SystemExit("autoresearch agent: --count must be 0 (never stop) or more")
    if args.parallel < 1:
        raise SystemExit("autoresearch agent: --parallel must be at least 1")
    if args.poll <= 0:
        raise SystemExit("autoresearch agent: --poll must be a positive number of seconds")
    client = connect(args, "agent", token_required=True)
    stop = threading.Event()

    def request_stop(signum: int, _frame: FrameType | None) -> None:
        print(f"\nstopping ({signal.Signals(signum).name}); experiments already queued still run", flush=True)
        stop.set()

    signal.signal(signal.SIGINT, request_stop)
    signal.signal(signal.SIGTERM, request_stop)
    rng = random.Random(args.seed)
    with reporting("agent", client):
        try:
            tally = run_random_agent(
                client,
                rng,
                lambda line: print(line, flush=True),
                count=args.count,
                parallel=args.parallel,
                poll_s=args.poll,
                stop=stop,
                skip_tried=args.skip_tried,
                track=track_of(args),
            )
        except (NoConstantsError, SyntaxError) as exc:
            raise SystemExit(f"autoresearch agent: cannot mutate the best train.py: {exc}") from None
    print(f"submitted {len(tally.submitted)}, decided {len(tally.finished)}, kept {tally.kept}")
    return 0
