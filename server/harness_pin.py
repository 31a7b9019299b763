"""Which harness and platform a track uses: pinned the first time they are known.

Results are only comparable under one harness id and on one platform, so each track pins both in
the database the first time they are known and refuses a mismatch from then on: the first track
from the server's configuration (HARNESS_ID, else the prepared data's manifest; PLATFORM), any
track from the admin who creates it, and from the first worker it accepts (server/rules/tracks.py).
"""

from __future__ import annotations

import logging

from server.core.config import ServerSettings
from server.models import Track

log = logging.getLogger(__name__)


_SETTINGS = {"harness_id": "HARNESS_ID", "platform": "PLATFORM"}  # what configures each


class TrackMismatch(RuntimeError):
    """A harness id or platform that contradicts what the track was pinned to."""

    def __init__(self, field: str, pinned: str, offered: str) -> None:
        self.field, self.pinned, self.offered = field, pinned, offered
        super().__init__(
            f"this database's first track uses {field} {pinned!r}, but the server is configured with "
            f"{offered!r} ({_SETTINGS[field]} or prepared data). Results of different harnesses or "
            "platforms are never compared: use the original configuration, or a new DATA_DIR / DATABASE_URL"
        )


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
            "will fix the first track's harness id",
            exc,
        )
        return None


def pin(track: Track, harness_id: str | None, platform: str | None) -> list[str]:
    """The one rule of pinning, for the server's configuration and for each worker a track
    accepts: a value the track has none of yet is stored (the fields pinned now are returned), one
    it has is accepted, and one that contradicts it raises TrackMismatch (checked before anything
    is stored)."""
    offered = {"harness_id": harness_id, "platform": platform}
    for field, wanted in offered.items():
        current = getattr(track, field)
        if wanted and current is not None and current != wanted:
            raise TrackMismatch(field, current, wanted)
    pinned = [field for field, wanted in offered.items() if wanted and getattr(track, field) is None]
    for field in pinned:
        setattr(track, field, offered[field])
    return pinned
