"""`bench/gpu_check.sh --cpu`: the GPU check's steps, run end to end on this machine's CPU.

What the GPU machine will run, minus CUDA: the kit's wheels installed for CPython 3.12 (into a
scratch folder), the kit's bubblewrap and git unpacked and run with their own libraries, the
kit's data, the sandboxed baseline, the logits hand-over (the IPC consumer started and fed in and
out of the sandbox), the loader timer, and a real server and worker. Also how a step stopped at
its time limit keeps its figures and leaves no process behind.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.gpu_check import driver, loader_timer
from bench.gpu_check.baseline import loader_figures
from bench.gpu_check.layout import REPO, kit_env
from harness.context import TrainContext
from harness.runner.scoring.agreement import TOLERANCE_NATS

pytestmark = pytest.mark.heavy


@pytest.mark.timeout(1500)  # a few minutes on an idle 2-core machine; far more on a busy one
def test_the_cpu_dry_run_passes_every_step(built_kit: dict[str, object], tmp_path: Path) -> None:
    """Slow (over a minute, more in the suite) because it is the whole check: every step is a
    process of its own, and three real sandboxed runs train for TIME_BUDGET (driver.CPU_ENV) and
    are scored at the h100 shapes the kit's data is prepared for. Shorter would stop covering
    what the GPU machine runs."""
    env = {**os.environ, "OUT": str(tmp_path)}
    done = subprocess.run(
        ["bash", "bench/gpu_check.sh", "--cpu"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    steps = report["steps"]
    assert done.returncode == 0, f"{done.stdout[-6000:]}\n{json.dumps(report['summary'], indent=1)}"
    assert {name: s["status"] for name, s in steps.items()} == {
        "0_environment": "ok",
        "1_sandboxed_baseline": "ok",
        "2_server_and_worker": "ok",
        "3_logits_handover": "ok",
        "4_loader_wait": "ok",
    }
    setup = report["setup"]
    assert setup["wheels"]["ok"] and setup["bwrap"]["kit_libraries"] and setup["git"]["kit_libraries"]
    assert steps["0_environment"]["harness_id_matches_kit"]
    baseline = steps["1_sandboxed_baseline"]
    assert baseline["sandbox"] and math.isfinite(baseline["val_bpb"]) and baseline["val_bpb"] > 0
    assert baseline["tokens_per_s"] > 0 and baseline["peak_memory_mb"] > 0
    assert steps["4_loader_wait"]["measured_steps"] >= 1
    assert 0 <= steps["4_loader_wait"]["wait_fraction"] < 1
    handover = steps["3_logits_handover"]
    assert handover["host_shared_memory"]["identical"] and handover["host_per_batch_s"] > 0
    assert handover["ipc_unsandboxed"]["works"] and handover["ipc_sandbox"]["works"]
    assert handover["forward_h100_batch"]["rows"] == 1 and handover["forward_h100_batch_s"] > 0
    # A row scored alone agrees with the same row in a batch, as the one-row first batch needs.
    assert 0 <= handover["forward_h100_batch"]["one_row_max_nats"] < TOLERANCE_NATS["cpu"]
    server = steps["2_server_and_worker"]
    assert server["kit_data_reused"], "the worker's prepare must find the kit's data current"
    assert server["pickup_ms"] > 0 and 0 < server["idle_fraction_at_h100_budget"] < 1
    # The baseline measured as the noise-aware server measures a project: three runs, three seeds,
    # the second and third from the first's compile cache; a cycle each for a first run and a repeat.
    # (More than three where a run on a loaded CPU ended over a time bound: not a valid run.)
    seeds = server["baseline_noise"]["seeds"]
    assert len(server["baseline_runs"]) >= 3 and len(set(seeds)) == len(seeds) and None not in seeds
    again = server["startup_seconds_again"]
    assert len(again) == 2 and all(seconds is not None and seconds >= 0 for seconds in again)
    for cycle in (server["cycle_first_run"], server["cycle_repeat"]):
        assert cycle["wall"] > cycle["training"] > 0 and cycle["at_h100_budget_s"] > 300
    assert server["worker_exit_code"] == 0
    log = (tmp_path / "gpu_check.log").read_text()
    assert "== summary" in log and "GPU_CHECK_LOADER" in log


def processes_with(marker: str) -> list[str]:
    """Command lines of live processes whose environment holds `marker` (this one left out)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if marker.encode() in (entry / "environ").read_bytes():
                    found.append((entry / "cmdline").read_bytes().replace(b"\0", b" ").decode())
            except OSError:
                continue  # it ended meanwhile
    return found


