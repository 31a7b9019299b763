"""The GPU check's kit, built once per test session with `make gpu-kit` (needs PyPI and Debian)."""

from __future__ import annotations

import json
import subprocess

import pytest

from bench.gpu_check.layout import MANIFEST, REPO


@pytest.fixture(scope="session")
def built_kit() -> dict[str, object]:
    """`make gpu-kit`; a second build in the same checkout only checks that each part is current."""
    done = subprocess.run(["make", "gpu-kit"], cwd=REPO, capture_output=True, text=True, check=False)
    assert done.returncode == 0, f"make gpu-kit failed:\n{done.stdout}\n{done.stderr}"
    return json.loads(MANIFEST.read_text())
