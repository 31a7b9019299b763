"""Finding processes by their command line, to check that sandboxes and workers leave none behind."""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path


def processes_mentioning(text: str) -> dict[int, str]:
    """Live processes (pid -> command line) whose command line contains `text`; not this one."""
    found = {}
    needle = text.encode()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = Path(entry.path, "cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue  # it ended meanwhile
        if needle in cmdline:
            found[int(entry.name)] = cmdline.decode(errors="replace")
    return found


def children_mentioning(text: str) -> list[str]:
    """Command lines of this process's own children that contain `text`. A few files to read, where
    processes_mentioning reads every process's: a poll stays quick while a test beside this one
    fills /proc (the fork bomb), so it does not miss a child that lives a second."""
    found = []
    for children in Path(f"/proc/{os.getpid()}/task").glob("*/children"):
        with contextlib.suppress(OSError):  # the thread ended meanwhile
            for pid in children.read_text().split():
                with contextlib.suppress(OSError):
                    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
                    if text.encode() in cmdline:
                        found.append(cmdline.decode(errors="replace"))
    return found


def processes_left(text: str, timeout: float = 10.0) -> list[str]:
    """Command lines of processes mentioning `text` that are still there after `timeout`.

    A SIGKILLed sandbox does not leave /proc at once: the kernel ends the processes of its PID
    namespace after its first process, asynchronously. What is left after a few seconds is a leak.
    """
    deadline = time.monotonic() + timeout
    while (left := processes_mentioning(text)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return list(left.values())
