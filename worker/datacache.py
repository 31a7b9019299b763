"""The prepared data cache, shared by all workers of a host.

The first worker to start prepares the data (tokenizer, token files, validation rows) while
holding a file lock; the others wait on the lock and then find it ready. After that the cache
is only read (the runner mounts it read-only into the sandbox).
"""

from __future__ import annotations

import logging

from filelock import FileLock, Timeout

from harness.config import HarnessSettings
from harness.prepare import prepare
from harness.prepared import read_manifest


def ensure_prepared(settings: HarnessSettings, log: logging.Logger) -> str:
    """Prepare the data for `settings` unless another worker did; return its harness id."""
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    lock = FileLock(settings.data_dir / ".worker-prepare.lock")
    try:
        lock.acquire(timeout=0)
    except Timeout:
        log.info("waiting for another worker that is preparing the data in %s", settings.data_dir)
        lock.acquire()
    try:
        prepare(settings)
    finally:
        lock.release()
    return str(read_manifest(settings)["harness_id"])
