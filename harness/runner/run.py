"""run_experiment: one candidate train.py, trained and scored in sandboxes, to one RunResult."""

from __future__ import annotations

import json
import os
import shutil
import stat
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.config import HarnessSettings
from harness.data.errors import DataError
from harness.data.rows import open_training_tokens
from harness.data_layout import prepared_paths, read_manifest
from harness.runner import timing
from harness.runner.classify import Ending, over_budget, train_failure
from harness.runner.compile_cache import CacheUse, CompileCaches
from harness.runner.compile_cache import cache_key as compile_cache_key
from harness.runner.conditions import host_conditions
from harness.runner.devices import device_name, flops_per_token, mfu_percent, peak_flops, resolve_device
from harness.runner.limits import Cgroup, Limits, default_limits, tree_memory_bytes
from harness.runner.output import ProgressPacer
from harness.runner.phases import Phases
from harness.runner.run_setup import discard, keep_spare, prepare_run, take_spare
from harness.runner.sandbox import SandboxUnavailableError, check_bwrap, system_roots
from harness.runner.score_phase import ScoreJob, ScorerProcess
from harness.runner.train_phase import CANDIDATE_FILE, WEIGHTS_FILE, TrainJob, TrainOutcome, run_train_phase
from protocol.result import ProgressEvent, RunConditions, RunResult

LOG_TAIL_CHARS = 24_000
EVAL_FILES = ("inputs.npy", "targets.npy", "target_bytes.npy")


@dataclass(frozen=True)
class RunRequest:
    """One run to make: the candidate, the preset, and how and where it runs."""

    train_py: Path  # the candidate; copied by the harness before anything runs
    settings: HarnessSettings  # the preset (time budget, seq_len, vocab, memory limit, ...)
    # The run's ctx.seed (None: settings.seed); a worker passes the seed the server drew for the run.
    seed: int | None = None
    device: str | None = None  # "cpu", "cuda", "cuda:N"; None: cuda when torch sees a GPU
    # False only with --unsafe-no-sandbox: development only, recorded in the result.
    sandboxed: bool = True
    work_root: Path | None = None  # where the run's temporary folder goes (None: $TMPDIR)
    # Start the next run's train sandbox ahead of time (a worker running runs back to back).
    keep_warm: bool = False
    compile_cache: Path | None = None  # a worker's folder of compile caches (compile_cache)


