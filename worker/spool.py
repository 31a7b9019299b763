"""The result spool: every finished run is on disk before it is sent, until the server has it.

One JSON file per result, named by its `result_id` (the server's idempotency key), so a result
that is resent after a lost answer or a worker restart is recorded once. Files are written to a
temporary name, fsynced and renamed, so a crash leaves either the whole file or none. A file is
deleted only after the server acknowledged it; one the server refuses for good is moved to
`rejected/` with the reason, never silently dropped.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

PENDING = "pending"
REJECTED = "rejected"


@dataclass(frozen=True)
class SpooledResult:
    """A finished run waiting to be acknowledged by the server."""

    result_id: str
    lease_id: str
    experiment_id: int
    result: dict[str, Any]  # RunResult as JSON
    finished_at: float


def new_entry(lease_id: str, experiment_id: int, result: dict[str, Any]) -> SpooledResult:
    return SpooledResult(
        result_id=str(uuid.uuid4()),
        lease_id=lease_id,
        experiment_id=experiment_id,
        result=result,
        finished_at=time.time(),
    )


def _fsync_dir(path: Path) -> None:
    # The rename is durable only once the directory entry itself is on disk.
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)


class Spool:
    """A folder of pending results; safe against crashes at any point (see module docstring)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.pending_dir = root / PENDING
        self.rejected_dir = root / REJECTED
        self.pending_dir.mkdir(parents=True, exist_ok=True)
        self.rejected_dir.mkdir(parents=True, exist_ok=True)

    def _path(self, result_id: str) -> Path:
        # result_id is a uuid we generated; parsing it keeps any other name out of the path.
        return self.pending_dir / f"{uuid.UUID(result_id)}.json"

    def put(self, entry: SpooledResult) -> None:
        _write_atomic(self._path(entry.result_id), json.dumps(asdict(entry)).encode())

    def pending(self) -> list[SpooledResult]:
        """All results not yet acknowledged, oldest first. Temporary files of a crash are ignored."""
        entries = []
        for path in self.pending_dir.glob("*.json"):
            try:
                entries.append(SpooledResult(**json.loads(path.read_bytes())))
            except (ValueError, TypeError) as exc:
                # Only disk corruption gets here (writes are atomic); keep the bytes for a human.
                self._move_rejected(path, f"unreadable spool file: {exc}")
        return sorted(entries, key=lambda e: (e.finished_at, e.result_id))

    def acknowledge(self, result_id: str) -> None:
        """The server has recorded this result: it may be forgotten."""
        self._path(result_id).unlink(missing_ok=True)
        _fsync_dir(self.pending_dir)

    def reject(self, result_id: str, reason: str) -> Path:
        """The server refused this result for good: keep it aside, with the reason, for a human."""
        return self._move_rejected(self._path(result_id), reason)

    def _move_rejected(self, path: Path, reason: str) -> Path:
        target = self.rejected_dir / path.name
        _write_atomic(target.with_suffix(".reason.txt"), reason.encode())
        os.replace(path, target)
        _fsync_dir(self.rejected_dir)
        _fsync_dir(self.pending_dir)
        return target

    def clean_temporary(self) -> None:
        """Remove half-written files left by a crash of this worker (called at start, single owner)."""
        for tmp in self.pending_dir.glob(".*.tmp"):
            tmp.unlink(missing_ok=True)
