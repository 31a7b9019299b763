"""Train the baseline train.py at a preset's budget in-process and score it against a unigram model.

    python bench/baseline_cpu.py [--preset cpu] [--train-py PATH] [--set NAME=VALUE ...] [--tokens N]

No sandbox: the train.py contract is called directly with a TrainContext built like the runner's
(the packed loader over the prepared training tokens, the preset's time budget, startup up to the
compile allowance not counted until the first ctx.log). The trained model is scored with
harness.evaluate.evaluate_bpb on the fixed validation rows, and the unigram model's bpb (see
unigram_bpb.py) is printed next to it as the reference measured in the same run.

`--set` changes one of train.py's constants (UPPER_CASE names) or a field of its CPU
DeviceSettings (lower_case names), e.g. `--set depth=4 --set MATRIX_LR=0.02`. `--tokens N` replaces
the wall clock by one that runs out after N training tokens, so that configurations can be
compared independently of the machine's load (used for the sweep in docs/baseline.md). Figures are
noisy on a shared machine.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import importlib.util
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import torch
from unigram_bpb import unigram_bpb

from harness.config import HarnessSettings, load_settings
from harness.context import Batch, TrainContext
from harness.data.tokens import open_token_dir
from harness.evaluate import evaluate_bpb
from harness.loader import packed_batches
from harness.prepare import prepare

BASELINE = Path(__file__).resolve().parents[1] / "harness" / "baseline" / "train.py"


def load_train_py(path: Path, overrides: dict[str, Any]) -> ModuleType:
    """Import train.py from `path` and apply `overrides` (see --set)."""
    spec = importlib.util.spec_from_file_location("candidate_train", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"{path}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    fields = {name: value for name, value in overrides.items() if not name.isupper()}
    for name, value in overrides.items():
        if name.isupper():
            if not hasattr(module, name):
                raise SystemExit(f"--set {name}: {path} has no constant {name}")
            setattr(module, name, value)
    if fields:
        try:
            module.DEVICE_SETTINGS["cpu"] = dataclasses.replace(module.DEVICE_SETTINGS["cpu"], **fields)
        except (AttributeError, KeyError, TypeError) as exc:
            raise SystemExit(f"--set {', '.join(fields)}: not fields of {path}'s CPU DeviceSettings") from exc
    return module


def parse_set(text: str) -> tuple[str, Any]:
    name, sep, value = text.partition("=")
    if not sep or not name.isidentifier():
        raise argparse.ArgumentTypeError(f"{text!r}: expected NAME=VALUE, e.g. MATRIX_LR=0.02")
    try:
        return name, ast.literal_eval(value)
    except (ValueError, SyntaxError) as exc:
        raise argparse.ArgumentTypeError(f"{text!r}: VALUE must be a Python literal") from exc


def train_and_score(
    module: ModuleType, settings: HarnessSettings, tokens_budget: int = 0
) -> dict[str, float]:
    """Train `module` on the preset's data in this process and score it (see the module doc)."""
    paths = prepare(settings, progress=False)
    bos_id = open_token_dir(paths.train_dir).bos_id
    device = torch.device("cpu")
    started = time.monotonic()
    first_log: list[float] = []
    losses: list[float] = []
    tokens = [0]

    def wall_time_left() -> float:
        lifetime = time.monotonic() - started
        startup = min(first_log[0] if first_log else lifetime, settings.compile_allowance)
        return settings.time_budget - max(0.0, lifetime - startup)

    def token_time_left() -> float:
        return settings.time_budget * (1.0 - tokens[0] / tokens_budget)

    def log(step: int, loss: float, **extra: float) -> None:
        if not first_log:
            first_log.append(time.monotonic() - started)
        losses.append(loss)

    def batches(batch_size: int) -> Iterator[Batch]:
        for inputs, targets in packed_batches(
            paths.train_dir, batch_size, settings.seq_len, bos_id, device, settings.seed
        ):
            tokens[0] += inputs.numel()
            yield inputs, targets

    time_left: Callable[[], float] = token_time_left if tokens_budget else wall_time_left
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
    cpu_started, wall_started = time.process_time(), time.monotonic()
    module.train(model, ctx)
    cpu_seconds, wall_seconds = time.process_time() - cpu_started, time.monotonic() - wall_started
    score = evaluate_bpb(model, paths.val_dir, device, settings.eval_batch_rows)
    tail = losses[-10:]
    return {
        "val_bpb": score,
        "wall_seconds": wall_seconds,
        "startup_seconds": first_log[0] if first_log else float("nan"),
        "steps": float(len(losses)),
        "tokens": float(tokens[0]),
        "final_loss": sum(tail) / max(1, len(tail)),
        "tokens_per_s": tokens[0] / wall_seconds,
        # CPU time counts only the time this process ran: less sensitive to other load than wall.
        "tokens_per_cpu_s": tokens[0] / cpu_seconds,
        "params": float(sum(p.numel() for p in model.parameters())),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="cpu", help="settings preset (default cpu)")
    parser.add_argument("--train-py", type=Path, default=BASELINE, help="the train.py to run")
    parser.add_argument("--set", type=parse_set, action="append", default=[], metavar="NAME=VALUE")
    parser.add_argument("--tokens", type=int, default=0, help="budget in training tokens, not seconds")
    args = parser.parse_args()
    settings = load_settings(args.preset)
    module = load_train_py(args.train_py, dict(args.set))
    reference, _ = unigram_bpb(args.preset)
    result = train_and_score(module, settings, args.tokens)
    budget = f"{args.tokens:,} tokens" if args.tokens else f"{settings.time_budget:.0f} s"
    changes = " ".join(f"{name}={value!r}" for name, value in args.set) or "none"
    print(f"train.py {args.train_py} preset {args.preset}, budget {budget}, changes: {changes}")
    print(
        f"  params {result['params'] / 1e6:.2f}M, steps {result['steps']:.0f}, "
        f"tokens {result['tokens']:,.0f} in {result['wall_seconds']:.1f} s "
        f"(+{result['startup_seconds']:.1f} s startup), {result['tokens_per_s']:,.0f} tokens/s, "
        f"{result['tokens_per_cpu_s']:,.0f} tokens/cpu-s, torch threads {torch.get_num_threads()}, "
        f"final train loss {result['final_loss']:.3f}"
    )
    print(
        f"  val_bpb {result['val_bpb']:.4f}  unigram val_bpb {reference:.4f}  "
        f"ratio {result['val_bpb'] / reference:.3f}"
    )


if __name__ == "__main__":
    main()
