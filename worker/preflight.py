"""What a worker checks before it registers, and again when a run fails in a way that may be its own.

A worker that cannot run experiments must not take any: it would fail each one and use up its
attempts. So before it registers (and so before any claim) it checks the prepared data and its
harness id, and does a real round trip through the sandbox: it starts the train sandbox of its
next run, whose harness entry imports torch and the train entry and, on a CUDA device, computes
on the GPU through the device nodes the sandbox binds, then says `ready` on a pipe only the
sandbox holds. That sandbox is kept for the first experiment. On CUDA a known GPU buffer then goes
from a model sandbox to the scorer's namespace through CUDA IPC, as every run's logits do
(harness.runner.handover_check). The device itself was probed by
`worker.device` before. Each check raises PreflightError with one line that says what to fix.
"""

from __future__ import annotations

from pathlib import Path

from harness.config import HarnessSettings
from harness.data.errors import DataError
from harness.data_layout import prepared_paths, read_manifest
from harness.runner import warm_up
from harness.runner.cuda_handover import Handover, handover_for
from harness.runner.handover_check import HandoverCheckError
from harness.runner.handover_check import check as check_handover
from harness.runner.run import check_eval_files
from harness.runner.sandbox import SandboxUnavailableError


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


def sandbox_round_trip(
    settings: HarnessSettings, device: str, unsafe_no_sandbox: bool, work_root: Path
) -> None:
    """Start the next run's train sandbox and wait until it is ready; it stays, as the spare the
    next experiment trains in (harness.runner.run_setup), so the check costs no interpreter."""
    try:
        warm_up(settings, unsafe_no_sandbox=unsafe_no_sandbox, work_root=work_root, device=device)
    except (SandboxUnavailableError, DataError) as exc:
        where = "on the GPU " if device.startswith("cuda") else ""
        raise PreflightError(f"a sandbox {where}could not run the harness: {exc}") from exc


def preflight(
    settings: HarnessSettings, harness_id: str, device: str, unsafe_no_sandbox: bool, work_root: Path
) -> None:
    """Every check a worker passes before it takes work; raises PreflightError on the first failure."""
    check_data(settings, harness_id)
    sandbox_round_trip(settings, device, unsafe_no_sandbox, work_root)
    if handover_for(device) is Handover.CUDA_IPC and not unsafe_no_sandbox:
        try:
            check_handover(device)
        except HandoverCheckError as exc:
            raise PreflightError(f"{exc} (the scorer cannot read the model's logits here)") from exc
