"""Pinning a track's harness id and platform: one rule for the server's configuration and for
each worker that registers (server/harness_pin.py `pin`; the registration's 409s are in
test_worker_protocol.py)."""

from __future__ import annotations

import pytest

from server.harness_pin import TrackMismatch, pin
from server.models import Track


def test_the_first_values_are_pinned_then_kept_and_a_contradiction_changes_nothing() -> None:
    track = Track(harness_id=None, platform=None)
    assert pin(track, None, None) == [] and track.harness_id is None  # nothing offered yet
    assert pin(track, "h1", "gpu") == ["harness_id", "platform"]
    assert (track.harness_id, track.platform) == ("h1", "gpu")
    assert pin(track, "h1", "gpu") == [] and pin(track, None, "gpu") == []

    fresh = Track(harness_id=None, platform="gpu")
    with pytest.raises(TrackMismatch) as refused:
        pin(fresh, "h2", "cpu")  # the harness would be new, the platform contradicts: neither is stored
    assert (refused.value.field, refused.value.pinned, refused.value.offered) == ("platform", "gpu", "cpu")
    assert fresh.harness_id is None
    assert "PLATFORM or prepared data" in str(refused.value)
