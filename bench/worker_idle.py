"""Worker idle time: the part of a busy worker's wall time not spent training or scoring.

    python bench/worker_idle.py [--preset cpu] [--experiments 3] [--time-budget SECONDS]

Runs a real server and one real worker (`autoresearch work --cpu`, sandboxed runner) on the
preset's prepared data (prepared first if needed), with the baseline train.py and variants of
one of its constants as experiments.

1. Pickup: with the worker idle in its long-poll claim, one experiment is submitted; the time
   from sending the submit to the worker's claim is the pickup latency (target: under 1 s).
   Reference, measured in the same run: the round trip of GET /healthz.
2. Full queue: `--experiments` more are queued at once. Each cycle of the worker (one claim to
   the next) is split into training and scoring (as measured by the runner), train-process
   startup (`startup_seconds`: the candidate's import, `build_model` and first step, and what
   the spare sandbox did not do ahead), the rest of the runner (score sandboxes, weights
   hand-over) and the worker's own time (claim, hash check, spool, report). The idle fraction
   is 1 - (training + scoring) / wall time. The fixed costs do not grow with the budget, so the
   fraction at the h100 budget (300 s of training) is fixed / (fixed + 300 s), scoring counted
   as 0 s there (which makes it an upper bound). A bare `import torch` is timed as the scale
   of the machine's speed at the moment.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the process helpers of the worker tests

from bench.reference import import_torch
from harness.config import PRESETS, load_settings
from harness.prepare import prepare
from testkit.processes import Project, WorkerProcess, init_project, serve, wait_until

BASELINE = ROOT / "harness" / "baseline" / "train.py"
CONSTANT = "MATRIX_LR = 0.04"  # the baseline line the experiments vary, as an agent would
H100_BUDGET = float(PRESETS["h100"]["time_budget"])
TARGET_IDLE = 0.03
TARGET_PICKUP_S = 1.0


def variant(baseline: str, k: int) -> str:
    if CONSTANT not in baseline:
        raise SystemExit(f"{BASELINE}: no line {CONSTANT!r} to vary; update CONSTANT in {__file__}")
    return baseline.replace(CONSTANT, f"MATRIX_LR = {0.04 * (1 + 0.05 * k):.4f}")


def timing_lines(path: Path) -> list[dict[str, Any]]:
    """The worker's timing lines (--timings), one per run, in the order the runs ended."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line]


def timings(path: Path) -> dict[int, dict[str, Any]]:
    """The latest timing line of each experiment."""
    return {line["experiment_id"]: line for line in timing_lines(path)}


def logged(path: Path, experiment_id: int) -> bool:
    """Whether the worker logged the experiment's timing line."""
    return experiment_id in timings(path)


def healthz_round_trip(url: str, n: int = 20) -> float:
    with httpx.Client() as http:
        samples = []
        for _ in range(n):
            started = time.perf_counter()
            http.get(f"{url}/api/v1/healthz").raise_for_status()
            samples.append(time.perf_counter() - started)
    return statistics.median(samples)


@dataclass(frozen=True)
class Pickup:
    """The experiment submitted to an idle worker, and those queued right behind it."""

    submitted_at: float  # when its submit was sent
    answered_at: float  # when the submit was answered
    pickup_id: int
    queued_ids: list[int]


def submit_when_idle(
    project: Project, worker: WorkerProcess, log: Path, baseline: str, queued: int, timeout: float
) -> Pickup:
    """Let the baseline (experiment 1, queued by init) finish and the worker go idle in its long
    poll; then submit one variant of `baseline` and queue `queued` more behind it."""
    wait_until(lambda: 1 in timings(log), timeout, "the baseline run")
    project.final(1, timeout=timeout)
    worker.wait_for_log("idle: waiting for queued experiments", timeout=timeout)
    time.sleep(1.0)  # well inside the long poll
    with project.agent() as agent:
        submitted_at = time.time()
        pickup_id = agent.submit("pickup", train_py=variant(baseline, 1)).id
        answered_at = time.time()
        ids = [agent.submit(f"queued {k}", train_py=variant(baseline, k)).id for k in range(2, queued + 2)]
    return Pickup(submitted_at, answered_at, pickup_id, ids)


