"""Per-experiment wall time the runner spends outside training and scoring.

    python bench/runner_overhead.py [--preset cpu] [--runs 3] [--budget SECONDS] [--train-py PATH]
                                    [--phases] [--before CHECKOUT]

Runs the candidate (default: the baseline train.py) through harness.runner.run_experiment, in
the real sandbox, `--runs` times in one process as a worker does (torch imported first;
`keep_warm=True`, so from the second run on the train sandbox was started ahead of time; a worker
starts one in its preflight (warm_up) before its first claim, so every run of a worker is warm,
and only a one-off `autoresearch run` pays the cold start of run 1), and
splits each run's total wall time into training (`training_seconds`), scoring (`score_seconds`:
the time the model ran in the score sandboxes, rebuild and weight load included, eval and probe)
and overhead: everything else (process and sandbox starts, imports, weight save and hand-over,
the scorer's own loss computation and checks, teardown). It also prints everything but training
(`total - training`), which compares across versions that split scoring and overhead differently.
The reference measured in the same run is one bare `python -c "import torch"`, the unavoidable
floor of any process that uses torch. Target: overhead <= 5 s, i.e. < 2 % of the h100 preset's 300 s budget.

`--phases` also prints where the time goes, step by step (harness.runner.phases), as the median
over the warm runs of each step's wall seconds, the CPU seconds of the process that did it (the
runner, or the scorer for `score/...`) and those of the model sandbox it waited on. Steps under
`score/` happen inside `score: go to verdict`. A harness without phases (a --before checkout
older than them) prints none.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any, TypedDict

import torch  # noqa: F401  (a worker process has it loaded before its first experiment)

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench.reference, beside this file

import harness
from bench.reference import import_torch
from harness.config import load_settings
from harness.prepare import prepare
from harness.runner import RunRequest, run_experiment

try:
    from harness.runner.phases import Phases
except ImportError:  # a --before checkout older than the phases (run_experiment has no `phases`)
    Phases = None  # type: ignore[assignment,misc]

BASELINE = Path(__file__).resolve().parents[1] / "harness" / "baseline" / "train.py"
TARGET_S = 5.0
H100_BUDGET_S = 300.0
REPORT = "report: "  # the last line of a --report-json run, read by --before


class Report(TypedDict):
    """What one interpreter's runs measured (printed as JSON for the comparing parent)."""

    import_torch: float
    overhead: list[float]
    all_but_training: list[float]
    val_bpb: list[float]


def measure(args: argparse.Namespace) -> Report:
    """Run the candidate `args.runs` times with the harness this interpreter imports; print each run."""
    overrides = {"time_budget": args.budget} if args.budget else {}
    settings = load_settings(args.preset, **overrides)
    prepare(settings, progress=False)
    reference = import_torch().seconds
    print(
        f"preset {args.preset}: budget {settings.time_budget:g} s, {settings.eval_tokens:,} eval tokens, "
        f"seq_len {settings.seq_len}, vocab {settings.vocab_size}; candidate {args.train_py}; "
        f"harness {Path(harness.__file__).parent}"
    )
    print(f"reference: python -c 'import torch' takes {reference:.2f} s")
    overheads, rest, val_bpb = [], [], []
    recorded: list[list[dict[str, Any]]] = []
    with_phases = args.phases and Phases is not None
    for run in range(1, args.runs + 1):
        extra = {"phases": Phases()} if with_phases else {}
        result = run_experiment(RunRequest(args.train_py, settings, keep_warm=run < args.runs), **extra)
        if with_phases:
            recorded.append(extra["phases"].as_json())
        if result.status not in ("ok", "over_budget"):
            raise SystemExit(f"run {run}: {result.status} {result.error_class}: {result.error_message}")
        total, trained, scored = result.total_seconds, result.training_seconds, result.score_seconds
        overhead = total - trained - scored
        overheads.append(overhead)
        rest.append(total - trained)
        val_bpb.append(result.val_bpb)
        print(
            f"run {run}: total {total:.2f} s = training {trained:.2f} + scoring {scored:.2f} + overhead "
            f"{overhead:.2f} (train startup {result.startup_seconds:.2f}, rest "
            f"{overhead - result.startup_seconds:.2f}); all but training {total - trained:.2f}; "
            f"scoring bound {getattr(result, 'score_bound_seconds', None) or float('nan'):.2f}; "
            f"val_bpb {result.val_bpb:.4f}, {result.status}",
            flush=True,
        )
    median = statistics.median(overheads[1:] or overheads)
    print(f"cold start (run 1, a one-off `autoresearch run`): overhead {overheads[0]:.2f} s")
    print(
        f"overhead median of warm runs (every run of a worker) {median:.2f} s = "
        f"{median / reference:.1f}x a bare torch import; "
        f"{100 * median / H100_BUDGET_S:.2f} % of a {H100_BUDGET_S:.0f} s budget; "
        f"target <= {TARGET_S:.0f} s: {'met' if median <= TARGET_S else 'NOT met'}"
    )
    if recorded:
        print_phases(recorded[1:] or recorded)
    return {"import_torch": reference, "overhead": overheads, "all_but_training": rest, "val_bpb": val_bpb}


