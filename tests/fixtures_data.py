"""Prepared data for tests of every area: the `test` preset on the default corpus.

Use it from any conftest.py:

    from tests.fixtures_data import test_data  # noqa: F401  (a session fixture)

or call `prepared_test_data()` in a fixture of your own. The data is prepared once into
var/test-data/ (git-ignored) and reused by later sessions; `prepare` re-checks every stage, so a
change to the harness code that affects the data rebuilds just what it must. Treat the files as
read-only: a test that damages data must work on its own copy.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.config import HarnessSettings, load_settings
from harness.data import speeches
from harness.data_layout import PreparedPaths
from harness.prepare import prepare

CACHE_DIR = Path(__file__).resolve().parents[1] / "var" / "test-data"


def prepared_test_data() -> tuple[HarnessSettings, PreparedPaths]:
    """Settings of the `test` preset (default corpus) and its prepared paths, preparing if needed."""
    settings = load_settings("test", data_source="speeches", data_dir=CACHE_DIR)
    return settings, prepare(settings, progress=False)


def corpus_documents() -> tuple[list[str], list[str]]:
    """The default corpus's (training, held-out pool) documents: real text for tests of other
    sources (downloaded once into the test data's folder, as `prepare` does)."""
    return speeches.documents(speeches.download(CACHE_DIR / "downloads"))


@pytest.fixture(scope="session")
def test_data() -> tuple[HarnessSettings, PreparedPaths]:
    return prepared_test_data()
