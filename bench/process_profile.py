"""Where a command's CPU goes, by kind of process: every process on the machine, read from /proc
while the command runs.

    python -m bench.process_profile [--interval 0.25] -- .venv/bin/pytest -q -n 2 --dist loadfile

Every `interval` seconds each process's CPU seconds (user + system, /proc/PID/stat) are read. A
process is known by its pid and start time, so a reused pid is a new process; one already running
when sampling starts counts only what it uses after. What a process uses after its last sample is
missed, and so is a process that lives less than `interval`: the figures are a floor. A process's
kind is the first of KINDS whose marker is in its command line, read when it is first seen.
bench/suite_profile.py answers the other question, which test a process belongs to.
"""

from __future__ import annotations

import argparse
import collections
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from harness.runner.limits import TICKS_PER_S, every_stat

# (marker in the command line, kind), first match wins: the harness's processes before the
# project's commands, and those before the tools that run them.
KINDS = (
    ("harness.runner.scoring.scorer", "scorer"),
    ("harness.runner.sandboxed.model_entry", "model sandbox"),
    ("harness.runner.sandboxed.train_entry", "train sandbox"),
    ("cli.main serve", "server"),
    ("cli.main work", "worker"),
    ("cli.main", "other autoresearch command"),
    ("bench.gpu_check", "GPU check step"),
    ("exec(eval(sys.stdin", "pytest process (xdist)"),
    ("pytest", "pytest"),
    ("postgres", "PostgreSQL"),
    ("chrom", "Chromium"),
    ("slurm", "Slurm"),
    ("munge", "Slurm"),
)


def kind_of(cmdline: str, kinds: Sequence[tuple[str, str]] = KINDS) -> str:
    for marker, kind in kinds:
        if marker in cmdline:
            return kind
    program = cmdline.split(" ", 1)[0]
    return f"other: {Path(program).name}" if program else "other: (no command line)"


@dataclass
class Seen:
    kind: str
    first_cpu_s: float  # when first seen, if it was running before sampling began; else 0
    last_cpu_s: float


def cpu_now() -> dict[tuple[int, str], float]:
    """(pid, start time) -> CPU seconds so far, of every process now."""
    return {
        (pid, fields[19]): (int(fields[11]) + int(fields[12])) / TICKS_PER_S  # utime, stime
        for pid, fields in every_stat()
    }


def command_line(pid: int) -> str:
    """Read once, when a process is first seen (its kind stays what that says)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""  # it ended meanwhile


def profile(
    command: list[str], interval: float, kinds: Sequence[tuple[str, str]] = KINDS
) -> tuple[int, dict[str, list[float]]]:
    """Run `command`, sampling all processes; its exit status and {kind: [CPU-s, processes]}."""
    seen = {key: Seen(kind_of(command_line(key[0]), kinds), cpu_s, cpu_s) for key, cpu_s in cpu_now().items()}
    me = os.getpid()
    child = subprocess.Popen(command)
    while True:
        done = child.poll() is not None
        for key, cpu_s in cpu_now().items():
            if key[0] == me:
                continue
            if key not in seen:
                seen[key] = Seen(kind_of(command_line(key[0]), kinds), 0.0, cpu_s)
            seen[key].last_cpu_s = max(seen[key].last_cpu_s, cpu_s)
        if done:
            break
        time.sleep(interval)
    by_kind: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0])
    for process in seen.values():
        used = process.last_cpu_s - process.first_cpu_s
        if used > 0:
            by_kind[process.kind][0] += used
            by_kind[process.kind][1] += 1
    return child.returncode, dict(by_kind)


def report(by_kind: dict[str, list[float]]) -> list[str]:
    total = sum(cpu_s for cpu_s, _ in by_kind.values())
    lines = [f"{total:.0f} CPU-s seen in all", "", "  CPU-s  share  processes  kind"]
    for kind, (cpu_s, count) in sorted(by_kind.items(), key=lambda item: -item[1][0]):
        lines.append(f"{cpu_s:7.1f} {cpu_s / total if total else 0:6.0%} {count:10.0f}  {kind}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--interval", type=float, default=0.25, help="seconds between samples")
    parser.add_argument("command", nargs="+", help="the command to run (after --)")
    args = parser.parse_args()
    code, by_kind = profile(args.command, args.interval)
    print("\n".join(report(by_kind)))
    sys.exit(code)


if __name__ == "__main__":
    main()
