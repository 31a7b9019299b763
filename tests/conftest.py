"""Scheduling of the whole suite: the heavy test files run first.

`make test` runs the files on several test processes (pytest-xdist, `--dist loadfile`), each
process taking the next file when it is done with one. A file marked `heavy` (it runs real
sandboxed experiments, servers and workers, or a whole tree walk, for tens of seconds to
minutes) that started last would run alone at the end while the other processes idle. So the
heavy files come first, in collection order, and the many short files fill in around them.
"""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Heavy items first; otherwise the collection order (a stable sort), the same in every test
    process, as xdist requires."""
    items.sort(key=lambda item: item.get_closest_marker("heavy") is None)