def test_a_step_stopped_at_its_limit_keeps_its_figures_and_leaves_no_process(
    built_kit: dict[str, object], tmp_path: Path
) -> None:
    # The server step writes its prepare figures within seconds, then starts a server and a worker
    # (by 20 s its sandboxes are usually up); every process of it carries the marker.
    marker = f"GPU_CHECK_STOP_TEST={uuid.uuid4()}"
    env = {**os.environ, **kit_env(), **driver.CPU_ENV, "PYTHONUNBUFFERED": "1"}
    env[marker.split("=")[0]] = marker.split("=")[1]
    step = driver.Step("through_server", ("2_server_and_worker",), cap_s=0, min_s=0)
    outcome = driver.run_step(step, "cpu", env, tmp_path, limit=20.0)
    section = outcome["sections"]["2_server_and_worker"]
    assert outcome["run"]["timed_out"] and section["status"] == "timed_out"
    assert "prepare_seconds" in section and section["kit_data_reused"]
    deadline = time.monotonic() + 15  # killed sandboxes leave /proc a moment later
    while (left := processes_with(marker)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert left == [], "processes of the stopped step are still running"


def test_the_loader_timer_measures_the_wait_inside_each_step() -> None:
    def batches(batch_size: int) -> Iterator[int]:
        while True:
            time.sleep(0.02)  # a loader that makes its consumer wait at least 20 ms per batch
            yield batch_size

    logged: list[int] = []
    ctx = TrainContext(
        device=None,  # type: ignore[arg-type]
        vocab_size=8,
        seq_len=4,
        time_budget=1.0,
        seed=0,
        bos_id=0,
        peak_flops=None,
        _batches=batches,
        _time_left=lambda: 1.0,
        _log=lambda step, loss, **extra: logged.append(step),
    )

    def train(model: object, ctx: TrainContext) -> None:
        loader = ctx.loader(2)
        for step in range(5):
            next(loader), next(loader)  # two micro-batches per step
            ctx.log(step=step, loss=1.0)

    timed = loader_timer.GpuCheckTimedContext(ctx)
    train(None, timed)  # type: ignore[arg-type]
    summary = timed.summary()
    assert logged == [0, 1, 2, 3, 4]
    assert summary["steps"] == 5 and summary["measured_steps"] == 5 - loader_timer.GPU_CHECK_WARMUP_STEPS
    assert summary["micro_batches_per_step"] == 2
    assert summary["wait_ms_median"] >= 40 and summary["wait_fraction"] > 0.5
    line = f"noise\n{loader_timer.GPU_CHECK_LOADER_TAG} {json.dumps(summary)}\nmore noise"
    assert loader_figures(line) == summary and loader_figures("no such line") is None


def test_the_driver_runs_with_the_standard_library_alone() -> None:
    # On the GPU machine the driver starts before the kit's wheels are installed.
    blocked = ("pydantic", "filelock", "packaging", "fastapi", "harness")
    code = f"import sys; sys.modules.update(dict.fromkeys({blocked!r})); import bench.gpu_check.driver"
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


def test_the_environment_step_names_a_module_whose_wheel_is_missing() -> None:
    """As on the first GPU machine, where the kit lacked cryptography and the server did not start:
    the environment step (before any GPU step) names the modules that fail and why."""
    code = (
        "import json, sys; sys.modules['cryptography'] = None; "
        "from bench.gpu_check.probe import import_errors; print(json.dumps(import_errors()))"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    errors = json.loads(done.stdout.splitlines()[-1])
    assert "server.main" in errors and "cryptography" in errors["server.main"], errors
    assert all("cryptography" in why for why in errors.values()), errors  # nothing else fails
