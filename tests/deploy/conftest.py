"""A one-node Slurm cluster for the whole session (tests/deploy/slurm_cluster.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.deploy.slurm_cluster import SlurmCluster, SlurmUnavailable, check_prerequisites
from tests.fixtures_data import test_data  # noqa: F401  (session fixture)


@pytest.fixture(scope="session")
def slurm() -> Iterator[SlurmCluster]:
    try:
        check_prerequisites()
    except SlurmUnavailable as exc:
        pytest.fail(str(exc))  # not a skip: CI installs Slurm (.ci/run)
    cluster = SlurmCluster()
    try:
        cluster.start()
    except SlurmUnavailable as exc:
        cluster.stop()
        pytest.fail(str(exc))
    try:
        yield cluster
    finally:
        cluster.stop()
