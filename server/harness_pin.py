"""Which harness this server's project uses: HARNESS_ID, else the prepared data's manifest.

One server is one project: results are only comparable under one harness id and on one
platform, so both are pinned in the database the first time they are known (configuration,
manifest, or the first worker that registers) and a mismatch is refused from then on.
"""

from __future__ import annotations

import logging

from server.core.config import ServerSettings
from server.models import Project

log = logging.getLogger(__name__)


class ProjectMismatch(RuntimeError):
    """The configuration contradicts what the database was pinned to."""


def configured_harness_id(settings: ServerSettings) -> str | None:
    if settings.harness_id:
        return settings.harness_id
    from harness.config import load_settings
    from harness.data.errors import DataError
    from harness.data_layout import read_manifest

    try:
        return str(read_manifest(load_settings(data_dir=settings.data_dir))["harness_id"])
    except (DataError, ValueError, KeyError) as exc:
        log.warning(
            "no HARNESS_ID set and no prepared data to read it from (%s): the first worker to register "
            "will fix this project's harness id",
            exc,
        )
        return None


def pin(project: Project, harness_id: str | None, platform: str | None) -> None:
    """Store the configured harness id and platform, or refuse ones that contradict the database."""
    for field, wanted, setting in (
        ("harness_id", harness_id, "HARNESS_ID"),
        ("platform", platform, "PLATFORM"),
    ):
        if not wanted:
            continue
        current = getattr(project, field)
        if current is None:
            setattr(project, field, wanted)
        elif current != wanted:
            raise ProjectMismatch(
                f"this database's project uses {field} {current!r}, but the server is configured with "
                f"{wanted!r} ({setting} or prepared data). Results of different harnesses or platforms are "
                "never compared: use the original configuration, or a new DATA_DIR / DATABASE_URL"
            )
