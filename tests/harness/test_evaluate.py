"""evaluate_bpb: the harness's own cross-entropy, checked against an independent float64 computation."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

from harness.config import HarnessSettings
from harness.data.errors import DataError
from harness.data_layout import PreparedPaths, read_manifest
from harness.evaluate import bpb, evaluate_bpb, load_eval_rows, sum_nats_and_bytes
from harness.tokenizer import load_token_bytes


class TinyLM(torch.nn.Module):
    """A small causal model (embedding, causal mean of the past, MLP, head) with random weights."""

    def __init__(self, vocab: int, dim: int = 32) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embed = torch.nn.Embedding(vocab, dim)
        self.mlp = torch.nn.Sequential(
            torch.nn.Linear(dim, 4 * dim), torch.nn.GELU(), torch.nn.Linear(4 * dim, dim)
        )
        self.head = torch.nn.Linear(dim, vocab)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.embed(idx)
        x = x.cumsum(dim=1) / torch.arange(1, idx.shape[1] + 1, device=idx.device)[None, :, None]
        return self.head(x + self.mlp(x)) * 3.0


def float64_bpb(logits: np.ndarray, targets: np.ndarray, target_bytes: np.ndarray) -> float:
    """Independent reference: numpy float64 log-softmax, straight from the definition."""
    logits = logits.astype(np.float64)
    peak = logits.max(axis=-1, keepdims=True)
    log_norm = peak[..., 0] + np.log(np.exp(logits - peak).sum(axis=-1))
    picked = np.take_along_axis(logits, targets[..., None], axis=-1)[..., 0]
    counted = target_bytes > 0
    return float((log_norm - picked)[counted].sum() / (math.log(2) * target_bytes[counted].sum()))


def test_evaluate_bpb_matches_an_independent_float64_computation(
    test_data: tuple[HarnessSettings, PreparedPaths],
) -> None:
    settings, paths = test_data
    vocab = read_manifest(settings)["vocab_size"]
    model = TinyLM(vocab)
    got = evaluate_bpb(model, paths.val_dir, torch.device("cpu"), batch_rows=5)
    inputs = np.load(paths.val_dir / "inputs.npy").astype(np.int64)
    targets = np.load(paths.val_dir / "targets.npy").astype(np.int64)
    target_bytes = np.load(paths.val_dir / "target_bytes.npy")
    with torch.no_grad():
        logits = model(torch.from_numpy(inputs)).numpy()
    expected = float64_bpb(logits, targets, target_bytes)
    assert abs(got - expected) / expected < 1e-6
    assert 0.5 < got < 20  # a random model: a few bits per byte, neither 0 nor absurd


def test_eval_rows_are_the_prepared_targets_with_their_byte_lengths(
    test_data: tuple[HarnessSettings, PreparedPaths],
) -> None:
    settings, paths = test_data
    manifest = read_manifest(settings)
    rows = load_eval_rows(paths.val_dir)
    assert rows.inputs.shape == (settings.eval_tokens // settings.seq_len, settings.seq_len)
    assert torch.equal(rows.inputs[:, 1:], rows.targets[:, :-1])
    assert bool((rows.inputs[:, 0] == manifest["bos_id"]).all())
    table = torch.from_numpy(load_token_bytes(paths.tokenizer_dir)).long()
    assert torch.equal(rows.target_bytes, table[rows.targets])
    assert bool((rows.target_bytes[rows.targets == manifest["bos_id"]] == 0).all())
    assert bool((rows.target_bytes[rows.targets != manifest["bos_id"]] > 0).all())


def test_the_result_does_not_depend_on_batching(test_data: tuple[HarnessSettings, PreparedPaths]) -> None:
    settings, paths = test_data
    model = TinyLM(read_manifest(settings)["vocab_size"])
    scores = {evaluate_bpb(model, paths.val_dir, torch.device("cpu"), batch_rows=n) for n in (1, 7, 1000)}
    assert max(scores) - min(scores) < 1e-9


def test_special_token_targets_count_neither_nats_nor_bytes() -> None:
    generator = torch.Generator().manual_seed(1)
    logits = torch.randn(2, 5, 11, generator=generator)
    targets = torch.randint(0, 10, (2, 5), generator=generator)
    target_bytes = torch.randint(1, 4, (2, 5), generator=generator)
    target_bytes[0, 2] = 0  # a special-token target
    nats, nbytes = sum_nats_and_bytes(logits, targets, target_bytes)
    changed = logits.clone()
    changed[0, 2] = torch.randn(11, generator=generator) * 50  # whatever the model says there...
    assert sum_nats_and_bytes(changed, targets, target_bytes) == (pytest.approx(nats, rel=1e-12), nbytes)
    assert nbytes == int(target_bytes.sum())
    expected = float64_bpb(logits.numpy(), targets.numpy(), target_bytes.numpy())
    assert bpb(nats, nbytes) == pytest.approx(expected, rel=1e-9)


def test_a_perfect_model_scores_zero_and_uniform_scores_log2_vocab_per_token() -> None:
    targets = torch.tensor([[1, 2, 3]])
    target_bytes = torch.tensor([[1, 1, 1]])
    sure = torch.full((1, 3, 4), -1e4)
    sure[0, torch.arange(3), targets[0]] = 1e4
    assert bpb(*sum_nats_and_bytes(sure, targets, target_bytes)) == 0.0
    uniform = torch.zeros(1, 3, 4)
    assert bpb(*sum_nats_and_bytes(uniform, targets, target_bytes)) == pytest.approx(2.0, rel=1e-12)


@pytest.mark.parametrize(
    ("logits", "targets", "message"),
    [
        (torch.zeros(2, 3), torch.zeros(2, 3, dtype=torch.long), "must be"),
        (torch.zeros(1, 3, 4), torch.zeros(1, 2, dtype=torch.long), "must be"),
        (torch.zeros(1, 2, 4), torch.tensor([[0, 4]]), "vocabulary"),
        (torch.full((1, 2, 4), float("nan")), torch.zeros(1, 2, dtype=torch.long), "NaN"),
        (torch.zeros(1, 2, 4, dtype=torch.long), torch.zeros(1, 2, dtype=torch.long), "floating"),
    ],
)
def test_bad_logits_are_rejected(logits: torch.Tensor, targets: torch.Tensor, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        sum_nats_and_bytes(logits, targets, torch.ones_like(targets))


def test_missing_eval_rows_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"inputs\.npy"):
        load_eval_rows(tmp_path)


@pytest.mark.parametrize("sureness", [0.0, 8.0, 30.0])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_precision_holds_from_unsure_to_nearly_certain_models(sureness: float, dtype: torch.dtype) -> None:
    """A nearly certain model has tiny per-token losses: 1 + rest must not round the rest away."""
    generator = torch.Generator().manual_seed(3)
    logits = torch.randn(4, 64, 512, generator=generator) * 4
    targets = torch.randint(0, 512, (4, 64), generator=generator)
    logits.scatter_add_(2, targets[..., None], torch.full((4, 64, 1), sureness))
    logits = logits.to(dtype)
    target_bytes = torch.randint(1, 4, (4, 64), generator=generator)
    original = logits.clone()
    nats, nbytes = sum_nats_and_bytes(logits, targets, target_bytes)
    expected = float64_bpb(logits.double().numpy(), targets.numpy(), target_bytes.numpy())
    assert abs(bpb(nats, nbytes) - expected) / expected < 1e-6
    assert torch.equal(logits, original)  # a pure function: the input is untouched
