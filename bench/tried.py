"""Has this been tried? What the random agent gains by skipping values already measured.

    python bench/tried.py [--seeds 1,2,3] [--count 6] [--steps 40]

For every seed, two arms on the same start, one after the other (their order alternates from one
seed to the next, so that a machine getting busier does not favour one arm):
- `skip`: the random agent as shipped: before submitting, it asks the server whether the draw
  was tried (POST /similar) and draws again if so (agent/random_agent.py);
- `no skip`: the same agent with the check off (`--no-skip-tried`).
Each arm is a fresh project: a real server (`autoresearch serve`, SQLite), one real sandboxed CPU
worker on the `test` preset, and the agent (in this process, through the SDK) with the seed's
random draws, `--count` experiments, one at a time (each starts from the best of the decisions
before it). The baseline is a bigram trained for `--steps` steps (testkit/candidates.py),
whose one constant is its learning rate, so that its score depends on the learning rate and the
run's seed, not on how busy the machine is. Decisions use the greedy rule (one run each), so the
same number of experiments is the same number of runs; identical train.py files are not run
again, and each arm's runs are counted and printed.

Printed per seed and arm: the best val_bpb reached, the baseline's (the reference, measured in
the same project), the improvement, the runs and the draws skipped. The summary is the worst
case: in how many seeds the skip arm ended lower, and the smallest and largest difference.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the process helpers of the worker tests

from agent.random_agent import run_random_agent
from client import Client
from harness.config import HarnessSettings, load_settings
from harness.prepare import prepare
from testkit.candidates import bigram_fixed_steps
from testkit.processes import InitialisedProject, init_project, serve

# Far below the bigram's best learning rate (about 0.15-0.25 at 40 steps: 0.05 scores 3.57, 0.15
# 2.86, 0.4 3.04, measured when this bench was written), so that a run of `--count` experiments
# cannot exhaust the search and how the draws are spent shows.
BASELINE_LR = 0.01
# Long enough that the bigram always trains all its steps (it stops early when less than 2 s are
# left), however busy the machine: its score then depends only on its learning rate and seed.
TIME_BUDGET_S = 20.0


@dataclass(frozen=True)
class Arm:
    seed: int
    skip: bool
    baseline: float  # val_bpb of the baseline's run
    best: float  # val_bpb of the best at the end
    runs: int  # experiments the worker ran, the baseline's included
    skipped: int  # draws the agent did not submit because they were tried
    seconds: float

    @property
    def name(self) -> str:
        return "skip" if self.skip else "no skip"


def run_arm(
    initialised: InitialisedProject,
    folder: Path,
    settings: HarnessSettings,
    seed: int,
    skip: bool,
    count: int,
) -> Arm:
    folder.mkdir()
    project = serve(initialised.copy_to(folder), settings, lease_seconds=60.0)
    started = time.monotonic()
    said: list[str] = []
    try:
        project.worker("bench")
        with Client(project.url, project.agent_token) as client:
            baseline = project.final(1, timeout=300)
            run_random_agent(
                client, random.Random(seed), said.append, count=count, poll_s=0.3, skip_tried=skip
            )
            best = client.best()
            runs = sum(1 for e in client.iter_search(limit=200) if e.valid_runs > 0)
    finally:
        project.close()
    if baseline.val_bpb is None or best.val_bpb is None:
        raise SystemExit(f"seed {seed}: the baseline or the best has no val_bpb (see {folder})")
    return Arm(
        seed=seed,
        skip=skip,
        baseline=baseline.val_bpb,
        best=best.val_bpb,
        runs=runs,
        skipped=sum(1 for line in said if line.startswith("skipping ")),
        seconds=time.monotonic() - started,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", default="1,2,3", help="comma-separated agent seeds (default 1,2,3)")
    parser.add_argument("--count", type=int, default=6, help="experiments per arm (default 6)")
    parser.add_argument("--steps", type=int, default=40, help="training steps of the bigram (default 40)")
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    settings = load_settings(
        "test", data_source="speeches", data_dir=ROOT / "var" / "test-data", time_budget=TIME_BUDGET_S
    )
    prepare(settings, progress=False)
    arms: list[Arm] = []
    with tempfile.TemporaryDirectory(prefix="bench-tried-") as tmp:
        root = Path(tmp)
        (root / "init").mkdir()
        initialised = init_project(root / "init", settings, bigram_fixed_steps(BASELINE_LR, args.steps))
        print("seed  arm      baseline   best       improvement  runs  skipped  seconds", flush=True)
        for index, seed in enumerate(seeds):
            order = (True, False) if index % 2 == 0 else (False, True)
            for skip in order:
                arm = run_arm(initialised, root / f"{seed}-{int(skip)}", settings, seed, skip, args.count)
                arms.append(arm)
                print(
                    f"{seed:<5} {arm.name:<8} {arm.baseline:.6f}   {arm.best:.6f}   "
                    f"{arm.baseline - arm.best:+.6f}    {arm.runs:<5} {arm.skipped:<8} {arm.seconds:.0f}",
                    flush=True,
                )
    differences = []
    for seed in seeds:
        skipping = next(a for a in arms if a.seed == seed and a.skip)
        plain = next(a for a in arms if a.seed == seed and not a.skip)
        differences.append(plain.best - skipping.best)  # positive: skipping reached a lower best
    lower = sum(1 for d in differences if d > 0)
    print(
        f"\nbest(no skip) - best(skip), per seed: {', '.join(f'{d:+.6f}' for d in differences)}\n"
        f"skip reached a lower best in {lower} of {len(seeds)} seeds; "
        f"worst {min(differences):+.6f}, best {max(differences):+.6f}, "
        f"mean {statistics.fmean(differences):+.6f}"
    )


if __name__ == "__main__":
    main()
