"""`autoresearch run`: train and score one train.py locally, as a worker would."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness.config import PRESETS, load_settings
from harness.data.errors import DataError
from protocol.result import ProgressEvent, RunResult


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "run",
        help="train and score one train.py locally in the sandbox",
        description=(
            "Run one experiment on this machine: train PATH/train.py in the bubblewrap sandbox for the "
            "preset's time budget, score it with the harness, and print the summary (or the JSON "
            "result). Live progress goes to stderr. Exit status: 0 when the run is ok, 1 when it "
            "is not (crash, timeout, over_budget, invalid), 2 when nothing could be run."
        ),
    )
    parser.add_argument("train_py", type=Path, metavar="PATH/train.py", help="the candidate to run")
    parser.add_argument(
        "--preset", choices=sorted(PRESETS), help="harness preset (default: $PRESET, else cpu)"
    )
    parser.add_argument("--data-dir", type=Path, help="where `autoresearch prepare` put the data")
    parser.add_argument("--device", help="cpu, cuda or cuda:N (default: cuda when a GPU is visible)")
    parser.add_argument("--json", action="store_true", help="print the result record as JSON")
    parser.add_argument(
        "--unsafe-no-sandbox",
        action="store_true",
        help="run train.py without the sandbox (only for code you trust; the result records it)",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from harness.runner import RunRequest, SandboxUnavailableError, run_experiment

    try:
        settings = load_settings(args.preset, data_dir=args.data_dir)
        request = RunRequest(
            args.train_py, settings, device=args.device, sandboxed=not args.unsafe_no_sandbox
        )
        result = run_experiment(request, on_progress=print_progress)
    except (FileNotFoundError, DataError, SandboxUnavailableError, ValueError) as exc:
        print(f"autoresearch run: {exc}", file=sys.stderr)
        return 2
    print(result.model_dump_json(indent=2) if args.json else summary(result))
    return 0 if result.status == "ok" else 1


def print_progress(event: ProgressEvent) -> None:
    parts = [f"[{event.elapsed_s:6.1f}s] {event.phase:<7}"]
    if event.phase == "train":
        parts.append(f"step {event.step:05d}")
        if event.loss is not None:
            parts.append(f"loss {event.loss:.4f}")
        if event.tokens_per_s is not None:
            parts.append(f"{event.tokens_per_s:,.0f} tok/s")
        parts.append(f"{100 * event.fraction:3.0f}% of budget")
    print(" | ".join(parts), file=sys.stderr, flush=True)


def summary(result: RunResult) -> str:
    """The summary block as autoresearch's train.py prints it, plus the harness's own fields.

    Only the harness prints here: the candidate's own output is in the JSON record's log_tail, so
    a `val_bpb:` line it prints cannot be mistaken for this one.
    """
    lines = ["---"]

    def add(key: str, value: object, fmt: str = "") -> None:
        if value is not None:
            lines.append(f"{key + ':':<18}{value:{fmt}}")

    add("val_bpb", result.val_bpb, ".6f")
    add("training_seconds", result.training_seconds, ".1f")
    add("score_seconds", result.score_seconds, ".1f")
    add("score_bound_s", result.score_bound_seconds, ".1f")
    add("total_seconds", result.total_seconds, ".1f")
    add("peak_vram_mb", result.peak_memory_mb, ".1f")
    add("mfu_percent", result.mfu_percent, ".2f")
    add("total_tokens_M", None if result.tokens is None else result.tokens / 1e6, ".1f")
    add("num_steps", result.steps)
    add("num_params_M", None if result.num_params is None else result.num_params / 1e6, ".1f")
    add("status", result.status)
    add("error_class", result.error_class)
    add("device", result.device)
    add("sandbox", "on" if result.sandbox else "OFF (--unsafe-no-sandbox)")
    add("harness_id", result.harness_id[:16])
    if result.error_message:
        lines += ["error:", *("  " + line for line in result.error_message.splitlines()[-20:])]
    return "\n".join(lines)