def run_experiment(
    request: RunRequest,
    on_progress: Callable[[ProgressEvent], None] | None = None,
    cancel: threading.Event | None = None,
    phases: Phases | None = None,
) -> RunResult:
    """Train and score the request's train.py; every number in the result is measured here.

    Raises (nothing run, nothing to record against the candidate): FileNotFoundError for a
    missing train.py, harness.data.errors.DataError when the data is not prepared,
    SandboxUnavailableError without a working bubblewrap (unless the request is unsandboxed),
    ScorerError when the trusted scorer itself fails. `on_progress` gets a ProgressEvent at most
    once a second; `cancel`, when set, stops the run at once (status crash, error class
    cancelled); `phases`, when given, gets the wall and CPU seconds of each step
    (harness.runner.phases). With `keep_warm` the next run's train sandbox starts once this one
    has trained (harness.runner.run_setup; end it with close_warm_sandbox()); with a
    `compile_cache`, a run of a train.py that ran ok before starts with what its compile wrote
    then. Safe to call repeatedly; apart from that spare it leaves no process, file or cgroup.
    """
    started, began_cpu = time.monotonic(), time.process_time()
    phases = phases or Phases()
    cancel = cancel or threading.Event()
    settings, sandboxed, work_root = request.settings, request.sandboxed, request.work_root
    seed = settings.seed if request.seed is None else request.seed
    train_py = Path(request.train_py)
    if not train_py.is_file():
        raise FileNotFoundError(f"{train_py}: no such file; give the path of a train.py")
    if sandboxed:
        check_bwrap()
    manifest = read_manifest(settings)
    paths = prepared_paths(settings)
    check_eval_files(paths.val_dir)
    check_data_hidden(settings)
    open_training_tokens(paths.train_dir, int(manifest["bos_id"]), settings.train_tokens_max)  # fail early
    device = resolve_device(request.device)
    name = device_name(device)
    key, job = train_job(settings, manifest, device, sandboxed, work_root)
    run = take_spare(key) or prepare_run(key, job, work_root, idle=False)
    caches = CompileCaches(request.compile_cache) if request.compile_cache is not None else None
    cache_key = compile_cache_key(train_py.read_bytes(), manifest["harness_id"])
    notes = harness_notes(sandboxed, run.limits, device, settings)
    host = host_conditions(device)
    pacer = ProgressPacer(on_progress)
    try:
        candidate = run.run_dir / "candidate" / CANDIDATE_FILE
        shutil.copyfile(train_py, candidate)
        candidate.chmod(0o444)
        scorer = ScorerProcess(
            ScoreJob(
                candidate=candidate,
                weights_dir=run.run_dir / "weights",
                val_dir=paths.val_dir,
                donor_dir=paths.train_dir,
                device=device,
                vocab_size=settings.vocab_size,
                time_budget=settings.time_budget,
                seed=seed,
                bos_id=job.bos_id,
                batch_rows=settings.eval_batch_rows,
                probe_share=settings.probe_share,
                doc_bpb_floor=settings.doc_bpb_floor,
                sandboxed=sandboxed,
                limits=run.limits,
                timeout=timing.score_timeout(settings.time_budget, settings.compile_allowance),
            )
        )
        try:
            phases.add("prepare", time.monotonic() - started, time.process_time() - began_cpu)
            with phases("train: sandbox ready, compile cache, feeder start"):
                spawned_at = run.sandbox.go(seed, cache_use(caches, cache_key, run.run_dir))
                if spawned_at is None:  # the spare died (e.g. with the thread that started it)
                    discard(run)
                    run = prepare_run(key, job, work_root, idle=False)
                    cache = cache_use(caches, cache_key, run.run_dir)
                    spawned_at = run.sandbox.go(seed, cache) or time.monotonic()
            outcome = run_train_phase(
                run.sandbox, spawned_at, pacer, cancel, started, phases, on_training=scorer.start
            )
            if run.sandbox.feeder.failure is not None:  # the harness's fault, not the candidate's
                raise DataError(f"{paths.train_dir}: {run.sandbox.feeder.failure}")
            if request.keep_warm:
                with phases("keep warm: next train sandbox started"):
                    keep_spare(prepare_run(key, job, work_root, idle=True))
            ending, scored = score_if_trained(
                outcome, settings, run.run_dir, scorer, pacer, cancel, started, phases
            )
        finally:
            with phases("scorer close"):
                scorer.close()
        with phases("parameters counted"):
            num_params = count_params(run.run_dir / "weights" / WEIGHTS_FILE)
        ending = ending or over_budget(outcome, settings)
        if caches is not None and run.sandbox.sealed is not None and ending is None:
            with phases("compile cache kept"):
                caches.keep(run.sandbox.sealed, cache_key, run.sandbox.sealed_after)
    finally:
        with phases("run folder removed"):
            discard(run)
    phases.extend(scored.get("phases", []), "score/")
    return build_result(
        ending,
        outcome,
        scored,
        device=device,
        name=name,
        harness_id=manifest["harness_id"],
        seed=seed,
        sandboxed=sandboxed,
        num_params=num_params,
        notes=notes,
        host=host,
        total=time.monotonic() - started,
    )


def cache_use(caches: CompileCaches | None, key: str, run_dir: Path) -> CacheUse | None:
    """Restore the kept compile cache of `key`, or seal this run's into its folder to keep it."""
    if caches is None:
        return None
    kept = caches.find(key)
    if kept is None:
        return CacheUse(restore=None, seal_into=run_dir / "compile-cache")
    return CacheUse(restore=kept[0], seal_into=None, sealed_after=kept[1])


