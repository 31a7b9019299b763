"""The trusted scorer: holds the validation targets and computes val_bpb from model logits.

Run by the runner as `python -m harness.runner.scorer CONFIG_JSON`, outside any sandbox. It
starts two model sandboxes at once (they import torch while training runs, then wait), and on
`go` (a line on stdin, sent when the weights are ready):

1. the *eval* process gets every validation input row, batch by batch; the scorer applies
   log-softmax and cross-entropy (`harness.evaluate.sum_nats_and_bytes`) and computes bpb;
2. when the eval process is gone, the *probe* process gets a random subset of rows whose suffix
   after a random cut is replaced by other real validation text. Its logits before the cut must
   match the eval process's, otherwise the model looked ahead (or at other rows): `non_causal`.

The probe runs in a fresh process that never coexists with the eval process after `go`, so no
state can be shared between them: a model cannot recognise a probe by having seen the original.
The result is one JSON line on stdout.
"""

from __future__ import annotations

import json
import secrets
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from harness.evaluate import bpb, load_eval_rows, sum_nats_and_bytes
from harness.runner.limits import Limits
from harness.runner.model_process import ModelFailure, ModelJob, ModelProcess

PROBE_ROWS = 16
# Largest total-variation distance between the eval and probe next-token distributions at any
# position before the cut. Honest models differ only by float noise (batching, bf16); a model
# that reads the next token moves most of the probability mass.
CAUSAL_TV_TOLERANCE = 0.05


@dataclass(frozen=True)
class Probe:
    row: int  # the evaluation row it is a variant of
    cut: int  # positions [0, cut) must not change
    tokens: np.ndarray  # [T] the row with its suffix from `cut` replaced


def plan_probes(inputs: np.ndarray, count: int, rng: np.random.Generator) -> list[Probe]:
    """Random rows, each with a random cut and a suffix of real text from another row."""
    rows, seq_len = inputs.shape
    if rows < 2 or seq_len < 2:
        return []
    probes = []
    for row in rng.choice(rows, size=min(count, rows), replace=False).tolist():
        cut = int(rng.integers(1, seq_len))
        for _ in range(8):  # find a donor whose text differs right at the cut
            donor = int(rng.integers(rows - 1))
            donor += donor >= row
            suffix = inputs[donor, 1 : 1 + seq_len - cut]  # skip the donor's BOS
            if suffix[0] != inputs[row, cut]:
                tokens = inputs[row].copy()
                tokens[cut:] = suffix
                probes.append(Probe(row=row, cut=cut, tokens=tokens))
                break
    return probes


def log_probs(logits: torch.Tensor) -> torch.Tensor:
    return torch.log_softmax(logits.double(), dim=-1)


def max_tv_distance(expected: torch.Tensor, seen: torch.Tensor) -> float:
    """Largest total-variation distance between two [positions, V] log-probability tables."""
    return float(0.5 * (expected.exp() - seen.exp()).abs().sum(dim=-1).max())


def received(logits: np.ndarray, device: torch.device, label: str) -> torch.Tensor:
    """The model's logits on the scoring device (on CUDA the loss is computed on the GPU)."""
    tensor = torch.from_numpy(logits).to(device)
    if not bool(torch.isfinite(tensor).all()):
        raise ModelFailure(
            "invalid", "invalid_output", f"score phase ({label}): logits contain NaN or infinity"
        )
    return tensor


def evaluate(
    model: ModelProcess,
    rows: Any,
    batch_rows: int,
    probes: list[Probe],
    device: torch.device,
    deadline: float,
) -> tuple[float, dict[int, torch.Tensor]]:
    """val_bpb over all rows, and the eval log-probabilities before the cut of each probed row."""
    inputs = rows.inputs.numpy()
    probed = {probe.row: probe.cut for probe in probes}
    kept: dict[int, torch.Tensor] = {}
    total_nats, total_bytes = 0.0, 0
    for first in range(0, rows.num_rows, batch_rows):
        logits = received(model.forward(inputs[first : first + batch_rows], deadline), device, model.label)
        part = slice(first, first + batch_rows)
        nats, nbytes = sum_nats_and_bytes(logits, rows.targets[part], rows.target_bytes[part])
        total_nats += nats
        total_bytes += nbytes
        for offset in range(logits.shape[0]):
            if first + offset in probed:
                kept[first + offset] = log_probs(logits[offset, : probed[first + offset]])
    return bpb(total_nats, total_bytes), kept


