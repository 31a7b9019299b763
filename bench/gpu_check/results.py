"""How one step of the GPU check reports: sections of figures, rewritten as they come in.

A step runs as its own process under a time limit (bench/gpu_check/driver.py). It writes its
result file after every figure, so whatever it measured before it failed or was stopped is kept.
Standard library only.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

# The exit status of a step stopped at its time limit (the driver sends SIGTERM).
STOPPED = 143


class Results:
    """The sections of one step's result file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.sections: dict[str, dict[str, Any]] = {}

    def update(self, section: str, **fields: Any) -> None:
        self.sections.setdefault(section, {}).update(fields)
        tmp = self.path.with_name(f".{self.path.name}.tmp")
        tmp.write_text(json.dumps(self.sections, indent=1, default=str))
        os.replace(tmp, self.path)

    def fail_open_sections(self, status: str, error: str) -> None:
        """Give every section that has no status yet this one (the figures in it stay)."""
        for section, fields in list(self.sections.items()):
            if "status" not in fields:
                self.update(section, status=status, error=error)


def _stopped(signum: int, frame: object) -> NoReturn:
    raise SystemExit(STOPPED)


def run_step(sections: tuple[str, ...], body: Callable[[Results, str], None]) -> None:
    """Parse `--mode gpu|cpu --result PATH`, open `sections` and run `body`; a failure or the time
    limit marks the sections still open, keeping what they hold."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--mode", choices=("gpu", "cpu"), required=True)
    parser.add_argument("--result", type=Path, required=True)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, _stopped)
    results = Results(args.result)
    for section in sections:
        results.update(section)
    try:
        body(results, args.mode)
    except SystemExit as exc:
        if exc.code == STOPPED:
            results.fail_open_sections("timed_out", "stopped at the step's time limit")
        raise
    except BaseException:
        results.fail_open_sections("failed", traceback.format_exc(limit=8)[-3000:])
        traceback.print_exc()
        sys.exit(1)
    results.fail_open_sections("failed", "the step ended without reporting this section")
