"""What a model's startup in the score phase costs, in tokens of its own training, on this CPU.

    python bench/startup_cost.py [--sizes 2x128,4x256,8x512,12x768] [--repeats 3]

The score phase's startup allowance on a CPU is STARTUP_TOKENS tokens of the run's own training
(harness.runner.scoring.score_budget), at least CPU_STARTUP_MIN_S. This measures both sides with the
baseline's GPT at several sizes (depth x width, the `cpu` preset's sequence length and vocabulary),
each in a fresh process on one thread, in CPU seconds: the startup (build_model's construction and
initialisation, the safetensors load and load_state_dict, as harness.runner.sandboxed.model_entry does it) and
a training step (forward, backward and an AdamW step on a micro-batch of the `cpu` preset's shape)
per token. Their ratio is the startup in training tokens; the worst of `--repeats` is printed beside
STARTUP_TOKENS. Also timed in fresh processes: importing a train.py that loads libraries an honest
one may (torch's compiler, torch.distributed's tensors) beside CPU_STARTUP_MIN_S, cold and after
harness.runner.preload has imported what it loaded, as the score processes do before their clock.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from harness.runner.scoring import score_budget

ROOT = Path(__file__).resolve().parents[1]
VOCAB, SEQ_LEN, HEAD_DIM, MICRO_BATCH = 4096, 256, 64, 4

MEASURE = """
import json, resource, sys
import torch, safetensors.torch
sys.path.insert(0, {baseline!r})
import train as baseline
import torch.nn.functional as F

def cpu():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime

torch.set_num_threads(1)
what, depth, width, path = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
if what == "train":
    model = baseline.GPT({vocab}, {seq_len}, depth, width, {head_dim})
    model.init_weights()
    safetensors.torch.save_file({{k: v.contiguous() for k, v in model.state_dict().items()}}, path)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    tokens = torch.randint(0, {vocab}, ({batch}, {seq_len}))
    for step in range(4):  # the first step is left out: it allocates what later steps reuse
        if step == 1:
            started = cpu()
        logits = model(tokens)
        F.cross_entropy(logits.flatten(0, 1), tokens.flatten()).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    params = sum(p.numel() for p in model.parameters())
    print(json.dumps({{"params": params, "per_token": (cpu() - started) / (3 * {batch} * {seq_len})}}))
elif what == "startup":
    started = cpu()
    torch.manual_seed(0)
    model = baseline.GPT({vocab}, {seq_len}, depth, width, {head_dim})
    model.init_weights()
    torch.nn.Module.load_state_dict(model, safetensors.torch.load_file(path), strict=True)
    print(json.dumps({{"startup": cpu() - started}}))
else:  # importing LIBRARY_USER: cold (reporting what it loaded), or after preloading the names at `path`
    import importlib.util
    from harness.runner import preload
    names = json.loads(open(path).read()) if what == "preloaded" else []
    preload.load(names)
    before = set(sys.modules)
    started = cpu()
    spec = importlib.util.spec_from_file_location("train", {library_user!r})
    spec.loader.exec_module(importlib.util.module_from_spec(spec))
    print(json.dumps({{"import": cpu() - started, "loaded": preload.reported(before, set())}}))
"""
# A train.py head that loads libraries an honest one may: torch's compiler (a setting and a helper
# decorated with torch.compile) and torch.distributed's tensors.
LIBRARY_USER = """
import torch
import torch._inductor.config
import torch.distributed.tensor

torch._inductor.config.coordinate_descent_tuning = True


@torch.compile
def doubled(x):
    return 2 * x
"""


def measure(what: str, depth: int, width: int, path: Path) -> dict[str, Any]:
    """One measurement in a fresh process; `path` is the weights file, or the names file for an
    import."""
    script = MEASURE.format(
        baseline=str(ROOT / "harness" / "baseline"),
        vocab=VOCAB,
        seq_len=SEQ_LEN,
        head_dim=HEAD_DIM,
        batch=MICRO_BATCH,
        library_user=str(path.parent / "library_user.py"),
    )
    command = [sys.executable, "-c", script, what, str(depth), str(width), str(path)]
    done = subprocess.run(command, capture_output=True, text=True, check=True, cwd=ROOT)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="2x128,4x256,8x512,12x768")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print(f"STARTUP_TOKENS {score_budget.STARTUP_TOKENS}, CPU_STARTUP_MIN_S {score_budget.CPU_STARTUP_MIN_S}")
    worst_ratio = 0.0
    with tempfile.TemporaryDirectory() as scratch:
        for size in args.sizes.split(","):
            depth, width = (int(part) for part in size.split("x"))
            weights = Path(scratch) / f"{size}.safetensors"
            ratios, startups = [], []
            for _ in range(args.repeats):
                trained = measure("train", depth, width, weights)
                startup = measure("startup", depth, width, weights)["startup"]
                startups.append(startup)
                ratios.append(startup / trained["per_token"])
            worst_ratio = max(worst_ratio, *ratios)
            print(
                f"{size}: {trained['params'] / 1e6:.1f} M params, startup {min(startups):.3f}-"
                f"{max(startups):.3f} CPU s = {min(ratios):.0f}-{max(ratios):.0f} training tokens"
            )
        print(
            f"worst startup {worst_ratio:.0f} training tokens: STARTUP_TOKENS is "
            f"{score_budget.STARTUP_TOKENS / worst_ratio:.1f}x that"
        )
        (Path(scratch) / "library_user.py").write_text(LIBRARY_USER)
        names = Path(scratch) / "names.json"
        cold, preloaded = [], []
        for _ in range(args.repeats):
            first = measure("cold", 0, 0, names)
            names.write_text(json.dumps(first["loaded"]))
            cold.append(first["import"])
            preloaded.append(measure("preloaded", 0, 0, names)["import"])
    print(
        f"importing a train.py that loads torch's compiler and torch.distributed.tensor: "
        f"{min(cold):.2f}-{max(cold):.2f} CPU s ({max(cold) / score_budget.CPU_STARTUP_MIN_S:.1f}x "
        f"CPU_STARTUP_MIN_S), after preloading the {len(first['loaded'])} modules it loaded: "
        f"{min(preloaded):.3f}-{max(preloaded):.3f}"
    )


if __name__ == "__main__":
    main()
