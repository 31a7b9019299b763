"""The worker's preflight of the CUDA IPC hand-over: a run's own pieces, on a known buffer.

`check(device)` makes a run folder (`RunShm`) and starts this module's `consume` in the scorer's
namespace, as the runner starts the scorer; `consume` starts `produce` in a model sandbox built by
the runner's own spec (`model_spec`, with the shared /dev/shm). The producer fills a small buffer
on the GPU with known values and exports it as a model process does (`export`); the consumer
opens it as the scorer does (`parse_export`, `open_logits`) and compares. A machine where any
part fails takes no work (worker/preflight.py): the error names the part.
"""

from __future__ import annotations

import json
import math
import select
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from harness.runner.cuda_handover import (
    ExportError,
    Handover,
    OpenError,
    RunShm,
    check_run_shm,
    export,
    open_export,
)
from harness.runner.launch import launch
from harness.runner.limits import default_limits
from harness.runner.sandbox import python_command
from harness.runner.scoring.model_process import ModelJob, model_spec

MAX_ROWS, SEQ_LEN, VOCAB = 2, 4, 8
PRODUCER_TIMEOUT_S = 90.0  # torch's import and the CUDA context, on a busy machine
CHECK_TIMEOUT_S = 150.0
MEMORY_LIMIT_GB = 8.0


class HandoverCheckError(RuntimeError):
    """The CUDA IPC hand-over does not work on this machine; the message names the part."""


def check(device: str) -> None:
    """Runner side: HandoverCheckError unless a model sandbox's GPU buffer reaches the scorer's
    namespace intact."""
    shm = RunShm.create()
    try:
        command = [sys.executable, "-I", "-B", "-u", "-m", "harness.runner.handover_check", "consume", device]
        done = subprocess.run(
            shm.wrap(command),
            capture_output=True,
            text=True,
            timeout=CHECK_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise HandoverCheckError(f"CUDA IPC check: no answer in {CHECK_TIMEOUT_S:.0f} s") from exc
    finally:
        shm.remove()
    lines = done.stdout.strip().splitlines()
    try:
        answer = json.loads(lines[-1])
    except (IndexError, ValueError):
        tail = done.stderr.strip()[-2000:]
        raise HandoverCheckError(
            f"CUDA IPC check: the scorer's namespace failed (exit status {done.returncode}): {tail}"
        ) from None
    if not answer.get("ok"):
        raise HandoverCheckError(f"CUDA IPC check: {answer.get('part')}: {answer.get('error')}")


def consume(device: str) -> dict[str, Any]:
    """In the scorer's namespace: start the producer in a model sandbox, open its buffer, compare."""
    import torch

    try:
        check_run_shm()
    except RuntimeError as exc:
        return {"ok": False, "part": "the scorer's /dev/shm", "error": str(exc)}
    with tempfile.TemporaryDirectory(prefix="handover-check-") as folder:
        job = ModelJob(
            candidate=Path(folder) / "train.py",
            weights_dir=Path(folder),
            device=device,
            vocab_size=VOCAB,
            seq_len=SEQ_LEN,
            time_budget=1.0,
            seed=0,
            bos_id=0,
            max_rows=MAX_ROWS,
            sandboxed=True,
            limits=default_limits(MEMORY_LIMIT_GB, "handover-check"),
            handover=Handover.CUDA_IPC,
            shared_shm=True,
        )
        job.candidate.touch()
        launched = launch(
            python_command("harness.runner.handover_check", "produce", device),
            model_spec(job),
            sandboxed=True,
            limits=job.limits,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        try:
            return compare(launched.popen, device, torch)
        finally:
            launched.close()


def compare(producer: subprocess.Popen[bytes], device: str, torch: Any) -> dict[str, Any]:
    sent, said = answer_of(producer)
    if sent is None:
        return {"ok": False, "part": "the model sandbox", "error": said[-2000:] or "no answer"}
    if not sent.get("ok"):
        return {"ok": False, "part": "the model sandbox", "error": sent.get("error")}
    shape = (MAX_ROWS, SEQ_LEN, VOCAB)
    started = time.monotonic()
    try:
        copy = open_export(sent.get("handover"), device, shape).clone()
    except (ExportError, OpenError) as exc:
        return {"ok": False, "part": "the scorer's open", "error": str(exc)}
    expected = torch.arange(math.prod(shape), dtype=torch.float32, device=copy.device).reshape(shape)
    if not torch.equal(copy, expected):
        return {"ok": False, "part": "the values read", "error": "they differ from what the model wrote"}
    return {"ok": True, "open_ms": 1000 * (time.monotonic() - started)}


def answer_of(producer: subprocess.Popen[bytes]) -> tuple[dict[str, Any] | None, str]:
    """The producer's JSON answer, skipping what else it printed (warnings, a traceback, which come
    back instead when there is no answer in time)."""
    assert producer.stdout is not None
    deadline, said = time.monotonic() + PRODUCER_TIMEOUT_S, []
    while (left := deadline - time.monotonic()) > 0:
        ready, _, _ = select.select([producer.stdout], [], [], left)
        line = producer.stdout.readline().decode(errors="replace") if ready else ""
        if not line:
            break
        if line.startswith('{"ok"'):
            return json.loads(line), ""
        said.append(line)
    return None, "".join(said).strip()


def produce(device: str) -> dict[str, Any]:
    """In a model sandbox: a buffer of known values on the GPU, exported as a model process does;
    it lives until the consumer closes stdin."""
    try:
        import torch

        shape = (MAX_ROWS, SEQ_LEN, VOCAB)
        buffer = torch.arange(math.prod(shape), dtype=torch.float32, device=device).reshape(shape)
        torch.cuda.synchronize(buffer.device)
        return {"ok": True, "handover": export(buffer), "keep": buffer}
    except Exception as exc:
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}


def main(argv: list[str]) -> None:
    role, device = argv
    if role == "consume":
        print(json.dumps(consume(device)), flush=True)
        return
    answer = produce(device)
    kept = answer.pop("keep", None)
    print(json.dumps(answer), flush=True)
    sys.stdin.read()  # the buffer stays exported until the consumer is done
    del kept


if __name__ == "__main__":
    main(sys.argv[1:])
