"""Scheduling of the whole suite: the heavy test files run first.

`make test` runs the files on several test processes (pytest-xdist, `--dist loadfile`), each
process taking the next file when it is done with one. A file marked `heavy` (it runs real
sandboxed experiments, servers and workers, or a whole tree walk, for tens of seconds to
minutes) that started last would run alone at the end while the other processes idle. So the
heavy files come first, in collection order, and the many short files fill in around them.
"""

from __future__ import annotations

import os

import pytest

# Plain memory pages for the suite's processes and those they start outside a sandbox (servers,
# workers, scorers, the GPU check's steps; a sandbox's environment is the harness's). numpy asks
# for transparent huge pages on every array of 4 MiB or more, and on this VM, CI's kind, memory in
# huge pages is far slower to touch first than in plain ones (docs/benchmarks.md, "Test suite").
# numpy reads this when first imported, which is after this file in every test process.
os.environ["NUMPY_MADVISE_HUGEPAGE"] = "0"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Heavy items first; otherwise the collection order (a stable sort), the same in every test
    process, as xdist requires."""
    items.sort(key=lambda item: item.get_closest_marker("heavy") is None)
