"""The prepared data cache, shared by all workers of a host.

`harness.prepare.prepare` holds a file lock on the prepared folder while it works and writes
every stage atomically, so the first worker to start prepares the data and the others wait on
the lock and then find it ready. After that the cache is only read: the runner mounts the
training tokens read-only into the sandbox and the trusted scorer reads the validation rows.
"""

from __future__ import annotations

import logging

from harness.config import HarnessSettings
from harness.data.errors import DataError
from harness.data_layout import read_manifest
from harness.prepare import prepare


class DataCacheError(Exception):
    """The data could not be prepared; the message names the setting or folder to fix."""


def ensure_prepared(settings: HarnessSettings, log: logging.Logger) -> str:
    """Prepare the data for `settings` unless it is ready; return its harness id."""
    log.info("checking the prepared data in %s (preset %s)", settings.data_dir, settings.preset)
    try:
        paths = prepare(settings, progress=False)
        harness_id = str(read_manifest(settings)["harness_id"])
    except DataError as exc:
        raise DataCacheError(f"preparing data failed: {exc}") from exc
    log.info("data ready in %s, harness id %s", paths.root, harness_id)
    return harness_id
