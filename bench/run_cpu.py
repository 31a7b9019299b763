"""One honest run's CPU, the whole machine's: the yardstick for the host's speed that
docs/benchmarks.md gives beside each test-suite figure.

    python bench/run_cpu.py [--runs 3] [--train-py tests/runner/candidates/good_bigram.py]

Runs the candidate through harness.runner.run_experiment on the `test` preset (the suite's data,
var/test-data, prepared here if missing), in the real sandbox, one run at a time, and prints for
each the CPU seconds of the whole machine while it ran (/proc/stat: user, nice, system, irq,
softirq; so every process counts, the run's four interpreters and anything else) and its wall
seconds. The reference, measured in the same run: a bare `python -c "import torch"`, whose CPU
seconds move with the host's speed as the run's do. Run it with nothing else on the machine.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench.reference, beside this file

from bench.reference import import_torch
from harness.config import load_settings
from harness.prepare import prepare
from harness.runner import RunRequest, run_experiment
from harness.runner.limits import TICKS_PER_S

REPO = Path(__file__).resolve().parents[1]
BUSY_FIELDS = (0, 1, 2, 5, 6)  # user, nice, system, irq, softirq of /proc/stat's first line


def machine_cpu_seconds() -> float:
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    return sum(int(fields[i]) for i in BUSY_FIELDS) / TICKS_PER_S


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--train-py", type=Path, default=REPO / "tests/runner/candidates/good_bigram.py")
    args = parser.parse_args()
    settings = load_settings("test", data_source="speeches", data_dir=REPO / "var" / "test-data")
    prepare(settings, progress=False)
    # A loaded machine's startup must not make the run over_budget: what is measured is its CPU.
    settings = settings.model_copy(update={"compile_allowance": 30.0})
    print(f"reference: import torch {import_torch().cpu_seconds:.2f} CPU-s")
    for run in range(1, args.runs + 1):
        with tempfile.TemporaryDirectory() as work_root:
            cpu, wall = machine_cpu_seconds(), time.monotonic()
            result = run_experiment(RunRequest(args.train_py, settings, work_root=Path(work_root)))
            cpu, wall = machine_cpu_seconds() - cpu, time.monotonic() - wall
        print(
            f"run {run}: {cpu:.2f} CPU-s, {wall:.2f} s, {result.status}, val_bpb {result.val_bpb}, "
            f"trained {result.training_seconds:.2f} s"
        )
    print(f"reference again: import torch {import_torch().cpu_seconds:.2f} CPU-s")


if __name__ == "__main__":
    main()
