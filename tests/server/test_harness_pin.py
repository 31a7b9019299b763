"""Pinning a project's harness id and platform: one rule for the server's configuration and for
each worker that registers (server/harness_pin.py `pin`; the registration's 409s are in
test_worker_protocol.py)."""

from __future__ import annotations

import pytest

from server.harness_pin import ProjectMismatch, pin
from server.models import Project


def test_the_first_values_are_pinned_then_kept_and_a_contradiction_changes_nothing() -> None:
    project = Project(harness_id=None, platform=None)
    assert pin(project, None, None) == [] and project.harness_id is None  # nothing offered yet
    assert pin(project, "h1", "gpu") == ["harness_id", "platform"]
    assert (project.harness_id, project.platform) == ("h1", "gpu")
    assert pin(project, "h1", "gpu") == [] and pin(project, None, "gpu") == []

    fresh = Project(harness_id=None, platform="gpu")
    with pytest.raises(ProjectMismatch) as refused:
        pin(fresh, "h2", "cpu")  # the harness would be new, the platform contradicts: neither is stored
    assert (refused.value.field, refused.value.pinned, refused.value.offered) == ("platform", "gpu", "cpu")
    assert fresh.harness_id is None
    assert "PLATFORM or prepared data" in str(refused.value)
