"""`autoresearch work`: run a worker that turns queued experiments into results."""

from __future__ import annotations

import argparse
import logging
import os
from pathlib import Path

from harness.config import load_settings


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "work",
        help="run a worker (one per GPU) that claims and runs experiments",
        description=(
            "Claim queued experiments from the server, run each with the harness runner on this "
            "machine's GPU (or CPU), and report the results. Needs only the server URL and a "
            "worker token. SIGTERM finishes the current experiment and exits; a second SIGTERM "
            "cancels it and gives it back to the queue."
        ),
    )
    parser.add_argument(
        "--server",
        default=os.environ.get("AUTORESEARCH_SERVER"),
        help="server URL, e.g. http://10.0.0.5:8000 (default: $AUTORESEARCH_SERVER)",
    )
    parser.add_argument(
        "--token",
        default=os.environ.get("AUTORESEARCH_WORKER_TOKEN"),
        help="worker token (default: $AUTORESEARCH_WORKER_TOKEN, which keeps it out of `ps`)",
    )
    device = parser.add_mutually_exclusive_group()
    device.add_argument("--gpu", type=int, metavar="N", help="run on GPU N only (sets CUDA_VISIBLE_DEVICES)")
    device.add_argument("--cpu", action="store_true", help="run experiments on the CPU (no GPU)")
    parser.add_argument(
        "--name", help="worker name shown by the server (default: HOSTNAME-gpuN / HOSTNAME-cpu)"
    )
    parser.add_argument("--preset", help="harness preset, as the server's (default: $PRESET, else cpu)")
    parser.add_argument("--data-dir", type=Path, help="prepared data cache, shared by the host's workers")
    parser.add_argument(
        "--state-dir",
        type=Path,
        help="this worker's own folder: result spool and work dirs (default: DATA_DIR/workers/NAME)",
    )
    parser.add_argument(
        "--stop-now",
        action="store_true",
        help="on the first SIGTERM, cancel the running experiment and release it (short grace periods)",
    )
    parser.add_argument(
        "--unsafe-no-sandbox",
        action="store_true",
        help="run train.py without the bubblewrap sandbox (development only: train.py is untrusted)",
    )
    parser.add_argument("--timings", type=Path, help=argparse.SUPPRESS)  # bench/worker_idle.py
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from worker.signals import block_stop_signals

    # Before the imports below start threads (numpy's OpenBLAS): see worker/signals.py.
    block_stop_signals()
    # Imported here so that other commands do not pay for the worker's imports.
    from worker.main import WorkerOptions, default_name, run_worker

    if not args.server:
        raise SystemExit("autoresearch work: give the server URL with --server or $AUTORESEARCH_SERVER")
    if not args.token:
        raise SystemExit("autoresearch work: give a worker token with --token or $AUTORESEARCH_WORKER_TOKEN")
    if args.gpu is not None and args.gpu < 0:
        raise SystemExit(f"autoresearch work: --gpu {args.gpu}: GPU numbers start at 0")
    try:
        settings = load_settings(args.preset, **({"data_dir": args.data_dir} if args.data_dir else {}))
    except ValueError as exc:
        raise SystemExit(f"autoresearch work: {exc}") from exc
    options = WorkerOptions(
        server=args.server,
        token=args.token,
        name=args.name,
        gpu=args.gpu,
        cpu=args.cpu,
        state_dir=args.state_dir,
        stop_now=args.stop_now,
        unsafe_no_sandbox=args.unsafe_no_sandbox,
        timings=args.timings,
    )
    # The name in every line tells apart the workers of one host sharing a terminal or journal.
    name = (options.name or default_name(options)).replace("%", "%%")
    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s worker {name} %(levelname)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per request drowns the worker's own
    return run_worker(options, settings)
