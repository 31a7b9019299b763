"""Fixtures of the harness data tests."""

from __future__ import annotations

from tests.fixtures_data import test_data  # noqa: F401  (session fixture, re-exported for these tests)
