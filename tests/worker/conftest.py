"""Fixtures for worker tests: a fresh real server per test (see testkit/processes.py), on the `test`
preset data prepared once by tests/fixtures_data.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.config import HarnessSettings
from harness.data_layout import PreparedPaths
from testkit.candidates import bigram
from testkit.processes import InitialisedProject, Project, init_project, serve
from tests.fixtures_data import test_data  # noqa: F401  (session fixture)

# Long enough that a machine which stalls for seconds (a loaded CI machine; a virtual machine
# paused for a snapshot once froze both test processes for seconds, and 3 s leases expired under
# two tests that never meant to lose them) does not take a lease from a live worker. Tests of an
# expired lease ask for a short one with
# @pytest.mark.parametrize("project", [{"lease_seconds": 3}], indirect=True), so that a killed
# worker's experiment is requeued within seconds, and tests that take the server down for longer
# ask for a longer one the same way. Tests that must act while a run is still training ask for a
# longer {"time_budget": ...}, since the test preset's 3 s run can end before a signal or a cancel
# reaches it on a loaded machine; and {"fleet_progress_per_s": ...} and {"max_attempts": ...} set
# the server's FLEET_PROGRESS_PER_S and MAX_ATTEMPTS.
LEASE_SECONDS = 20.0


@pytest.fixture(scope="session")
def initialised(
    tmp_path_factory: pytest.TempPathFactory,
    test_data: tuple[HarnessSettings, PreparedPaths],  # noqa: F811
) -> InitialisedProject:
    """A project whose baseline (experiment 1) is a cheap bigram, made once and copied per test."""
    settings, _paths = test_data
    return init_project(tmp_path_factory.mktemp("initialised"), settings, bigram(0.05))


@pytest.fixture
def project(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    initialised: InitialisedProject,
    test_data: tuple[HarnessSettings, PreparedPaths],  # noqa: F811
) -> Iterator[Project]:
    """A fresh copy of the initialised project, served by a real server of its own."""
    settings, _paths = test_data
    options: dict[str, float] = getattr(request, "param", {})
    if "time_budget" in options:
        settings = settings.model_copy(update={"time_budget": options["time_budget"]})
    server_settings = {"fleet_progress_per_s": "FLEET_PROGRESS_PER_S", "max_attempts": "MAX_ATTEMPTS"}
    extra = {variable: str(options[key]) for key, variable in server_settings.items() if key in options}
    project = serve(
        initialised.copy_to(tmp_path), settings, options.get("lease_seconds", LEASE_SECONDS), **extra
    )
    try:
        yield project
    finally:
        project.close()
