"""Inside a score sandbox: rebuild the candidate's model from its weights and run forward passes.

Run as `python -m harness.runner.sandboxed.model_entry CONFIG_JSON` by the trusted scorer. The
process first imports torch and waits (so the scorer can start it early), imports the harness's
libraries train.py used in training if the scorer says so (harness.runner.preload), then on `go`
forbids itself new processes (harness.runner.sandboxed.threads_only: its CPU seconds are all in its
own), imports train.py, calls `build_model`, loads the saved weights (safetensors: tensors only) and
answers `batch N` commands: it reads N rows of validation *inputs* from shared memory and writes the
logits back (on CUDA into one GPU buffer the scorer opens through CUDA IPC:
harness.runner.cuda_handover). It never sees targets or byte lengths, and it computes no loss: the
scorer does.

The weights are loaded with `torch.nn.Module`'s own `load_state_dict` and the model put in eval
mode with `torch.nn.Module.train`, never with the candidate's overrides of them. Everything else in
this process is candidate code's to change (its modules' `_load_from_state_dict`, hooks, torch
itself), so nothing here is a check: the scorer checks from outside, by timing this process and by
comparing its predictions with a fresh process's (harness.runner.scoring.scorer).
"""

from __future__ import annotations

import json
import mmap
import os
import sys
from typing import Any

from harness.runner.cuda_handover import Handover, export
from harness.runner.limits import CPU_SPARE_CORES, Limits, apply_rlimits, session_as_nice_as_self
from harness.runner.sandboxed.threads_only import forbid_new_processes


class InvalidOutputError(ValueError):
    pass


def commands(fd: int) -> Any:
    """Commands from the scorer (trusted), one JSON object per line."""
    with os.fdopen(fd, "rb", buffering=0) as stream:
        for line in stream:
            yield json.loads(line)


def score_context(config: dict[str, Any], device: Any) -> Any:
    """The ctx `build_model` gets when scoring: same constants, no data, no budget left."""
    from harness.context import TrainContext

    def no_batches(batch_size: int) -> Any:
        raise RuntimeError("there is no training data in the score phase")

    return TrainContext(
        device=device,
        vocab_size=config["vocab_size"],
        seq_len=config["seq_len"],
        time_budget=config["time_budget"],
        seed=config["seed"],
        bos_id=config["bos_id"],
        peak_flops=None,
        _batches=no_batches,
        _time_left=lambda: 0.0,
        _log=lambda **_: None,
    )


def main(config: dict[str, Any]) -> None:
    from harness.runner import preload
    from harness.runner.sandboxed.entry_common import Reporter, finish, import_candidate

    reporter = Reporter(config["events_fd"])
    try:
        session_as_nice_as_self()  # started while the candidate trains, it yields until `go`
        apply_rlimits(Limits(**config["limits"]), config["device"])
        import numpy as np
        import safetensors.torch
        import torch
    except BaseException as exc:
        reporter.error("harness", exc)
        finish(1)
    rows, seq_len, vocab = config["max_rows"], config["seq_len"], config["vocab_size"]
    on_gpu = Handover(config["handover"]) is Handover.CUDA_IPC
    inputs_map = mmap.mmap(config["inputs_fd"], rows * seq_len * 8)
    inputs = torch.from_numpy(np.frombuffer(inputs_map, dtype=np.int64).reshape(rows, seq_len))
    if not on_gpu:
        logits_map = mmap.mmap(config["logits_fd"], rows * seq_len * vocab * 4)
        logits_out = torch.from_numpy(
            np.frombuffer(logits_map, dtype=np.float32).reshape(rows, seq_len, vocab)
        )
    device = torch.device(config["device"])
    if device.type == "cpu":
        # Every core but one, as the baseline trains: torch's threads stall whenever another thread
        # wants a core, and the forward passes are timed (docs/runner.md). build_model may change it.
        torch.set_num_threads(max(1, len(os.sched_getaffinity(0)) - CPU_SPARE_CORES))
    reporter.send("ready")
    stream = commands(config["commands_fd"])
    first = next(stream, None)
    if first is not None and first.get("cmd") == "preload":  # before any candidate code
        names = first.get("modules")
        reporter.send("preloaded", count=preload.load(names if isinstance(names, list) else []))
        first = next(stream, None)
    if first is None or first.get("cmd") != "go":
        finish(0)

    where = "harness"
    try:
        shared: dict[str, object] = {}
        if on_gpu:  # one buffer for the process's life, made before any candidate code runs
            logits_out = torch.empty((rows, seq_len, vocab), dtype=torch.float32, device=device)
            shared = {"handover": export(logits_out)}
        # Threads only from here on, for every thread there is and will be (after the GPU's
        # context is made: a driver may start a helper for that).
        forbid_new_processes()
        where = "import"
        candidate = import_candidate(config["candidate"])
        where = "build_model"
        torch.manual_seed(config["seed"])
        model = candidate.build_model(score_context(config, device))
        if not isinstance(model, torch.nn.Module):
            raise TypeError(f"build_model must return a torch.nn.Module, not {type(model).__name__}")
        where = "load_weights"
        weights = safetensors.torch.load_file(config["weights"], device=str(device))
        torch.nn.Module.load_state_dict(model, weights, strict=True)
        torch.nn.Module.train(model, False)
    except BaseException as exc:
        reporter.error(where, exc)
        finish(1)
    reporter.send("loaded", **shared)

    for command in stream:
        if command.get("cmd") != "batch":
            break
        count = command["rows"]
        try:
            with torch.no_grad():
                output = model(inputs[:count].to(device))
            check_output(output, count, seq_len, vocab, torch)
            logits_out[:count].copy_(output[..., :vocab].float())
            if on_gpu:  # written before `done` reaches the scorer
                torch.cuda.synchronize(device)
        except BaseException as exc:
            kind = "invalid_output" if isinstance(exc, InvalidOutputError) else None
            reporter.error("forward", exc, kind)
            finish(1)
        reporter.send("done", batch=command["batch"])
    finish(0)


def check_output(output: Any, count: int, seq_len: int, vocab: int, torch: Any) -> None:
    """Logits must be a float tensor [rows, seq_len, >= vocab] (extra padded columns are ignored)."""
    if not isinstance(output, torch.Tensor):
        raise InvalidOutputError(f"forward returned {type(output).__name__}, expected a logits tensor")
    if output.dim() != 3 or output.shape[0] != count or output.shape[1] != seq_len or output.shape[2] < vocab:
        raise InvalidOutputError(
            f"forward returned shape {tuple(output.shape)}, expected ({count}, {seq_len}, {vocab})"
        )
    if not output.is_floating_point():
        raise InvalidOutputError(f"forward returned dtype {output.dtype}, expected a floating point type")


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
