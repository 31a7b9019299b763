"""The consumer side of the GPU check's CUDA IPC probe (bench/gpu_check/handover.py).

Run as `python -I -B -u ipc_consumer.py`, outside or inside the harness's sandbox. It stands in
for the scorer: it imports torch, reads one line with a pickled tensor (torch.multiprocessing's
CUDA IPC form: a cudaIpcMemHandle and a reference-counter file in /dev/shm), opens it, and then
answers each `batch` line with the float64 sum of the tensor as it is now, so the producer can
check that the consumer reads the memory the producer just wrote. One JSON object per answer.
Standard library and torch only (the sandbox shows nothing else of the repository).
"""

import json
import pickle
import sys
import time
from typing import Any


def reply(**message: Any) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def checksum(tensor: Any) -> float:
    import torch

    return float(tensor.sum(dtype=torch.float64))  # float() waits for the GPU


def main() -> None:
    started = time.perf_counter()
    import torch.multiprocessing  # noqa: F401  (registers torch's tensor pickling, CUDA IPC included)

    reply(ev="ready", import_s=time.perf_counter() - started)
    payload = sys.stdin.readline().strip()
    started = time.perf_counter()
    try:
        tensor = pickle.loads(bytes.fromhex(payload))
        total = checksum(tensor)
    except Exception as exc:
        reply(ev="error", where="open", error=f"{type(exc).__name__}: {exc}")
        return
    reply(ev="opened", open_s=time.perf_counter() - started, device=str(tensor.device), checksum=total)
    for line in sys.stdin:
        if line.strip() != "batch":
            break
        started = time.perf_counter()
        total = checksum(tensor)
        reply(ev="batch", checksum=total, compute_s=time.perf_counter() - started)


if __name__ == "__main__":
    main()
