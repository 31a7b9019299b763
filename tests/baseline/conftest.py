"""Fixtures of the baseline train.py tests."""

from __future__ import annotations

from types import ModuleType

import pytest

from tests.baseline.tiny import load_baseline


@pytest.fixture
def train_py() -> ModuleType:
    """A fresh copy of the baseline with a tiny CPU model; a test may change its constants."""
    return load_baseline()
