"""Logits that stay on the GPU: the CUDA IPC hand-over from a model sandbox to the scorer.

On CUDA the model process keeps one logits buffer on its GPU for its whole life and exports it
once, in the `loaded` message (torch's IPC form of a CUDA storage: the driver's memory handle and
the name of a reference-counter file). The scorer opens it once and, per batch, copies the rows it
commanded into a GPU buffer of its own: nothing crosses host memory. On CPU the logits go through
a shared memory file as before (harness.runner.scoring.model_process).

CUDA's IPC works only when both processes see one tmpfs as `/dev/shm` (docs/runner.md, "CUDA"):
the runner makes a fresh folder on the host's `/dev/shm` for each run (`RunShm`), runs the scorer
in a mount namespace of its own where that folder is `/dev/shm` (bwrap `--dev-bind / /`: the
scorer sees the whole host as before), and the scorer binds its `/dev/shm` into each model
sandbox. A candidate sees that folder and nothing else of the host's `/dev/shm`; the scorer empties
it between the eval process and the probe process, which must share nothing.

Trust: the export comes from a process that runs candidate code, so the scorer never unpickles
it. It reads fixed fields, checks their types and ranges (`parse_export`), opens the storage, and
checks that the rows it will read lie inside the allocation the driver mapped (`open_logits`):
a forged size or offset cannot make the scorer read its own memory. A handle the driver refuses,
or a counter file the model breaks, fails that run; the worker's re-check after a failed run then
charges it to the candidate (worker/preflight.py).
"""

from __future__ import annotations

import ctypes
import enum
import functools
import math
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.runner.sandbox import check_bwrap


class Handover(enum.StrEnum):
    HOST = "host"  # a shared memory file: the model copies to the host, the scorer back
    CUDA_IPC = "cuda_ipc"  # the model's GPU buffer, opened by the scorer on the GPU


def handover_for(device: str) -> Handover:
    """The only hand-over a device gets: CUDA IPC on CUDA (no fallback to the host path: a machine
    where it fails must fail its preflight), the shared file elsewhere."""
    return Handover.CUDA_IPC if device.startswith("cuda") else Handover.HOST


# The scorer's marker in the run's folder: it checks the file is there before it empties its
# /dev/shm, so that it never empties the host's own.
MARKER = ".autoresearch-run-shm"

# torch's reference-counter files: `/torch_<pid>_<random>_<n>` (shm_open names, no folder), each
# CUDA_IPC_REF_COUNTER_FILE_SIZE (10,000) int64 slots.
REF_COUNTER_NAME = re.compile(rb"^/torch_[0-9]{1,10}_[0-9]{1,20}_[0-9]{1,10}$")
REF_COUNTER_SLOTS = 10_000
MAX_HANDLE_BYTES = 1024  # a memory or event handle is 64 bytes plus torch's header
MAX_BYTES = 1 << 48


class ExportError(ValueError):
    """The model's export is malformed or points outside its own allocation (only a model that
    tampers with the harness's export can cause it)."""


class OpenError(RuntimeError):
    """The driver refused the export: a broken candidate, or a machine where CUDA IPC fails (which
    its preflight shows)."""


@dataclass(frozen=True)
class Export:
    """The fields of torch's `UntypedStorage._share_cuda_()`, checked (see `parse_export`)."""

    device: int
    handle: bytes
    size_bytes: int
    offset_bytes: int
    ref_counter: bytes
    ref_counter_offset: int
    event: bytes
    event_sync: bool


def export(buffer: Any) -> dict[str, object]:
    """Model side: the JSON form of `buffer`'s storage (a CUDA tensor at offset 0 of its storage)."""
    assert buffer.storage_offset() == 0 and buffer.is_contiguous()
    device, handle, size, offset, ref_counter, ref_offset, event, event_sync = (
        buffer.untyped_storage()._share_cuda_()
    )
    return {
        "device": int(device),
        "handle": bytes(handle).hex(),
        "size_bytes": int(size),
        "offset_bytes": int(offset),
        "ref_counter": bytes(ref_counter).hex(),
        "ref_counter_offset": int(ref_offset),
        "event": bytes(event).hex(),
        "event_sync": bool(event_sync),
    }


def parse_export(message: object, device: int, needed_bytes: int) -> Export:
    """Scorer side: the export as data, or ExportError naming the first field that is wrong.
    `device` is the scorer's CUDA device index; `needed_bytes` what it will read."""
    if not isinstance(message, dict):
        raise ExportError("the model's logits export is missing")

    def number(key: str, low: int, high: int) -> int:
        value = message.get(key)
        if type(value) is not int or not low <= value < high:
            raise ExportError(f"the model's logits export: {key} must be an integer in [{low}, {high})")
        return value

    def blob(key: str, least: int = 1) -> bytes:
        value = message.get(key)
        if not isinstance(value, str) or not 2 * least <= len(value) <= 2 * MAX_HANDLE_BYTES:
            raise ExportError(
                f"the model's logits export: {key} must be hex, {least}-{MAX_HANDLE_BYTES} bytes"
            )
        try:
            return bytes.fromhex(value)
        except ValueError as exc:
            raise ExportError(f"the model's logits export: {key} is not hex") from exc

    event_sync = message.get("event_sync")
    if type(event_sync) is not bool:
        raise ExportError("the model's logits export: event_sync must be true or false")
    found = Export(
        device=number("device", 0, 1 << 16),
        handle=blob("handle"),
        size_bytes=number("size_bytes", needed_bytes, MAX_BYTES),
        offset_bytes=number("offset_bytes", 0, MAX_BYTES),
        ref_counter=blob("ref_counter"),
        ref_counter_offset=number("ref_counter_offset", 0, REF_COUNTER_SLOTS),
        event=blob("event", least=1 if event_sync else 0),  # torch sends none when not needed
        event_sync=event_sync,
    )
    if found.device != device:
        raise ExportError(f"the model's logits are on CUDA device {found.device}, not {device}")
    if not REF_COUNTER_NAME.match(found.ref_counter):
        raise ExportError("the model's logits export: ref_counter is not a torch counter name")
    return found


