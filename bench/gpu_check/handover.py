"""Step 3 of the GPU check: what handing a batch of logits from the model process to the scorer costs.

On CUDA the runner now hands logits over through CUDA IPC (harness/runner/cuda_handover.py; step
1's score phase runs it, and the worker's preflight in step 2 checks it). This step measures the
alternatives side by side: the host path the runner uses on CPU (the model process copies the
logits into a shared memfd mapping, the scorer copies the mapping into a private array and that
back to the GPU; for the h100 preset, 10240 rows of 2048 x 8192 float32 logits, about 690 GB
each way) and the bare IPC legs. Measured here, on one batch of the h100 preset's shape
([64, 2048, 8192] float32, 4 GiB; one row in the --cpu dry run), the median of REPEATS:

- `host_shared_memory`: that path, leg by leg, in one process (the legs are the same copies);
- `page_locked_direct`: a fix that keeps the design: the mapping registered as page-locked memory
  (cudaHostRegister, in each process in the real thing) and copied straight back to the GPU,
  without the private copy (the GPU copy is then the scorer's snapshot; the --cpu dry run runs
  it without page-locking);
- CUDA IPC (the runner point that ended blocked): the logits stay on the GPU, and a consumer
  process (bench/gpu_check/ipc_consumer.py, standing in for the scorer) opens them through
  torch.multiprocessing's CUDA IPC. Per batch the producer refills the tensor and the consumer
  sums it; a matching checksum shows it reads the producer's memory (in the --cpu dry run a small
  CPU tensor is pickled by value: that checks only the consumer's start and feed). Consumers:
  `ipc_unsandboxed`; `ipc_sandbox` in the harness's sandbox as the runner builds it (a private
  /dev/shm, so torch's reference-counter file is not there); `ipc_sandbox_host_shm` with the
  host's /dev/shm bound; `ipc_sandbox_refcount_file` with only torch's reference-counter files
  bound.

`h100_eval_seconds` scales each path's per-row cost to the h100 preset's 10240 evaluation rows.
`forward_h100_batch` times the score phase's forward itself at the h100 shapes (64 rows of 2048
tokens; timed_forward), the other term of an h100 score phase, and says how far a row's
log-probabilities scored alone are from the same row's in the batch (`one_row_max_nats`): on a CPU
the score phase gives each model process a first batch of one row (harness.runner.scoring.score_plan).
On CUDA it does not: a candidate's bf16 forward would often differ by shape there (`batch_variant`,
harness.runner.scoring.agreement), whatever this float32 figure is; it says how far the baseline is.
"""

from __future__ import annotations

import json
import mmap
import os
import select
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.gpu_check import ipc_consumer
from bench.gpu_check.baseline import candidate_source
from bench.gpu_check.results import Results, run_step

SECTION = "3_logits_handover"
REPEATS = 3
IPC_BATCHES = 5
CONSUMER_IN_SANDBOX = "/sandbox/probe/ipc_consumer.py"
CONSUMER_TIMEOUT_S = 60.0


def h100_shape() -> tuple[int, int, int, int]:
    """(evaluation rows, rows per batch, seq_len, vocab) of the h100 preset."""
    from harness.config import PRESETS

    h100 = PRESETS["h100"]
    rows = int(h100["eval_tokens"]) // int(h100["seq_len"])
    return rows, int(h100["eval_batch_rows"]), int(h100["seq_len"]), int(h100["vocab_size"])