def warm_up(
    settings: HarnessSettings,
    unsafe_no_sandbox: bool = False,
    work_root: Path | None = None,
    device: str | None = None,
) -> None:
    """Start the train sandbox of the next run now and wait until it is ready: a worker's
    preflight round trip (a real sandbox imported torch and the train entry and, on CUDA, computed
    on the GPU) whose sandbox then serves the worker's first experiment, which so skips the
    interpreter start and `import torch`. Takes the same arguments as the run_experiment calls it
    prepares for; raises like them, and SandboxUnavailableError, with the sandbox's own last words,
    if it exited before it was ready."""
    sandboxed = not unsafe_no_sandbox
    if sandboxed:
        check_bwrap()
    device = resolve_device(device)
    key, job = train_job(settings, read_manifest(settings), device, sandboxed, work_root)
    run = prepare_run(key, job, work_root, idle=False)
    try:
        if not run.sandbox.wait_ready():
            why = run.sandbox.why_not_ready()
            raise SandboxUnavailableError(f"the train sandbox exited before it was ready: {why}")
    except BaseException:
        discard(run)
        raise
    keep_spare(run)


def train_job(
    settings: HarnessSettings, manifest: dict[str, Any], device: str, sandboxed: bool, work_root: Path | None
) -> tuple[str, TrainJob]:
    """The train job of a run, and the key a prepared spare must match to serve it."""
    key = json.dumps([settings.model_dump_json(), device, sandboxed, str(work_root)])
    job = TrainJob(
        candidate_dir=Path(),  # the run's own folders are filled in by prepare_run
        work_dir=Path(),
        train_dir=prepared_paths(settings).train_dir,
        settings=settings,
        bos_id=int(manifest["bos_id"]),
        device=device,
        peak_flops=peak_flops(device_name(device)),
        sandboxed=sandboxed,
        limits=default_limits(settings.memory_limit_gb, ""),
    )
    return key, job


def check_data_hidden(settings: HarnessSettings) -> None:
    """Data inside a folder every sandbox sees whole would be readable by train.py."""
    folders = {"DATA_DIR": settings.data_dir, "LOCAL_DATA_DIR": settings.local_data_dir}
    for setting, folder in folders.items():
        if folder is None:
            continue
        real = folder.resolve()
        for root in system_roots():
            if real.is_relative_to(root.resolve()) or real.is_relative_to(root):
                raise DataError(
                    f"{setting}={folder} lies inside {root}, which every sandbox sees; move the data "
                    "out of the system and Python folders and run `autoresearch prepare` again"
                )


def check_eval_files(val_dir: Path) -> None:
    """The scorer's input must exist before anything runs (it is loaded only in the scorer)."""
    for name in EVAL_FILES:
        if not (val_dir / name).is_file():
            raise DataError(f"{val_dir / name}: missing; run `autoresearch prepare` again")


def score_if_trained(
    outcome: TrainOutcome,
    settings: HarnessSettings,
    run_dir: Path,
    scorer: ScorerProcess,
    pacer: ProgressPacer,
    cancel: threading.Event,
    started: float,
    phases: Phases,
) -> tuple[Ending | None, dict[str, Any]]:
    """How the run ended if the train or score phase failed (None when ok), and the score phase's result."""
    with phases("weights handed over"):
        ending = train_failure(outcome, settings) or hand_over_weights(run_dir)
    if ending is not None:
        return ending, {}
    elapsed = time.monotonic() - started
    pacer.offer(ProgressEvent(step=outcome.step or 0, fraction=1.0, phase="score", elapsed_s=elapsed))
    with phases("score: go to verdict (scorer process)"):
        scored = scorer.score(cancel, pacer, outcome)
    if scored["status"] == "ok":
        return None, scored
    return (scored["status"], scored.get("error_class", ""), scored.get("error_message", "")), scored


def hand_over_weights(run_dir: Path) -> Ending | None:
    """Move the saved weights where the score sandboxes see them, if they are a plain file.

    The train sandbox wrote into work/; a symlink or hard link there could point the trusted side
    at a host file, so only a regular file with one link is accepted.
    """
    source = run_dir / "work" / WEIGHTS_FILE
    try:
        info = source.lstat()
    except FileNotFoundError:
        return "crash", "train_error", f"train finished but left no {WEIGHTS_FILE}"
    if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
        return "invalid", "invalid_output", f"{WEIGHTS_FILE} is not a regular file"
    os.rename(source, run_dir / "weights" / WEIGHTS_FILE)
    return None