def measure(project: Project, experiments: int, timeout: float) -> None:
    log = project.tmp / "timings.jsonl"
    worker = project.worker("bench", "--timings", str(log))
    pickup = submit_when_idle(project, worker, log, BASELINE.read_text(), experiments, timeout)
    pickup_id, ids, sent = pickup.pickup_id, pickup.queued_ids, pickup.submitted_at
    claimed = wait_until(lambda: timings(log).get(pickup_id), timeout, "the pickup experiment")["claimed_at"]
    reference = healthz_round_trip(project.url)
    for experiment_id in ids:
        wait_until(functools.partial(logged, log, experiment_id), timeout * 2, f"experiment {experiment_id}")
        project.final(experiment_id, timeout=timeout)

    rows = timings(log)
    order = [pickup_id, *ids]
    print(
        f"\npickup latency: {1000 * (claimed - sent):.0f} ms from sending the submit to the "
        f"worker's claim (the submit itself answered after {1000 * (pickup.answered_at - sent):.0f} ms); "
        f"reference GET /healthz round trip {1000 * reference:.1f} ms; target < {TARGET_PICKUP_S:.0f} s"
    )
    print("\n  exp  cycle s  train s  score s  startup s  runner other s  worker s  status")
    cycles = []
    for this, following in itertools.pairwise(order):
        row = rows[this]
        cycle = Cycle(
            wall=rows[following]["claimed_at"] - row["claimed_at"],
            train=row["training_seconds"] or 0.0,
            score=row["score_seconds"] or 0.0,
            startup=row["startup_seconds"] or 0.0,
            run=row["spooled_at"] - row["run_started_at"],
        )
        print(
            f"  {this:>3} {cycle.wall:8.2f} {cycle.train:8.2f} {cycle.score:8.2f} {cycle.startup:10.2f} "
            f"{cycle.runner_other:15.2f} {cycle.worker:9.3f}  {row['status']}"
        )
        if row["score_seconds"] is not None:  # trained and scored (a timeout waits for its deadline)
            cycles.append(cycle)
    if not cycles:
        raise SystemExit("no run was scored: no figures (see the server's experiment logs)")
    wall = sum(c.wall for c in cycles)
    idle = 1 - sum(c.train + c.score for c in cycles) / wall
    worker_s = statistics.mean(c.worker for c in cycles)
    runner_other = statistics.mean(c.runner_other for c in cycles)
    startup = statistics.mean(c.startup for c in cycles)
    print(f"\nover the {len(cycles)} scored run(s), {wall:.0f} s of worker wall time:")
    print(f"  idle fraction at this budget: {100 * idle:.1f}%")
    print(
        f"  fixed cost per experiment: worker {worker_s:.3f} s (claim, hash check, spool, report) + runner "
        f"{runner_other:.2f} s (sandboxes, hand-over) + train-process startup {startup:.2f} s"
    )
    print(f"  reference: python -c 'import torch' takes {import_torch().seconds:.2f} s on this machine now")
    print(f"  idle fraction at the h100 budget ({H100_BUDGET:.0f} s) from these fixed costs:")
    for name, cost in (
        ("worker", worker_s),
        ("worker + runner", worker_s + runner_other),
        ("worker + runner + train-process startup", worker_s + runner_other + startup),
    ):
        fraction = cost / (cost + H100_BUDGET)
        verdict = "met" if fraction < TARGET_IDLE else "NOT met"
        print(f"    {name:<42} {100 * fraction:5.2f}%  (target < {100 * TARGET_IDLE:.0f}%: {verdict})")


@dataclass(frozen=True)
class Cycle:
    """One full-queue cycle of the worker, from its claim of an experiment to its next claim."""

    wall: float
    train: float
    score: float
    startup: float  # train process start and model build, not counted as training
    run: float  # inside run_experiment

    @property
    def runner_other(self) -> float:
        return self.run - self.train - self.score - self.startup

    @property
    def worker(self) -> float:
        return self.wall - self.run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="cpu")
    parser.add_argument("--experiments", type=int, default=3, help="experiments queued at once (>= 1)")
    parser.add_argument("--time-budget", type=float, help="training seconds (default: the preset's)")
    args = parser.parse_args()
    overrides: dict[str, Any] = {"time_budget": args.time_budget} if args.time_budget else {}
    settings = load_settings(args.preset, **overrides)
    # The server and worker processes run in the repo root; the data stays where asked for.
    settings = settings.model_copy(update={"data_dir": settings.data_dir.resolve()})
    print(f"preparing data for preset {settings.preset} in {settings.data_dir} (once)...", flush=True)
    prepare(settings, progress=False)
    print(f"time budget {settings.time_budget:.0f} s, {args.experiments} experiments queued at once")
    timeout = 10 * (settings.time_budget + settings.compile_allowance) + 120
    with tempfile.TemporaryDirectory(prefix="worker-idle-") as tmp:
        project = serve(init_project(Path(tmp), settings, BASELINE.read_text()), settings, 60.0)
        try:
            measure(project, max(1, args.experiments), timeout)
        finally:
            project.close()


if __name__ == "__main__":
    main()
