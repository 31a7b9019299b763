"""Step 2 of the GPU check: the baseline through a real server and GPU worker on 127.0.0.1, SQLite.

The same processes as production, started through their CLI (`autoresearch init`, `token`,
`serve`, `work --gpu 0 --stop-now`, as bench/worker_idle.py does on a CPU), on the kit's data:

1. `prepare` first, timed, with the data's hashes and files compared before and after: the
   worker prepares at its start too, and on the GPU machine it must find the kit's data current;
2. experiment 1, the baseline queued by `init`, runs to its decision (its figures are recorded);
3. pickup: with the worker idle in its long poll, experiment 2 is submitted; the time from sending
   the submit to the worker's claim is the pickup latency. Experiment 3 is queued right behind it;
4. the cycle of experiment 2, from its claim to the claim of experiment 3 (the server's
   `started_at` of each), is split as bench/worker_idle.py splits it: training, scoring, startup
   (credited to the allowance, torch.compile included), the rest of the runner and the worker's
   own time. The idle fraction at the h100 budget is the fixed part over fixed + 300 s;
5. the worker gets SIGTERM, which with --stop-now cancels experiment 3 (its claim was the
   measurement) and gives it back.

Runs are SERVER_BUDGET_S long on the GPU: the fixed costs, not the training, are measured here.
On a CPU (the dry run), CPU_SERVER_BUDGET_S.
"""

from __future__ import annotations

import signal
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.gpu_check.baseline import candidate_source
from bench.gpu_check.results import Results, run_step
from bench.worker_idle import H100_BUDGET, TARGET_IDLE, TARGET_PICKUP_S, Cycle, submit_when_idle, timings
from harness.config import HarnessSettings, load_settings
from harness.data_layout import prepared_paths, read_manifest
from harness.prepare import prepare
from testkit.processes import Project, WorkerProcess, init_project, serve, wait_until

SECTION = "2_server_and_worker"
SERVER_BUDGET_S = 20.0
CPU_SERVER_BUDGET_S = 2.0  # the CPU dry run: the steps work end to end, its figures mean nothing
WAIT_S = 600.0  # waits inside the step; the driver's time limit is the real bound


def data_state(settings: HarnessSettings) -> dict[str, Any]:
    """What `prepare` would change if it redid the data: hashes and modification times."""
    paths = prepared_paths(settings)
    manifest = read_manifest(settings)
    files = [paths.tokenizer_dir, paths.train_dir, paths.val_dir, paths.raw_dir]
    return {
        "val_sha256": manifest["val_sha256"],
        "tokenizer_sha256": manifest["tokenizer_sha256"],
        "mtimes": {str(p.relative_to(paths.root)): p.stat().st_mtime_ns for d in files for p in d.rglob("*")},
    }


def timed_prepare(settings: HarnessSettings) -> dict[str, Any]:
    before = data_state(settings)
    started = time.monotonic()
    prepare(settings, progress=False)
    seconds = time.monotonic() - started
    after = data_state(settings)
    return {"prepare_seconds": round(seconds, 2), "kit_data_reused": before == after}


def started_at(project: Project, experiment_id: int) -> float | None:
    value = project.experiment(experiment_id).started_at
    return value.timestamp() if value else None


def run_figures(row: dict[str, Any]) -> dict[str, Any]:
    keys = ("status", "error_class", "val_bpb", "training_seconds", "startup_seconds", "score_seconds")
    keys += ("total_seconds", "peak_memory_mb", "mfu_percent", "tokens", "steps", "device", "sandbox")
    figures = {key: row.get(key) for key in keys}
    trained = row.get("training_seconds") or 0.0
    figures["tokens_per_s"] = round(row["tokens"] / trained) if row.get("tokens") and trained else None
    return figures


def start_worker(project: Project, mode: str, log: Path) -> WorkerProcess:
    device = ["--gpu", "0"] if mode == "gpu" else ["--cpu"]
    args = [
        "--server", project.url, *device, "--name", "gpu-check", "--preset", project.settings.preset,
        "--data-dir", str(project.settings.data_dir), "--state-dir", str(project.tmp / "worker"),
        "--stop-now", "--timings", str(log),
    ]  # fmt: skip
    env = {**project.server.env, "AUTORESEARCH_WORKER_TOKEN": project.worker_token}
    worker = WorkerProcess("gpu-check", args, env, project.tmp / "worker.log")
    project.workers.append(worker)
    return worker.start()