def probe_causality(
    model: ModelProcess,
    probes: list[Probe],
    expected: dict[int, torch.Tensor],
    batch_rows: int,
    device: torch.device,
    deadline: float,
) -> float:
    """The largest distance seen; raises ModelFailure(non_causal) above the tolerance."""
    worst = 0.0
    for first in range(0, len(probes), batch_rows):
        batch = probes[first : first + batch_rows]
        tokens = np.stack([probe.tokens for probe in batch])
        logits = received(model.forward(tokens, deadline), device, model.label)
        for offset, probe in enumerate(batch):
            distance = max_tv_distance(expected[probe.row], log_probs(logits[offset, : probe.cut]))
            worst = max(worst, distance)
            if distance > CAUSAL_TV_TOLERANCE:
                raise ModelFailure(
                    "invalid",
                    "non_causal",
                    f"non-causal model: changing the tokens from position {probe.cut} on changed the "
                    f"predictions before it (total variation {distance:.3f} > {CAUSAL_TV_TOLERANCE}); "
                    "logits at position t may depend only on tokens 0..t of the same row",
                )
    return worst


def score(
    eval_model: ModelProcess,
    probe_model: ModelProcess,
    rows: Any,
    batch_rows: int,
    device: torch.device,
    timeout: float,
) -> dict[str, Any]:
    """Evaluate, then probe in the other process, once the runner says `go`.

    `score_seconds` is the scoring work itself: forward passes and loss, in both processes; model
    rebuilding, weight loading and process ends are overhead.
    """
    if sys.stdin.readline().strip() != "go":
        return {"status": "aborted"}
    deadline = time.monotonic() + timeout
    probes = plan_probes(rows.inputs.numpy(), PROBE_ROWS, np.random.default_rng(secrets.randbits(64)))
    try:
        eval_model.send(cmd="go")
        eval_model.wait_for("loaded", deadline)
        started = time.monotonic()
        val_bpb, expected = evaluate(eval_model, rows, batch_rows, probes, device, deadline)
        scoring = time.monotonic() - started
        eval_model.close()
        probe_model.send(cmd="go")
        probe_model.wait_for("loaded", deadline)
        started = time.monotonic()
        worst = probe_causality(probe_model, probes, expected, batch_rows, device, deadline)
        scoring += time.monotonic() - started
    except ModelFailure as failure:
        return {"status": failure.status, "error_class": failure.error_class, "error_message": str(failure)}
    return {
        "status": "ok",
        "val_bpb": val_bpb,
        "probe_rows": len(probes),
        "probe_max_tv": worst,
        "score_seconds": scoring,
    }


def run(config: dict[str, Any]) -> dict[str, Any]:
    rows = load_eval_rows(Path(config["val_dir"]))
    batch_rows = config["batch_rows"]
    job = ModelJob(
        candidate=Path(config["candidate"]),
        weights_dir=Path(config["weights_dir"]),
        device=config["device"],
        vocab_size=config["vocab_size"],
        seq_len=int(rows.inputs.shape[1]),
        time_budget=config["time_budget"],
        seed=config["seed"],
        bos_id=config["bos_id"],
        max_rows=batch_rows,
        sandboxed=config["sandboxed"],
        limits=Limits(**config["limits"]),
    )
    models = [ModelProcess(job, "eval"), ModelProcess(job, "probe")]
    try:
        device = torch.device(config["device"])
        result = score(models[0], models[1], rows, batch_rows, device, config["timeout"])
    finally:
        for model in models:
            model.close()
    result["log"] = "".join(
        f"[harness] score phase ({model.label}) output:\n{log}" for model in models if (log := model.log())
    )
    return result


def main() -> None:
    result = run(json.loads(sys.argv[1]))
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
