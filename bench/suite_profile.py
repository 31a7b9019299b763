"""Where the test suite's CPU goes: each test's CPU seconds, the processes it started included.

    .venv/bin/pytest -q -n 2 --dist loadfile --no-loadscope-reorder -p bench.suite_profile
    python -m bench.suite_profile [var/suite-profile.jsonl]      # the figures, by file and by test

As a pytest plugin, each test runs with its pytest process in a fresh cgroup of the v1 `cpuacct`
hierarchy, so every process the test starts (servers, workers, sandboxes, scorers: the runner's
own cgroups are `pids` and `memory` only) is counted in it, wherever it is reparented to. The
usage is read when the session ends, so a process that outlives its test (a session fixture's
server and worker) counts with the test that started it. Each session replaces the last one's
figures. `time`, `os.times()` and xdist's durations all miss most of this: a sandbox's processes
are not waited for by the test. Needs root and the cpuacct hierarchy (the development and CI
machines have both); without them the plugin stops the session with the reason rather than report
nothing.
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path("/sys/fs/cgroup/cpuacct/suite-profile")
OUT = Path(os.environ.get("SUITE_PROFILE_OUT", "var/suite-profile.jsonl"))
_numbers = itertools.count()
_tests: list[dict[str, Any]] = []


def pytest_configure(config: pytest.Config) -> None:
    try:
        ROOT.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise pytest.UsageError(f"bench.suite_profile needs root and cgroup v1 cpuacct: {exc}") from exc
    if not hasattr(config, "workerinput"):  # the session's first process (xdist's controller or alone)
        OUT.unlink(missing_ok=True)  # this session's rows only; its test processes append theirs


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    group = ROOT / f"{os.getpid()}-{next(_numbers)}"
    group.mkdir()
    (group / "cgroup.procs").write_text(str(os.getpid()))  # the pytest process and all it starts
    started = time.monotonic()
    yield
    _tests.append({"id": item.nodeid, "group": str(group), "wall_s": round(time.monotonic() - started, 2)})


def pytest_unconfigure(config: pytest.Config) -> None:
    if not _tests:
        return
    (ROOT / "cgroup.procs").write_text(str(os.getpid()))  # out of the last test's group
    OUT.parent.mkdir(parents=True, exist_ok=True)
    with OUT.open("a") as out:
        for test in _tests:
            group = Path(test.pop("group"))
            test["cpu_s"] = round(int((group / "cpuacct.usage").read_text()) / 1e9, 2)
            out.write(json.dumps(test) + "\n")
            with contextlib.suppress(OSError):  # a process of it still runs: the group stays
                group.rmdir()


def summary(rows: list[dict[str, Any]], top: int = 25) -> list[str]:
    """The total, the files by CPU (with the running share) and the costliest tests."""
    total = sum(row["cpu_s"] for row in rows)
    by_file: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0.0, 0])
    for row in rows:
        figures = by_file[row["id"].split("::")[0]]
        figures[0] += row["cpu_s"]
        figures[1] += row["wall_s"]
        figures[2] += 1
    lines = [f"{len(rows)} tests, {total:.0f} CPU-s in all", "", "CPU-s  wall-s  tests  share  file"]
    running = 0.0
    for name, (cpu, wall, count) in sorted(by_file.items(), key=lambda item: -item[1][0])[:top]:
        running += cpu
        lines.append(f"{cpu:6.1f} {wall:7.1f} {count:6.0f} {running / total:6.0%}  {name}")
    lines += ["", "CPU-s  wall-s  test"]
    for row in sorted(rows, key=lambda row: -row["cpu_s"])[:top]:
        lines.append(f"{row['cpu_s']:6.1f} {row['wall_s']:7.1f}  {row['id']}")
    return lines


def main() -> None:
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else OUT
    if not path.is_file():
        print(f"no profile at {path}; make one with: .venv/bin/pytest -q -n 2 -p bench.suite_profile")
        return
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    print("\n".join(summary(rows)))


if __name__ == "__main__":
    main()
