"""Train the baseline train.py at a preset's budget in-process and score it against a unigram model.

    python bench/baseline_cpu.py [--preset cpu] [--train-py harness/baseline/train.py]

No sandbox: the train.py contract is called directly with a TrainContext built like the runner's
(the packed loader over the prepared training tokens, the preset's time budget, startup up to the
compile allowance not counted until the first ctx.log). The trained model is scored with
harness.evaluate.evaluate_bpb on the fixed validation rows, and the unigram model's bpb (see
unigram_bpb.py) is printed next to it as the reference measured in the same run. Figures are
noisy on a shared machine.
"""

from __future__ import annotations

import argparse
import importlib.util
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import torch
from unigram_bpb import unigram_bpb

from harness.config import HarnessSettings, load_settings
from harness.context import Batch, TrainContext
from harness.data.tokens import open_token_dir
from harness.evaluate import evaluate_bpb
from harness.loader import packed_batches
from harness.prepare import prepare

BASELINE = Path(__file__).resolve().parents[1] / "harness" / "baseline" / "train.py"


def load_train_py(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location("candidate_train", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"{path}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def train_and_score(train_py: Path, settings: HarnessSettings) -> dict[str, float]:
    paths = prepare(settings, progress=False)
    bos_id = open_token_dir(paths.train_dir).bos_id
    device = torch.device("cpu")
    module = load_train_py(train_py)
    started = time.monotonic()
    first_log: list[float] = []
    steps: list[int] = []
    losses: list[float] = []
    rates: list[float] = []
    tokens = [0]

    def time_left() -> float:
        lifetime = time.monotonic() - started
        startup = min(first_log[0] if first_log else lifetime, settings.compile_allowance)
        return settings.time_budget - max(0.0, lifetime - startup)

    def log(step: int, loss: float, **extra: float) -> None:
        if not first_log:
            first_log.append(time.monotonic() - started)
        steps.append(step)
        losses.append(loss)
        rates.append(extra.get("tokens_per_s", 0.0))

    def batches(batch_size: int) -> Iterator[Batch]:
        for inputs, targets in packed_batches(
            paths.train_dir, batch_size, settings.seq_len, bos_id, device, settings.seed
        ):
            tokens[0] += inputs.numel()
            yield inputs, targets

    ctx = TrainContext(
        device=device,
        vocab_size=settings.vocab_size,
        seq_len=settings.seq_len,
        time_budget=settings.time_budget,
        seed=settings.seed,
        bos_id=bos_id,
        peak_flops=None,
        _batches=batches,
        _time_left=time_left,
        _log=log,
    )
    model = module.build_model(ctx)
    module.train(model, ctx)
    trained = settings.time_budget - time_left()
    score = evaluate_bpb(model, paths.val_dir, device, settings.eval_batch_rows)
    tail = losses[-10:]
    return {
        "val_bpb": score,
        "training_seconds": trained,
        "startup_seconds": first_log[0] if first_log else float("nan"),
        "steps": float(len(steps)),
        "tokens": float(tokens[0]),
        "final_loss": sum(tail) / max(1, len(tail)),
        "tokens_per_s": sum(rates[1:]) / max(1, len(rates) - 1),
        "params": float(sum(p.numel() for p in model.parameters())),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="cpu", help="settings preset (default cpu)")
    parser.add_argument("--train-py", type=Path, default=BASELINE, help="the train.py to run")
    args = parser.parse_args()
    settings = load_settings(args.preset)
    reference, _ = unigram_bpb(args.preset)
    result = train_and_score(args.train_py, settings)
    print(
        f"train.py {args.train_py} preset {args.preset} (budget {settings.time_budget:.0f} s, "
        f"torch threads {torch.get_num_threads()})"
    )
    print(
        f"  params {result['params'] / 1e6:.2f}M, steps {result['steps']:.0f}, "
        f"tokens {result['tokens']:,.0f}, "
        f"{result['tokens_per_s']:,.0f} tokens/s, trained {result['training_seconds']:.1f} s "
        f"(+{result['startup_seconds']:.1f} s startup), final train loss {result['final_loss']:.3f}"
    )
    print(
        f"  val_bpb {result['val_bpb']:.4f}  unigram val_bpb {reference:.4f}  "
        f"ratio {result['val_bpb'] / reference:.3f}"
    )


if __name__ == "__main__":
    main()
