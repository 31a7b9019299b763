"""Per-experiment wall time the runner spends outside training and scoring.

    python bench/runner_overhead.py [--preset cpu] [--runs 3] [--budget SECONDS] [--train-py PATH]
                                    [--base CHECKOUT --rounds 2]

Runs the candidate (default: the baseline train.py) through harness.runner.run_experiment, in
the real sandbox, `--runs` times in one process as a worker does (torch imported first;
`keep_warm=True`, so from the second run on the train sandbox was started ahead of time; a worker
also calls warm_up() before its first claim, so every run of a worker is warm, and only a one-off
`autoresearch run` pays the cold start of run 1), and
splits each run's total wall time into training (`training_seconds`), scoring (`score_seconds`:
forward passes and loss, eval and probe) and overhead: everything else (process and sandbox
starts, imports, build_model, weight save and load, the scorer, teardown). The reference measured
in the same run is one bare `python -c "import torch"`, the unavoidable floor of any process that
uses torch. Target: overhead <= 5 s, i.e. < 2 % of the h100 preset's 300 s budget.

`--base CHECKOUT` compares against another checkout (say `git worktree add --detach /tmp/base
main` with its own `.venv`: the sandbox finds the harness package through the virtualenv it runs
in): each round runs this script of the base and of this checkout as child processes, each with
its own code and virtualenv and its own prepared data (DATA_DIR under its folder), in
alternating order so that the machine's load falls on both alike, and prints the overhead and the
baseline's val_bpb of each side. The data settings (DATA_SOURCE, LOCAL_DATA_DIR, ...) come from
the environment, the same for both.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch  # noqa: F401  (a worker process has it loaded before its first experiment)

from harness.config import load_settings
from harness.prepare import prepare
from harness.runner import run_experiment

BASELINE = Path(__file__).resolve().parents[1] / "harness" / "baseline" / "train.py"
TARGET_S = 5.0
H100_BUDGET_S = 300.0


def torch_import_seconds() -> float:
    started = time.monotonic()
    subprocess.run([sys.executable, "-c", "import torch"], check=True)
    return time.monotonic() - started


RUN_LINE = re.compile(
    r"^run (\d+): .* overhead (\S+) \(train startup (\S+), .*; val_bpb (\S+),", re.MULTILINE
)


def side_runs(checkout: Path, args: argparse.Namespace) -> list[tuple[int, float, float, float]]:
    """(run, overhead, train startup, val_bpb) of each run of `checkout`'s own bench, in a child."""
    python = checkout / ".venv" / "bin" / "python"  # the sandbox imports the harness through it
    if not python.exists():
        raise SystemExit(f"{checkout}: no .venv; the checkout needs its own virtualenv")
    command = [str(python), str(checkout / "bench" / "runner_overhead.py"), "--preset", args.preset]
    command += ["--runs", str(args.runs)] + (["--budget", str(args.budget)] if args.budget else [])
    command += ["--train-py", str(args.train_py)] if args.train_py else []  # else its own baseline
    env = {**os.environ, "PYTHONPATH": str(checkout), "DATA_DIR": str(checkout / "var" / "bench-overhead")}
    done = subprocess.run(command, cwd=checkout, env=env, capture_output=True, text=True)
    print(done.stdout, end="", flush=True)
    if done.returncode:
        raise SystemExit(f"{checkout}: exit {done.returncode}\n{done.stderr[-4000:]}")
    return [(int(run), float(o), float(s), float(b)) for run, o, s, b in RUN_LINE.findall(done.stdout)]


def compare(base: Path, args: argparse.Namespace) -> None:
    """Both checkouts' benches, round by round, and a summary of each side."""
    here = Path(__file__).resolve().parents[1]
    sides = {"before": base.resolve(), "after": here}
    runs: dict[str, list[tuple[int, float, float, float]]] = {name: [] for name in sides}
    for round_ in range(args.rounds):
        for name in sorted(sides, reverse=round_ % 2 == 1):
            print(f"=== round {round_ + 1}, {name}: {sides[name]}", flush=True)
            runs[name] += side_runs(sides[name], args)
    reference = torch_import_seconds()
    print(f"reference: python -c 'import torch' takes {reference:.2f} s")
    medians = {}
    for name, rows in runs.items():
        warm = [overhead for run, overhead, _, _ in rows if run > 1]
        bpb = [row[3] for row in rows]
        medians[name] = statistics.median(warm)
        print(
            f"{name}: warm overhead median {medians[name]:.2f} s (max {max(warm):.2f}, {len(warm)} runs), "
            f"cold {statistics.median(row[1] for row in rows if row[0] == 1):.2f} s; train startup median "
            f"{statistics.median(row[2] for row in rows):.2f} s (max {max(row[2] for row in rows):.2f}); "
            f"val_bpb mean {statistics.mean(bpb):.4f} sd {statistics.stdev(bpb):.4f} over {len(bpb)} runs"
        )
    print(f"after / before, warm overhead median: {medians['after'] / medians['before']:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="cpu")
    parser.add_argument("--runs", type=int, default=3, help="the first is a cold start")
    parser.add_argument("--budget", type=float, help="training seconds (default: the preset's)")
    parser.add_argument("--train-py", type=Path, help="default: the checkout's baseline train.py")
    parser.add_argument("--base", type=Path, help="another checkout to compare against (before)")
    parser.add_argument("--rounds", type=int, default=2, help="with --base: rounds of both sides")
    args = parser.parse_args()
    if args.base:
        compare(args.base, args)
        return
    args.train_py = args.train_py or BASELINE
    overrides = {"time_budget": args.budget} if args.budget else {}
    settings = load_settings(args.preset, **overrides)
    prepare(settings, progress=False)
    reference = torch_import_seconds()
    print(
        f"preset {args.preset}: budget {settings.time_budget:g} s, {settings.eval_tokens:,} eval tokens, "
        f"seq_len {settings.seq_len}, vocab {settings.vocab_size}; candidate {args.train_py}"
    )
    print(f"reference: python -c 'import torch' takes {reference:.2f} s")
    overheads = []
    for run in range(1, args.runs + 1):
        result = run_experiment(args.train_py, settings, keep_warm=run < args.runs)
        if result.status not in ("ok", "over_budget"):
            raise SystemExit(f"run {run}: {result.status} {result.error_class}: {result.error_message}")
        total, trained, scored = result.total_seconds, result.training_seconds, result.score_seconds
        overhead = total - trained - scored
        overheads.append(overhead)
        print(
            f"run {run}: total {total:.2f} s = training {trained:.2f} + scoring {scored:.2f} + overhead "
            f"{overhead:.2f} (train startup {result.startup_seconds:.2f}, rest "
            f"{overhead - result.startup_seconds:.2f}); val_bpb {result.val_bpb:.4f}, {result.status}"
        )
    median = statistics.median(overheads[1:] or overheads)
    print(f"cold start (run 1, a one-off `autoresearch run`): overhead {overheads[0]:.2f} s")
    print(
        f"overhead median of warm runs (every run of a worker) {median:.2f} s = "
        f"{median / reference:.1f}x a bare torch import; "
        f"{100 * median / H100_BUDGET_S:.2f} % of a {H100_BUDGET_S:.0f} s budget; "
        f"target <= {TARGET_S:.0f} s: {'met' if median <= TARGET_S else 'NOT met'}"
    )


if __name__ == "__main__":
    main()
