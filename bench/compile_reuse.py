"""Compile once per train.py: the startup of a run that reuses its train.py's compile cache, against
a fresh compile in the same round, in the real sandbox.

    python bench/compile_reuse.py [--preset test] [--rounds 3] [--budget 5]

The candidate is the baseline train.py with its CPU settings compiled
(`DEVICE_SETTINGS["cpu"]`, compile=True), run through harness.runner.run_experiment with a
compile cache folder, as a worker runs it. Each round, in a new cache folder: `first` (an empty
cache: it compiles, and its cache is kept), `again` (the same file: it starts from that cache) and
`other` (the same file with one comment more: another train.py, so an empty cache, a fresh
compile: the reference). Prints each run's startup (`startup_seconds`: from the sandbox's `go` to
the first data request, the compile included) and again / other. Issue 28's target is on a GPU
(a second run's startup at most 10 s, 29-34 s today); on a CPU this shows that the cache reaches
the sandbox and what it saves there.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from harness.config import load_settings
from harness.prepare import prepare
from harness.runner import RunRequest, close_warm_sandbox, run_experiment

BASELINE = Path(__file__).resolve().parents[1] / "harness" / "baseline" / "train.py"
EAGER = "bf16=None, compile=False"


def compiled_baseline() -> str:
    source = BASELINE.read_text()
    if source.count(EAGER) != 1:
        raise SystemExit(f"{BASELINE}: its cpu settings no longer read {EAGER!r}; update this bench")
    return source.replace(EAGER, "bf16=None, compile=True")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="test")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--budget", type=float, default=5.0, help="training seconds per run")
    args = parser.parse_args()
    settings = load_settings(args.preset)
    prepare(settings, progress=False)
    settings = settings.model_copy(update={"time_budget": args.budget, "compile_allowance": 600.0})
    ratios = []
    with tempfile.TemporaryDirectory(prefix="compile-reuse-") as scratch:
        root = Path(scratch)
        source = compiled_baseline()
        for number in range(1, args.rounds + 1):
            caches = root / f"caches-{number}"
            files = {"first": source, "again": source, "other": f"{source}\n# round {number}\n"}
            startup = {}
            for name, text in files.items():
                path = root / f"{name}-{number}.py"
                path.write_text(text)
                result = run_experiment(RunRequest(path, settings, compile_cache=caches, seed=number))
                if result.status != "ok" or result.startup_seconds is None:
                    raise SystemExit(f"round {number}, {name}: {result.status}\n{result.log_tail[-3000:]}")
                startup[name] = result.startup_seconds
            ratios.append(startup["again"] / startup["other"])
            print(
                f"round {number}: startup first {startup['first']:.1f} s, again (cached) "
                f"{startup['again']:.1f} s, other (fresh compile) {startup['other']:.1f} s: "
                f"again / other = {ratios[-1]:.2f}",
                flush=True,
            )
    close_warm_sandbox()
    print(f"worst of {len(ratios)} rounds: again / other = {max(ratios):.2f}")


if __name__ == "__main__":
    main()
