"""Finding processes by their command line, to check that sandboxes and workers leave none behind."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterable
from pathlib import Path


def mentioning(text: str, pids: Iterable[str]) -> dict[int, str]:
    """Those of `pids` (pid -> command line) whose command line contains `text`."""
    found = {}
    for pid in pids:
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue  # it ended meanwhile
        if text.encode() in cmdline:
            found[int(pid)] = cmdline.decode(errors="replace")
    return found


def processes_mentioning(text: str) -> dict[int, str]:
    """Live processes (pid -> command line) whose command line contains `text`; not this one."""
    me = str(os.getpid())
    return mentioning(
        text, (entry.name for entry in os.scandir("/proc") if entry.name.isdigit() and entry.name != me)
    )


def children_mentioning(text: str) -> dict[int, str]:
    """This process's own children (pid -> command line) whose command line contains `text`. A few
    files to read, where processes_mentioning reads every process's: a poll stays quick while a test
    beside this one fills /proc (the fork bomb), so it does not miss a child that lives a second."""
    pids = []
    for children in Path(f"/proc/{os.getpid()}/task").glob("*/children"):
        with contextlib.suppress(OSError):  # the thread ended meanwhile
            pids += children.read_text().split()
    return mentioning(text, pids)


def processes_left(text: str, timeout: float = 10.0) -> list[str]:
    """Command lines of processes mentioning `text` that are still there after `timeout`.

    A SIGKILLed sandbox does not leave /proc at once: the kernel ends the processes of its PID
    namespace after its first process, asynchronously. What is left after a few seconds is a leak.
    """
    deadline = time.monotonic() + timeout
    while (left := processes_mentioning(text)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return list(left.values())
