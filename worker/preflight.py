"""What a worker checks before it registers, and again when a run fails in a way that may be its own.

A worker that cannot run experiments must not take any: it would fail each one and use up its
attempts. So before it registers (and so before any claim) it checks the prepared data and its
harness id, and does a real round trip through the sandbox: a sandboxed interpreter imports
torch and the harness's train entry, and echoes a nonce; on a CUDA device it also computes on the
GPU, through the device nodes the sandbox binds. The device itself was probed by
`worker.device` before. Each check raises PreflightError with one line that says what to fix.
"""

from __future__ import annotations

import secrets
import subprocess
import sys

from harness.config import HarnessSettings
from harness.data.errors import DataError
from harness.data_layout import prepared_paths, read_manifest
from harness.runner.run import check_eval_files
from harness.runner.sandbox import SandboxSpec, SandboxUnavailableError, bwrap_argv, check_bwrap

# Interpreter start and `import torch` take 2-20 s on a busy 2-core machine; more is a fault.
ROUND_TRIP_TIMEOUT_S = 120.0

# Runs inside the sandbox: what every train sandbox imports, then the nonce back (and on CUDA a
# sum computed on the GPU, so that a driver or device node missing in the sandbox shows here).
PROBE = """
import sys
import safetensors.torch
import torch
import harness.context
import harness.runner.train_entry
nonce, cuda = sys.stdin.readline().split()
if cuda == "1":
    assert torch.cuda.is_available(), "torch sees no GPU inside the sandbox"
    assert int(torch.ones(4, device="cuda").sum().item()) == 4, "a sum on the GPU came back wrong"
print(nonce, flush=True)
"""


class PreflightError(Exception):
    """The worker cannot run experiments; the message says what is wrong and how to fix it."""


def check_data(settings: HarnessSettings, harness_id: str) -> None:
    """The prepared data is still there and is the data of `harness_id`."""
    try:
        found = str(read_manifest(settings)["harness_id"])
        check_eval_files(prepared_paths(settings).val_dir)
    except DataError as exc:
        raise PreflightError(f"the prepared data is not usable: {exc}") from exc
    if found != harness_id:
        raise PreflightError(
            f"the prepared data is now for harness {found}, not {harness_id}; restart the worker"
        )


def sandbox_round_trip(cuda: bool) -> None:
    """Start a real sandbox (with the GPU device nodes on CUDA) and get a nonce back through it."""
    try:
        check_bwrap()
    except SandboxUnavailableError as exc:
        raise PreflightError(str(exc)) from exc
    nonce = secrets.token_hex(8)
    command = [sys.executable, "-I", "-B", "-c", PROBE]
    try:
        done = subprocess.run(
            bwrap_argv(SandboxSpec(cuda=cuda), command),
            input=f"{nonce} {int(cuda)}\n",
            capture_output=True,
            text=True,
            timeout=ROUND_TRIP_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired as exc:
        raise PreflightError(f"a sandbox did not answer within {ROUND_TRIP_TIMEOUT_S:.0f} s") from exc
    if done.returncode != 0 or done.stdout.strip() != nonce:
        last = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        where = "on the GPU " if cuda else ""
        raise PreflightError(f"a sandbox {where}could not run the harness: {last}")


def preflight(settings: HarnessSettings, harness_id: str, cuda: bool, unsafe_no_sandbox: bool) -> None:
    """Every check a worker passes before it takes work; raises PreflightError on the first failure."""
    check_data(settings, harness_id)
    if not unsafe_no_sandbox:
        sandbox_round_trip(cuda)
