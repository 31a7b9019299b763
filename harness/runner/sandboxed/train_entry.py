"""Inside the train sandbox: import train.py, build the model, train it, save the weights.

Run as `python -m harness.runner.sandboxed.train_entry CONFIG_JSON` by harness.runner.train_phase. Limits
are applied before train.py is imported. The weights are saved as safetensors (tensors only,
nothing executable). Progress goes to the harness as messages, training data comes from the
harness's feeder; the harness's time accounting uses when they arrive there, not their content.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from harness.runner.limits import Limits, apply_rlimits, session_as_nice_as_self
from harness.runner.messages import DIVERGED_LOSS
from harness.runner.timing import training_seconds

PROGRESS_INTERVAL_S = 0.1  # the first report is always sent: it ends startup


class TrainingDivergedError(FloatingPointError):
    pass


class Progress:
    """ctx.log and ctx.time_left, timed like the harness does it (see harness.runner.timing)."""

    def __init__(self, reporter: Any, spawned_at: float, budget: float, allowance: float) -> None:
        self.reporter = reporter
        self.spawned_at = spawned_at
        self.budget = budget
        self.allowance = allowance
        self.started_after: float | None = None  # the end of startup: first data request or ctx.log
        self.last_sent = 0.0
        self.steps = 0  # ctx.log calls: the contract is one per step
        self.tokens = 0

    def start(self) -> None:
        """Startup ends (if it has not already): the first batch was requested, or ctx.log called."""
        if self.started_after is None:
            self.started_after = time.monotonic() - self.spawned_at

    def time_left(self) -> float:
        lifetime = time.monotonic() - self.spawned_at
        return self.budget - training_seconds(self.started_after, lifetime, self.allowance)

    def log(self, step: int, loss: float, **extra: float) -> None:
        now = time.monotonic()
        self.start()
        self.steps += 1
        loss = float(loss)
        diverged = math.isnan(loss) or math.isinf(loss) or loss > DIVERGED_LOSS
        if diverged or self.last_sent == 0.0 or now - self.last_sent >= PROGRESS_INTERVAL_S:
            self.last_sent = now
            fields = {k: float(v) for k, v in extra.items() if isinstance(v, int | float)}
            self.reporter.send(
                "progress", step=int(step), steps=self.steps, loss=loss, tokens=self.tokens, **fields
            )
        if diverged:
            raise TrainingDivergedError(f"loss is {loss} at step {step}: training diverged")

    def counted(self, batches: Iterator[Any]) -> Iterator[Any]:
        for inputs, targets in batches:
            self.tokens += int(inputs.numel())
            yield inputs, targets


def state_tensors(model: Any) -> dict[str, Any]:
    """The state dict as independent contiguous CPU tensors (safetensors refuses shared memory)."""
    import torch

    tensors = {}
    for name, value in model.state_dict().items():
        if not isinstance(value, torch.Tensor):
            raise TypeError(f"state_dict entry {name!r} is a {type(value).__name__}, not a tensor")
        tensors[name] = value.detach().to("cpu", copy=True).contiguous()
    return tensors


def declared_flops_per_token(model: Any) -> float | None:
    """The model's own count of training FLOPs per token (`model.flops_per_token()`), for the MFU
    figure: None when it has none or it fails (the figure then counts 6 per parameter)."""
    method = getattr(model, "flops_per_token", None)
    try:
        return float(method()) if callable(method) else None
    except Exception:
        return None


def main(config: dict[str, Any]) -> None:
    from harness.runner import preload
    from harness.runner.sandboxed.entry_common import CANDIDATE_MODULE, Reporter, finish, import_candidate

    reporter = Reporter(config["events_fd"])
    try:
        session_as_nice_as_self()  # a spare, started ahead of time, yields to the run now training
        apply_rlimits(Limits(**config["limits"]), config["device"])
        import safetensors.torch
        import torch
        import torch._dynamo  # every torch.optim optimizer imports it: seconds, better before `go`

        from harness.context import TrainContext
        from harness.runner.compile_cache import hand_over
        from harness.runner.conditions import measure_speed
        from harness.runner.sandboxed.feed_client import FeedClient

        if config["device"].startswith("cuda"):  # a driver or device node missing shows here
            if not torch.cuda.is_available():
                raise RuntimeError("torch sees no GPU inside the sandbox")
            if int(torch.ones(4, device=config["device"]).sum().item()) != 4:
                raise RuntimeError("a sum on the GPU came back wrong")
        hand_over(config["cache_dir"], config["feed_fd"])  # torch.compile's caches, kept per train.py
    except BaseException as exc:  # the harness itself failed: report and stop
        reporter.error("harness", exc)
        finish(1)

    reporter.send("ready")  # the experiment's clock starts only now, at `go`
    with os.fdopen(config["go_fd"], "rb") as go:  # started ahead of time: wait for the experiment
        line = go.readline()
    if not line:
        finish(0)
    go_message = json.loads(line)
    spawned_at, seed = go_message["spawned_at"], int(go_message["seed"])
    progress = Progress(reporter, spawned_at, config["time_budget"], float(go_message["allowance"]))
    device = torch.device(config["device"])
    # The machine's speed, before any candidate code: this run's first `speed` message is ours.
    reporter.send("speed", gflops=measure_speed(device))
    torch.manual_seed(seed)
    feed = FeedClient(config["feed_fd"], on_first_request=progress.start)

    def batches(batch_size: int) -> Iterator[Any]:
        return progress.counted(feed.batches(batch_size, device))

    ctx = TrainContext(
        device=device,
        vocab_size=config["vocab_size"],
        seq_len=config["seq_len"],
        time_budget=config["time_budget"],
        seed=seed,
        bos_id=config["bos_id"],
        peak_flops=config["peak_flops"],
        _batches=batches,
        _time_left=progress.time_left,
        _log=progress.log,
    )
    where = "import"
    before = set(sys.modules)
    try:
        with preload.recording(CANDIDATE_MODULE) as asked:  # the libraries train.py uses
            candidate = import_candidate(config["candidate"])
            where = "build_model"
            model = candidate.build_model(ctx)
        if not isinstance(model, torch.nn.Module):
            raise TypeError(f"build_model must return a torch.nn.Module, not {type(model).__name__}")
        num_params = sum(p.numel() for p in model.parameters())
        declared = declared_flops_per_token(model)
        asked |= preload.reached(Path(config["candidate"]).read_bytes(), vars(candidate))
        for names in preload.messages(preload.reported(before, asked)):
            reporter.send("libraries", names=names)
        reporter.send("phase", name="training", num_params=num_params)
        where = "train"
        candidate.train(model, ctx)
        reporter.send("phase", name="trained")
        where = "save"
        # Written in place: the weights file is bound into the sandbox and cannot be replaced
        # (save_file writes a temporary file and renames it: EBUSY on a mount point).
        with open(config["weights"], "wb") as handle:
            handle.write(safetensors.torch.save(state_tensors(model)))
    except BaseException as exc:
        kind = "diverged" if isinstance(exc, TrainingDivergedError) else None
        reporter.error(where, exc, kind)
        finish(1)
    cuda_peak = torch.cuda.max_memory_allocated() if device.type == "cuda" else None
    reporter.send(
        "stats",
        steps=progress.steps,
        tokens=progress.tokens,
        cuda_peak_bytes=cuda_peak,
        flops_per_token=declared,
    )
    reporter.send("phase", name="saved")
    finish(0)


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