def count_params(weights: Path) -> int | None:
    """Parameters in the saved weights, read from the safetensors header (no tensor data)."""
    if not weights.is_file():
        return None
    from safetensors import safe_open

    total = 0
    try:
        with safe_open(str(weights), framework="numpy") as handle:
            for key in handle.keys():  # noqa: SIM118 - safe_open is not a mapping
                shape = handle.get_slice(key).get_shape()
                numel = 1
                for size in shape:
                    numel *= size
                total += numel
    except Exception:  # a malformed file was already judged by the score phase
        return None
    return total


def harness_notes(sandboxed: bool, limits: Limits, device: str, settings: HarnessSettings) -> str:
    """Lines at the top of the log saying how the run was contained, so no gap is silent."""
    probe = Cgroup.create(limits)
    if probe is not None:
        probe.remove()
    cgroup = "no writable cgroup: process count limited only by RLIMIT_NPROC (not enforced for root)"
    if probe is not None and probe.limited:
        cgroup = f"cgroup v1: at most {limits.max_tasks} tasks"
        if limits.memory_bytes:
            cgroup += f", {tree_memory_bytes(limits) / (1 << 30):.2f} GiB memory per sandbox"
    accounting = {"cpuacct": "cgroup v1 cpuacct", "unified": "cgroup v2 cpu.stat"}
    found = [name for key, name in accounting.items() if probe is not None and key in probe.folders]
    unaccounted = "of live processes, from /proc (no accounting cgroup; score sandboxes start no process)"
    cgroup += f"; CPU seconds {f'from {found[0]}' if found else unaccounted}"
    memory = "no memory limit (MEMORY_LIMIT_GB=0)"
    if limits.memory_bytes:
        memory = (
            f"RLIMIT_AS {settings.memory_limit_gb:g} GB per process"
            if device == "cpu"
            else "no RLIMIT_AS on CUDA (it reserves large address ranges); cgroup memory only"
        )
    sandbox = (
        "bubblewrap sandbox" if sandboxed else "NO SANDBOX (--unsafe-no-sandbox): train.py ran unconfined"
    )
    return f"[harness] {sandbox}; {cgroup}; {memory}; device {device}\n"


def rounded(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds, 3)


def build_result(
    ending: Ending | None,
    outcome: TrainOutcome,
    scored: dict[str, Any],
    *,
    device: str,
    name: str,
    harness_id: str,
    seed: int,
    sandboxed: bool,
    num_params: int | None,
    notes: str,
    host: RunConditions,
    total: float,
) -> RunResult:
    status, error_class, message = ending or ("ok", None, None)
    if device.startswith("cuda") and outcome.cuda_peak_bytes:
        peak = outcome.cuda_peak_bytes
    else:
        peak = outcome.peak_rss_bytes
    trained = outcome.training_seconds
    flops = flops_per_token(outcome.flops_per_token, num_params)
    log = notes + outcome.log + scored.get("log", "")
    return RunResult(
        status=status,
        error_class=error_class or None,
        error_message=message or None,
        val_bpb=scored.get("val_bpb"),
        training_seconds=round(trained, 3),
        startup_seconds=round(outcome.lifetime - trained, 3),
        score_seconds=rounded(scored.get("score_seconds")),
        score_bound_seconds=rounded(scored.get("score_bound_seconds")),
        total_seconds=round(total, 3),
        peak_memory_mb=round(peak / (1 << 20), 1) if peak else None,
        tokens=outcome.tokens,
        steps=outcome.steps,
        num_params=num_params,
        mfu_percent=mfu_percent(flops, outcome.tokens_served, trained, peak_flops(name)),
        device=name,
        harness_id=harness_id,
        seed=seed,
        sandbox=sandboxed,
        conditions=host.model_copy(update={"speed_gflops": rounded(outcome.speed_gflops)}),
        log_tail=log[-LOG_TAIL_CHARS:],
    )
