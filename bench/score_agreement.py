"""The honest baseline through the score phase's checks: agreement to the tolerance, time to the bound.

    python bench/score_agreement.py [--preset test] [--runs 20] [--variants float32,bf16]

Runs harness/baseline/train.py through harness.runner.run_experiment in the real sandbox, `--runs`
times per variant, back to back as a worker does (keep_warm): `float32` is the baseline as it is
(on a CPU without fast bf16 it trains and scores in float32); `bf16` forces bf16 autocast in
training and runs its forward under bf16 autocast when scored too. For every run it prints the
status and what the scorer measured (harness.runner.scoring.agreement and score_budget, from the run's
log): the largest difference between two scorings of a prefix and the lean of each group, in
nats, and how much of its bound each model process used. The figures justify the tolerance and
the bound in docs/runner.md: an honest run must stay far inside both, and never be invalid.
"""

from __future__ import annotations

import argparse
import re
import tempfile
from pathlib import Path

import torch  # noqa: F401  (a worker process has it loaded before its first experiment)

from harness.config import load_settings
from harness.prepare import prepare
from harness.runner import RunRequest, close_warm_sandbox, run_experiment
from harness.runner.scoring.agreement import LEAN_FRACTION, tolerance_for

BASELINE = Path(__file__).resolve().parents[1] / "harness" / "baseline" / "train.py"
CPU_SETTINGS = "device_batch=4, total_batch_tokens=4 * 256, bf16=None"
AUTOCAST_FORWARD = """

_float_forward = GPT.forward


def _bf16_forward(self, idx):
    with torch.autocast(device_type=idx.device.type, dtype=torch.bfloat16):
        return _float_forward(self, idx)


GPT.forward = _bf16_forward
"""
GROUP = re.compile(r"(repeat|probe|cut|shape) (\d+) positions, max ([^,]+), lean ([^;\n]+)")
# As harness.runner.scoring.scorer.timing_note writes it: seconds, or CPU seconds on a CPU.
PROCESS = re.compile(
    r"(eval|probe) ran ([\d.]+) (?:CPU )?s \(start ([\d.]+), batches ([\d.]+)\) of ([\d.]+) (?:CPU )?s"
)
# Up to the first answer: what an honest process used, of what the bound allowed by then (what a
# model that trains before its first answer could hide is the difference).
FIRST_ANSWER = re.compile(r"(eval|probe) ran .*?its first answer at ([\d.]+) of ([\d.]+)")


def variant(name: str, folder: Path) -> Path:
    if name == "float32":
        return BASELINE
    text = BASELINE.read_text()
    if CPU_SETTINGS not in text:
        raise SystemExit(f"{BASELINE}: the cpu DeviceSettings changed; update CPU_SETTINGS in this bench")
    path = folder / "train_bf16.py"
    path.write_text(
        text.replace(CPU_SETTINGS, CPU_SETTINGS.replace("bf16=None", "bf16=True")) + AUTOCAST_FORWARD
    )
    return path


def margin(measured: float, limit: float) -> str:
    """How far under its limit a measured difference stayed."""
    return "exactly 0" if measured == 0 else f"{limit / measured:.3g}x under its limit"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="test")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--variants", default="float32,bf16")
    parser.add_argument("--data-dir", type=Path, help="prepared data folder (default: the preset's)")
    args = parser.parse_args()
    settings = load_settings(args.preset, **({"data_dir": args.data_dir} if args.data_dir else {}))
    prepare(settings, progress=False)
    tolerance = tolerance_for("cpu")
    lean_limit = LEAN_FRACTION * tolerance
    print(
        f"preset {args.preset}: budget {settings.time_budget:g} s, {settings.eval_tokens:,} eval tokens, "
        f"batch {settings.eval_batch_rows} rows; tolerance {tolerance:g} nats, lean limit "
        f"{lean_limit:.3g}"
    )
    with tempfile.TemporaryDirectory() as folder:
        for name in args.variants.split(","):
            path = variant(name, Path(folder))
            statuses: dict[str, int] = {}
            worst, lean, across, share = 0.0, 0.0, 0.0, {"eval": 0.0, "probe": 0.0}
            for run in range(1, args.runs + 1):
                result = run_experiment(RunRequest(path, settings, keep_warm=True))
                statuses[result.status] = statuses.get(result.status, 0) + 1
                found = GROUP.findall(result.log_tail)
                groups = [g for g in found if g[0] != "shape"]  # between batches of the same size
                run_across = max((float(g[2]) for g in found if g[0] == "shape"), default=0.0)
                across = max(across, run_across)
                processes = PROCESS.findall(result.log_tail)
                if not groups:
                    print(f"{name} run {run}: {result.status} {result.error_class}, not scored", flush=True)
                    continue
                run_worst = max(float(g[2]) for g in groups)
                run_lean = max(abs(float(g[3])) for g in groups)
                worst, lean = max(worst, run_worst), max(lean, run_lean)
                if len(processes) != 2:
                    raise SystemExit(f"{name} run {run}: no score-phase timing in its log; update PROCESS")
                for label, used, _start, _batches, bound in processes:
                    share[label] = max(share[label], float(used) / float(bound))
                timing = ", ".join(f"{p[0]} {p[1]} s (start {p[2]}) of {p[4]} s" for p in processes)
                firsts = FIRST_ANSWER.findall(result.log_tail)
                timing += "; first answers: " + ", ".join(f"{f[0]} {f[1]} of {f[2]} s" for f in firsts)
                print(
                    f"{name} run {run}: {result.status} {result.error_class or ''} val_bpb {result.val_bpb}; "
                    f"{sum(int(g[1]) for g in groups)} positions, max |d| {run_worst:.3g} nats "
                    f"(tolerance {tolerance:g}), max |mean d| {run_lean:.3g} (limit {lean_limit:.3g}); "
                    f"a row alone vs in a full batch: max |d| {run_across:.3g}; {timing}",
                    flush=True,
                )
            print(
                f"{name}: {args.runs} runs {statuses}; largest |d| {worst:.3g} nats "
                f"({margin(worst, tolerance)}), "
                f"largest |mean d| {lean:.3g} ({margin(lean, lean_limit)}); a row alone vs in a full "
                f"batch (batch_variant beyond the tolerance): largest |d| {across:.3g}; "
                "most of its bound used: "
                f"eval {share['eval']:.0%}, probe {share['probe']:.0%}"
            )
    close_warm_sandbox()


if __name__ == "__main__":
    main()