def synchronize(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


def timed_legs(device: str, shape: tuple[int, int, int], direct: bool) -> dict[str, Any]:
    """Per-batch milliseconds of each copy of the host path, median of REPEATS (see the docstring).
    `direct`: no private copy, and on CUDA the mapping is page-locked."""
    import numpy as np
    import torch

    nbytes = shape[0] * shape[1] * shape[2] * 4
    fd = os.memfd_create("gpu-check-logits")
    os.ftruncate(fd, nbytes)
    mapping = mmap.mmap(fd, nbytes)
    shared = torch.from_numpy(np.frombuffer(mapping, dtype=np.float32).reshape(shape))
    registered, page_locked = False, direct and device == "cuda"
    try:
        if page_locked:
            code = torch.cuda.cudart().cudaHostRegister(shared.data_ptr(), nbytes, 0)
            if int(code) != 0:
                return {"error": f"cudaHostRegister returned {code}"}
            registered = True
        logits = torch.randn(shape, device=device)
        legs: dict[str, list[float]] = {"to_shared_ms": [], "private_copy_ms": [], "to_device_ms": []}
        exact = True
        for _ in range(REPEATS):
            synchronize(device)
            started = time.perf_counter()
            shared.copy_(logits)  # the model process
            synchronize(device)
            copied = time.perf_counter()
            source = shared if direct else torch.from_numpy(shared.numpy().copy())  # the scorer
            private = time.perf_counter()
            back = source.to(device, non_blocking=page_locked)
            synchronize(device)
            done = time.perf_counter()
            exact = exact and bool(torch.equal(back, logits))
            legs["to_shared_ms"].append(1e3 * (copied - started))
            legs["private_copy_ms"].append(1e3 * (private - copied))
            legs["to_device_ms"].append(1e3 * (done - private))
            del back
        figures: dict[str, Any] = {k: round(statistics.median(v), 2) for k, v in legs.items()}
        total = sum(figures.values()) / 1e3
        figures.update(
            batch_bytes=nbytes,
            per_batch_s=round(total, 4),
            copy_gb_per_s=round(2 * nbytes / total / 1e9, 2),  # the batch crosses twice
            h100_eval_seconds=round(total / shape[0] * h100_shape()[0], 1),
            identical=exact,
            page_locked=page_locked,
        )
        return figures
    finally:
        if registered:
            torch.cuda.cudart().cudaHostUnregister(shared.data_ptr())
        os.close(fd)  # the mapping goes with the last tensor on it


class Channel:
    """JSON lines from a child's stdout, with a deadline per read."""

    def __init__(self, process: subprocess.Popen[bytes]) -> None:
        assert process.stdout is not None and process.stdin is not None
        self.process = process
        self.buffer = b""

    def send(self, line: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write((line + "\n").encode())
        self.process.stdin.flush()

    def receive(self, timeout: float) -> dict[str, Any]:
        assert self.process.stdout is not None
        fd = self.process.stdout.fileno()
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no answer from the consumer in {timeout:.0f} s")
            ready, _, _ = select.select([fd], [], [], left)
            if ready:
                chunk = os.read(fd, 65536)
                if not chunk:
                    raise EOFError(f"the consumer exited (status {self.process.wait()})")
                self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return json.loads(line)


def consume(argv: list[str], tensor: Any, payload: bytes, device: str) -> dict[str, Any]:
    """Start a consumer, hand it `tensor` and time IPC_BATCHES refills (CUDA) or the opening alone."""
    import torch

    with tempfile.TemporaryFile() as stderr:
        process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr)
        channel = Channel(process)
        figures: dict[str, Any] = {}
        try:
            figures["import_s"] = round(channel.receive(CONSUMER_TIMEOUT_S)["import_s"], 2)
            started = time.perf_counter()
            channel.send(payload.hex())
            opened = channel.receive(CONSUMER_TIMEOUT_S)
            figures["first_handover_ms"] = round(1e3 * (time.perf_counter() - started), 2)
            if opened["ev"] == "error":
                return {**figures, "works": False, "error": opened["error"]}
            expected = float(tensor.sum(dtype=torch.float64))
            matches = [abs(opened["checksum"] - expected) <= 1e-9 * max(1.0, abs(expected))]
            trips, computes = [], []
            for _ in range(IPC_BATCHES if device == "cuda" else 0):
                tensor.normal_()  # the next batch of logits, written in place
                expected = float(tensor.sum(dtype=torch.float64))
                started = time.perf_counter()
                channel.send("batch")
                answer = channel.receive(CONSUMER_TIMEOUT_S)
                trips.append(1e3 * (time.perf_counter() - started))
                computes.append(1e3 * answer["compute_s"])
                matches.append(abs(answer["checksum"] - expected) <= 1e-9 * max(1.0, abs(expected)))
            figures.update(works=all(matches), checksums_match=all(matches), consumer_device=opened["device"])
            if trips:
                figures.update(
                    batch_round_trip_ms=round(statistics.median(trips), 2),
                    consumer_sum_ms=round(statistics.median(computes), 2),
                )
            channel.send("exit")
            process.wait(timeout=30)
        except (TimeoutError, EOFError, ValueError) as exc:
            figures.update(works=False, error=str(exc))
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
            stderr.seek(0)
            tail = stderr.read().decode(errors="replace")[-1500:]
            if tail.strip() and not figures.get("works"):
                figures["consumer_stderr"] = tail
        return figures


def sandbox_argv(device: str, shm: str) -> list[str]:
    """The consumer in the harness's own sandbox (harness.runner.sandbox), plus /dev/shm as asked:
    `private` (as the runner has it), `host` (the host's bound) or refcount (torch's files only)."""
    from harness.runner.sandbox import Bind, SandboxSpec, bwrap_argv

    binds = [Bind(Path(ipc_consumer.__file__), CONSUMER_IN_SANDBOX)]
    if shm == "host":
        binds.append(Bind(Path("/dev/shm"), "/dev/shm", writable=True))
    elif shm == "refcount":
        binds += [Bind(p, str(p), writable=True) for p in refcount_files()]
    spec = SandboxSpec(binds=tuple(binds), cwd="/tmp", cuda=device == "cuda")
    return bwrap_argv(spec, [sys.executable, "-I", "-B", "-u", CONSUMER_IN_SANDBOX])


def refcount_files() -> list[Path]:
    """torch's CUDA IPC reference-counter files of this process (/dev/shm/torch_<pid>_...)."""
    return sorted(Path("/dev/shm").glob(f"torch_{os.getpid()}_*"))


def ipc_probes(results: Results, device: str, shape: tuple[int, int, int]) -> None:
    import pickle
    from multiprocessing.reduction import ForkingPickler

    import torch
    import torch.multiprocessing  # registers torch's reductions with ForkingPickler

    # CUDA tensors pickle as IPC handles; a CPU tensor (the dry run: a small one) by value.
    tensor = torch.randn(shape if device == "cuda" else (1, 8), device=device)
    plain = [sys.executable, "-I", "-B", "-u", ipc_consumer.__file__]
    variants = (
        ("ipc_unsandboxed", None),
        ("ipc_sandbox", "private"),
        ("ipc_sandbox_host_shm", "host"),
        ("ipc_sandbox_refcount_file", "refcount"),
    )
    for name, shm in variants:
        if device != "cuda" and shm in ("host", "refcount"):
            results.update(SECTION, **{name: {"skipped": "CUDA only"}})
            continue
        try:
            # A fresh handle for each consumer: one that ended may have released the last one.
            payload = bytes(ForkingPickler.dumps(tensor)) if device == "cuda" else pickle.dumps(tensor)
            argv = plain if shm is None else sandbox_argv(device, shm)
            figures = consume(argv, tensor, payload, device)
            if shm == "refcount":
                figures["bound"] = [p.name for p in refcount_files()]
        except Exception as exc:  # e.g. the sandbox cannot be built here
            figures = {"works": False, "error": f"{type(exc).__name__}: {exc}"}
        results.update(SECTION, **{name: figures})
        print(f"{name}: {figures}", flush=True)


def timed_forward(device: str) -> dict[str, Any]:
    """The score phase's forward pass at the h100 preset's shapes: the baseline built as a model
    process builds it (build_model with the score phase's ctx, eval mode), over one batch of
    eval_batch_rows x seq_len tokens (one row of the CPU-sized baseline in the dry run); a warm-up,
    then the median of REPEATS."""
    import torch

    from harness.runner.sandboxed.entry_common import import_candidate
    from harness.runner.sandboxed.model_entry import score_context

    _, batch_rows, seq_len, vocab = h100_shape()
    count = batch_rows if device == "cuda" else 1
    with tempfile.TemporaryDirectory(prefix="gpu-check-forward-") as folder:
        path = Path(folder) / "train.py"
        path.write_text(candidate_source(device, seq_len, timed=False))
        candidate = import_candidate(str(path))
    config = {"vocab_size": vocab, "seq_len": seq_len, "time_budget": 300.0, "seed": 0, "bos_id": 0}
    model = candidate.build_model(score_context(config, torch.device(device)))
    torch.nn.Module.train(model, False)
    inputs = torch.randint(vocab, (count, seq_len), device=device)
    samples = []
    with torch.no_grad():
        for _ in range(REPEATS + 1):
            started = time.perf_counter()
            model(inputs)
            synchronize(device)
            samples.append(time.perf_counter() - started)
    median = statistics.median(samples[1:])
    timed = {"rows": count, "first_s": round(samples[0], 4), "median_s": round(median, 4)}
    return timed | {"one_row_max_nats": one_row_difference(model, vocab, seq_len, max(count, 2), device)}


def one_row_difference(model: Any, vocab: int, seq_len: int, rows: int, device: str) -> float:
    """The largest difference, in nats, between a row's log-probabilities scored alone and the
    same row's in a batch of `rows` (its first and last row; float32, as the score phase scores)."""
    import torch

    inputs = torch.randint(vocab, (rows, seq_len), device=device)
    worst = 0.0
    with torch.no_grad():
        batch = torch.log_softmax(model(inputs).float(), dim=-1)
        for row in (0, rows - 1):
            alone = torch.log_softmax(model(inputs[row : row + 1]).float(), dim=-1)
            worst = max(worst, float((alone[0] - batch[row]).abs().max()))
    return worst


def body(results: Results, mode: str) -> None:
    device = "cuda" if mode == "gpu" else "cpu"
    rows, batch_rows, seq_len, vocab = h100_shape()
    shape = (batch_rows if device == "cuda" else 1, seq_len, vocab)
    results.update(
        SECTION,
        shape=list(shape),
        batch_mib=shape[0] * seq_len * vocab * 4 / 2**20,
        h100_eval_rows=rows,
        headline=("host_per_batch_s", "forward_h100_batch_s", "h100_eval_s_host", "ipc_in_sandbox"),
    )
    host = timed_legs(device, shape, direct=False)
    results.update(SECTION, host_shared_memory=host, host_per_batch_s=host.get("per_batch_s"))
    results.update(SECTION, h100_eval_s_host=host.get("h100_eval_seconds"))
    locked = timed_legs(device, shape, direct=True)  # page-locked on CUDA only
    results.update(SECTION, page_locked_direct=locked, page_locked_per_batch_s=locked.get("per_batch_s"))
    ipc_probes(results, device, shape)
    try:
        forward = timed_forward(device)
    except Exception as exc:  # a finding, as an IPC variant's failure is
        forward = {"error": f"{type(exc).__name__}: {exc}"}
    results.update(SECTION, forward_h100_batch=forward, forward_h100_batch_s=forward.get("median_s"))
    section = results.sections[SECTION]
    results.update(SECTION, ipc_in_sandbox=section["ipc_sandbox"].get("works"))
    # On the GPU every path's outcome is a finding (an IPC variant that fails says why); the step
    # fails only when the host path could not be measured. The dry run must also get the consumer
    # started and fed, outside and inside the sandbox.
    needed = ["host_shared_memory", "forward_h100_batch"]
    if device == "cpu":
        needed += ["page_locked_direct", "ipc_unsandboxed", "ipc_sandbox"]
    errors = [f"{name}: {section[name]['error']}" for name in needed if section[name].get("error")]
    results.update(SECTION, status="failed" if errors else "ok", error="; ".join(errors) or None)


if __name__ == "__main__":
    run_step((SECTION,), body)