def within(base: int, size: int, start: int, length: int) -> bool:
    """Whether bytes [start, start + length) lie inside the allocation [base, base + size)."""
    return base <= start and start + length <= base + size


@functools.cache
def _driver() -> ctypes.CDLL:
    return ctypes.CDLL("libcuda.so.1")


def driver_address_range(pointer: int) -> tuple[int, int]:
    """The base and size of the CUDA allocation that holds `pointer` (cuMemGetAddressRange, in the
    context torch made current on this thread)."""
    base, size = ctypes.c_uint64(), ctypes.c_size_t()
    code = _driver().cuMemGetAddressRange_v2(ctypes.byref(base), ctypes.byref(size), ctypes.c_uint64(pointer))
    if code != 0:
        raise OpenError(f"the model's logits pointer is not a CUDA allocation here (CUresult {code})")
    return base.value, size.value


def open_logits(
    found: Export,
    shape: Sequence[int],
    address_range: Callable[[int], tuple[int, int]] = driver_address_range,
) -> Any:
    """Scorer side: a float32 tensor of `shape` over the model's buffer (it stays the model's to
    write: copy before use). OpenError if the driver refuses it, ExportError if it is not all
    inside one allocation."""
    import torch

    torch.cuda.set_device(found.device)  # its primary context current here, for the driver call
    try:
        storage = torch.UntypedStorage._new_shared_cuda(
            found.device,
            found.handle,
            found.size_bytes,
            found.offset_bytes,
            found.ref_counter,
            found.ref_counter_offset,
            found.event,
            found.event_sync,
        )
    except RuntimeError as exc:
        raise OpenError(f"CUDA IPC could not open the model's logits: {exc}") from exc
    needed = math.prod(shape) * 4
    base, size = address_range(storage.data_ptr())
    if not within(base, size, storage.data_ptr(), needed):
        raise ExportError("the model's logits export points outside its own allocation")
    strides = [math.prod(shape[index + 1 :]) for index in range(len(shape))]  # row-major
    tensor = torch.empty(0, dtype=torch.float32, device=f"cuda:{found.device}")
    return tensor.set_(storage, 0, tuple(shape), strides)


def open_export(message: object, device: str, shape: Sequence[int]) -> Any:
    """Scorer side, the one way in: the export a model process sent (`message`), checked as data
    (parse_export) for the scorer's `device` ("cuda" or "cuda:N"), opened as a tensor of `shape`
    (open_logits)."""
    import torch

    index = torch.device(device).index
    index = torch.cuda.current_device() if index is None else index
    return open_logits(parse_export(message, index, math.prod(shape) * 4), shape)


@dataclass(frozen=True)
class RunShm:
    """Runner side: one run's folder on the host's tmpfs, the `/dev/shm` of its scorer and models."""

    folder: Path

    @classmethod
    def create(cls, root: Path = Path("/dev/shm")) -> RunShm:
        folder = Path(tempfile.mkdtemp(prefix="autoresearch-run-", dir=root))
        (folder / MARKER).touch()
        return cls(folder)

    def wrap(self, command: Sequence[str]) -> list[str]:
        """`command` in a mount namespace where this folder is /dev/shm and all else is the host's."""
        return [
            check_bwrap(),
            "--dev-bind",
            "/",
            "/",
            "--bind",
            str(self.folder),
            "/dev/shm",
            "--die-with-parent",
            "--",
            *command,
        ]

    def remove(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)


def check_run_shm(shm: Path = Path("/dev/shm")) -> None:
    """Scorer side, at its start: its /dev/shm must be the run's folder (RuntimeError if not)."""
    if not (shm / MARKER).is_file():
        raise RuntimeError(f"{shm} is not this run's folder: the scorer was not started in its namespace")


def empty_run_shm(shm: Path = Path("/dev/shm")) -> list[str]:
    """Scorer side, once the eval process is gone: remove everything it left in the shared /dev/shm
    (the marker too, if the eval left it), so that the probe process finds nothing of it; the
    names it could not remove (the caller fails the run: the probe must not start beside them).
    Folders the model locked (mode 000, owned by the same user) are opened first. Call only after
    `check_run_shm` passed at the scorer's start: its namespace cannot change since."""
    for entry in os.scandir(shm):
        path = Path(entry.path)
        if entry.is_dir(follow_symlinks=False):
            _unlock(path)
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
    return sorted(os.listdir(shm))


def _unlock(folder: Path) -> None:
    """Give the owner rwx on `folder` and every folder below it (no symlink followed, no recursion:
    a model can nest folders deeper than Python's stack)."""
    stack = [folder]
    while stack:
        current = stack.pop()
        try:
            os.chmod(current, 0o700, follow_symlinks=False)
            stack += [Path(e.path) for e in os.scandir(current) if e.is_dir(follow_symlinks=False)]
        except OSError:
            continue  # what stays is reported by empty_run_shm
