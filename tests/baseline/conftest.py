"""Fixtures of the baseline train.py tests."""

from __future__ import annotations

from collections.abc import Iterator
from types import ModuleType

import pytest
import torch

from tests.baseline.tiny import load_baseline


@pytest.fixture
def train_py() -> ModuleType:
    """A fresh copy of the baseline with a tiny CPU model; a test may change its constants."""
    return load_baseline()


@pytest.fixture(autouse=True, scope="module")
def keep_torch_threads() -> Iterator[None]:
    """train() sets torch's thread count for itself; give later tests in this process theirs back."""
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)
