"""A real project for the CLI tests: `autoresearch serve` on a free port with SQLite, a research
repo in a temporary folder, and one real CPU worker (sandboxed runs of the `test` preset).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from harness.config import HarnessSettings
from harness.prepared import PreparedPaths
from tests.fixtures_data import test_data  # noqa: F401  (session fixture)
from tests.kit.cli_process import ADMIN_TOKEN, BASELINE_LR
from tests.worker.candidates import bigram
from tests.worker.processes import Project, start_project


@pytest.fixture(scope="session")
def project(
    tmp_path_factory: pytest.TempPathFactory,
    test_data: tuple[HarnessSettings, PreparedPaths],  # noqa: F811
) -> Iterator[Project]:
    """A server whose baseline is a cheap bigram (LEARNING_RATE = 0.05), with one worker running."""
    settings, _paths = test_data
    tmp = tmp_path_factory.mktemp("kit-project")
    project = start_project(tmp, settings, bigram(BASELINE_LR), 30.0, ADMIN_TOKEN=ADMIN_TOKEN)
    try:
        project.worker("kit-worker")
        yield project
    finally:
        project.close()
