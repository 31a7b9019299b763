"""Which tracks a worker may serve, and what a track may be called: rules as pure functions.

A worker reports its device (the platform name results carry), its harness id and its preset. A
track accepts it when it is not archived, its preset is the worker's (when both say one), the
device is the platform the track is pinned to (before a pin: matches one of its `platforms`
patterns, fnmatch, comma-separated; none: any device) and the harness id is the one it is pinned
to (before a pin: any). The first worker a track accepts pins what it had no pin for
(server/harness_pin.py): results of one track are compared with each other only, so a track
measures on one platform with one harness.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fnmatch import fnmatchcase

from protocol.schemas import TRACK_PATTERN

_NAME = re.compile(TRACK_PATTERN)


@dataclass(frozen=True)
class Offer:
    """What a worker registers with."""

    device: str
    harness_id: str
    preset: str | None = None


@dataclass(frozen=True)
class Pins:
    """A track as the rule reads it."""

    name: str
    preset: str | None
    platforms: str | None
    platform: str | None
    harness_id: str | None
    archived: bool = False


def patterns(platforms: str | None) -> list[str]:
    """The patterns of a track's `platforms` (none: any device)."""
    return [p.strip() for p in (platforms or "").split(",") if p.strip()]


def matches(platforms: str | None, device: str) -> bool:
    """Whether a device is one of a track's platforms (case-sensitive, as results compare them)."""
    wanted = patterns(platforms)
    return not wanted or any(fnmatchcase(device, pattern) for pattern in wanted)


@dataclass(frozen=True)
class Refusal:
    """Why a track does not accept a worker: a problem kind and the reason in words."""

    kind: str  # track-archived, preset-mismatch, platform-mismatch or harness-mismatch
    detail: str


def refusal(track: Pins, offer: Offer) -> Refusal | None:
    """Why the track does not accept the worker; None when it does."""
    if track.archived:
        return Refusal("track-archived", f"track {track.name} is archived")
    if track.preset is not None and offer.preset is not None and offer.preset != track.preset:
        return Refusal(
            "preset-mismatch",
            f"track {track.name} runs preset {track.preset}; the worker's preset is {offer.preset}",
        )
    if track.platform is not None and offer.device != track.platform:
        return Refusal(
            "platform-mismatch",
            f"track {track.name} measures on {track.platform!r}; the worker's device is {offer.device!r}",
        )
    if track.platform is None and not matches(track.platforms, offer.device):
        return Refusal(
            "platform-mismatch",
            f"track {track.name} is served by {track.platforms!r}, which the worker's device "
            f"{offer.device!r} does not match",
        )
    if track.harness_id is not None and offer.harness_id != track.harness_id:
        return Refusal(
            "harness-mismatch",
            f"track {track.name} uses harness {track.harness_id}; the worker's harness is {offer.harness_id}",
        )
    return None


def name_problem(name: str) -> str | None:
    """What is wrong with a new track's name (None: nothing)."""
    if not _NAME.match(name):
        return (
            f"a track's name is 1-40 lower-case letters, digits and hyphens, starting with a letter or "
            f"digit (it names the git branch tracks/<name>/best); {name!r} is not"
        )
    return None
