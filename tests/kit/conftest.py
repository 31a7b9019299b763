"""A real project for the CLI tests: `autoresearch serve` on a free port with SQLite, a research
repo in a temporary folder, and one real CPU worker (sandboxed runs of the `test` preset).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from harness.config import HarnessSettings
from harness.data_layout import PreparedPaths
from testkit.candidates import bigram
from testkit.processes import Project, init_project, serve
from tests.fixtures_data import test_data  # noqa: F401  (session fixture)
from tests.kit.cli_process import BASELINE_LR


@pytest.fixture(scope="session")
def project(
    tmp_path_factory: pytest.TempPathFactory,
    test_data: tuple[HarnessSettings, PreparedPaths],  # noqa: F811
) -> Iterator[Project]:
    """A server whose baseline is a cheap bigram (LEARNING_RATE = 0.05), with one worker running."""
    settings, _paths = test_data
    tmp = tmp_path_factory.mktemp("kit-project")
    project = serve(init_project(tmp, settings, bigram(BASELINE_LR)), settings, lease_seconds=30.0)
    try:
        project.worker("kit-worker")
        yield project
    finally:
        project.close()