def print_phases(runs: list[list[dict[str, Any]]]) -> None:
    """Median over `runs` of each phase's wall, own CPU and sandbox CPU seconds."""
    print(f"phases, median of {len(runs)} run(s): wall s / CPU s (runner or scorer) / model sandbox CPU s")
    names = list(dict.fromkeys(phase["name"] for run in runs for phase in run))
    for name in names:
        cells = []
        for key in ("wall", "cpu", "sandbox_cpu"):
            values = [next((p[key] for p in run if p["name"] == name), 0.0) for run in runs]
            cells.append(f"{statistics.median(values):8.2f}")
        print(f"  {name:56} {' '.join(cells)}")


def measure_in_child(python: Path, args: argparse.Namespace, label: str) -> Report:
    """This script under another interpreter (so another checkout's harness); its lines prefixed."""
    argv = [
        str(python),
        __file__,
        "--preset",
        args.preset,
        "--runs",
        str(args.runs),
        "--train-py",
        str(args.train_py),
    ]
    argv += ["--budget", str(args.budget)] if args.budget else []
    argv += ["--phases"] if args.phases else []
    with subprocess.Popen([*argv, "--report-json"], stdout=subprocess.PIPE, text=True) as child:
        assert child.stdout is not None
        report: Report | None = None
        for line in child.stdout:
            if line.startswith(REPORT):
                report = json.loads(line.removeprefix(REPORT))
            else:
                print(f"[{label}] {line}", end="", flush=True)
    if child.returncode != 0 or report is None:
        raise SystemExit(f"{label}: {python} {__file__} failed ({child.returncode})")
    return report


def spread(values: list[float]) -> str:
    return f"{statistics.mean(values):.4f} +- {statistics.stdev(values) if len(values) > 1 else 0.0:.4f}"


def compare(args: argparse.Namespace) -> None:
    """Before (the checkout args.before, with its own .venv) then after (this checkout), one run."""
    python = args.before / ".venv" / "bin" / "python"
    if not python.is_file():
        raise SystemExit(f"{python} not found: --before needs a checkout with its own .venv (see --help)")
    reports = {
        label: measure_in_child(exe, args, label)
        for label, exe in (("before", python), ("after", Path(sys.executable)))
    }
    before, after = reports["before"], reports["after"]
    print(f"{'':32} {'before':>24} {'after':>24}")
    print(f"{'import torch (s)':32} {before['import_torch']:>24.2f} {after['import_torch']:>24.2f}")
    for text, per_run in (
        ("all but training, per run (s)", (before["all_but_training"], after["all_but_training"])),
        ("overhead, per run (s)", (before["overhead"], after["overhead"])),
    ):
        cells = [" / ".join(f"{value:.1f}" for value in values) for values in per_run]
        print(f"{text:32} {cells[0]:>24} {cells[1]:>24}")
    print(f"{'val_bpb, mean +- sd':32} {spread(before['val_bpb']):>24} {spread(after['val_bpb']):>24}")
    if len(before["val_bpb"]) > 1 and len(after["val_bpb"]) > 1:
        shift = statistics.mean(after["val_bpb"]) - statistics.mean(before["val_bpb"])
        error = math.sqrt(sum(statistics.variance(r["val_bpb"]) / len(r["val_bpb"]) for r in (before, after)))
        print(f"val_bpb after - before: {shift:+.4f} +- {error:.4f} (1 standard error)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="cpu")
    parser.add_argument("--runs", type=int, default=3, help="the first is a cold start")
    parser.add_argument("--budget", type=float, help="training seconds (default: the preset's)")
    parser.add_argument("--train-py", type=Path, default=BASELINE)
    parser.add_argument(
        "--before",
        type=Path,
        help="a checkout of the code to compare against, with its own .venv (editable install of that "
        "checkout); measured first, then this checkout, in this one run on the same data",
    )
    parser.add_argument("--phases", action="store_true", help="print where the time goes, step by step")
    parser.add_argument("--report-json", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.before:
        compare(args)
        return
    report = measure(args)
    if args.report_json:
        print(REPORT + json.dumps(report))


if __name__ == "__main__":
    main()