def measure(results: Results, project: Project, worker: WorkerProcess, log: Path, baseline: str) -> None:
    pickup = submit_when_idle(project, worker, log, baseline, queued=1, timeout=WAIT_S)
    decision = project.experiment(1).status
    results.update(SECTION, experiment_1={**run_figures(timings(log)[1]), "decision": decision})
    pickup_id, (queued_id,), submitted = pickup.pickup_id, pickup.queued_ids, pickup.submitted_at
    claimed = wait_until(lambda: timings(log).get(pickup_id), WAIT_S, "the pickup experiment")
    results.update(
        SECTION,
        pickup_ms=round(1e3 * (claimed["claimed_at"] - submitted), 1),
        submit_answer_ms=round(1e3 * (pickup.answered_at - submitted), 1),
        pickup_target_ms=1e3 * TARGET_PICKUP_S,
        experiment_2=run_figures(claimed),
    )
    next_claim = wait_until(lambda: started_at(project, queued_id), WAIT_S, "the claim of experiment 3")
    cycle = Cycle(
        wall=next_claim - (started_at(project, pickup_id) or claimed["claimed_at"]),
        train=claimed["training_seconds"] or 0.0,
        score=claimed["score_seconds"] or 0.0,
        startup=claimed["startup_seconds"] or 0.0,
        run=claimed["spooled_at"] - claimed["run_started_at"],
    )
    fixed = cycle.worker + cycle.runner_other + cycle.startup
    results.update(
        SECTION,
        cycle_seconds={
            "wall": round(cycle.wall, 2),
            "training": round(cycle.train, 2),
            "scoring": round(cycle.score, 2),
            "startup": round(cycle.startup, 2),
            "runner_other": round(cycle.runner_other, 2),
            "worker": round(cycle.worker, 3),
        },
        idle_fraction_at_this_budget=round(1 - (cycle.train + cycle.score) / cycle.wall, 4),
        idle_fraction_at_h100_budget=round(fixed / (fixed + H100_BUDGET), 4),
        idle_fraction_at_h100_budget_without_startup=round(
            (fixed - cycle.startup) / (fixed - cycle.startup + H100_BUDGET), 4
        ),
        idle_target=TARGET_IDLE,
    )
    worker.signal(signal.SIGTERM)  # --stop-now: experiment 3 is cancelled and given back
    results.update(SECTION, worker_exit_code=worker.wait(timeout=120))


def body(results: Results, mode: str) -> None:
    settings = load_settings(time_budget=SERVER_BUDGET_S if mode == "gpu" else CPU_SERVER_BUDGET_S)
    results.update(
        SECTION,
        preset=settings.preset,
        time_budget=settings.time_budget,
        **timed_prepare(settings),
        headline=("pickup_ms", "idle_fraction_at_h100_budget", "kit_data_reused", "prepare_seconds"),
    )
    # The baseline as `init` queues it (on a CPU, sized as in step 1's dry run).
    baseline = candidate_source("cuda" if mode == "gpu" else "cpu", settings.seq_len, timed=False)
    with tempfile.TemporaryDirectory(prefix="gpu-check-server-") as tmp:
        project = serve(init_project(Path(tmp), settings, baseline), settings, 60.0)
        log = project.tmp / "timings.jsonl"
        try:
            worker = start_worker(project, mode, log)
            measure(results, project, worker, log, baseline)
        finally:
            for worker in project.workers:
                print(f"--- worker log (last 6000 characters):\n{worker.log()[-6000:]}", flush=True)
            project.close()
    first = results.sections[SECTION]["experiment_1"]
    # As in step 1 (baseline.py): on a CPU the dry run checks the path, not the CPU's speed, and a
    # 2 s run on a loaded 2-core machine can end over one of the time bounds (the score phase's
    # once, in a suite run beside the worker tests). On the GPU only `ok` passes.
    speed = first["status"] == "over_budget" or first["error_class"] == "score_over_budget"
    completed = first["status"] == "ok" or (mode != "gpu" and speed)
    problems = [] if completed else [f"experiment 1 ended {first['status']} ({first['error_class']})"]
    if not results.sections[SECTION]["kit_data_reused"]:
        problems.append("prepare changed the kit's data")
    results.update(SECTION, status="failed" if problems else "ok", error="; ".join(problems) or None)


if __name__ == "__main__":
    run_step((SECTION,), body)
