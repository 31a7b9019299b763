"""Muon: the orthogonalised update keeps the gradient's singular vectors and equalises its singular
values; the optimizer groups and scales it as documented; every parameter has one optimizer."""

from __future__ import annotations

from types import ModuleType

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.baseline.tiny import VirtualClock, load_baseline, make_ctx

BASELINE = load_baseline()


def matrix_with_spectrum(rows: int, cols: int, condition: float, seed: int) -> tuple[torch.Tensor, ...]:
    """(g, u, v): g = u diag(s) v^T with singular values s spread evenly in log from 1 to 1/condition."""
    generator = torch.Generator().manual_seed(seed)
    k = min(rows, cols)
    u, _ = torch.linalg.qr(torch.randn(rows, k, generator=generator, dtype=torch.float64))
    v, _ = torch.linalg.qr(torch.randn(cols, k, generator=generator, dtype=torch.float64))
    s = torch.logspace(0, -torch.log10(torch.tensor(condition)).item(), k, dtype=torch.float64)
    return ((u * s) @ v.T).float(), u.float(), v.float()


@settings(max_examples=40, deadline=None)
@given(
    rows=st.integers(min_value=2, max_value=48),
    cols=st.integers(min_value=2, max_value=48),
    condition=st.floats(min_value=1.0, max_value=100.0),
    scale=st.floats(min_value=1e-4, max_value=1e4),
    seed=st.integers(min_value=0, max_value=2**31 - 1),
)
def test_orthogonalize_equalises_singular_values_and_keeps_singular_vectors(
    rows: int, cols: int, condition: float, scale: float, seed: int
) -> None:
    g, u, v = matrix_with_spectrum(rows, cols, condition, seed)
    out = BASELINE.orthogonalize((g * scale)[None], BASELINE.MUON_NS_STEPS, torch.float32)[0]
    assert out.shape == g.shape and out.dtype == torch.float32
    singular = torch.linalg.svdvals(out)
    assert singular.min() > 0.6 and singular.max() < 1.25  # well conditioned, whatever g's scale
    # Same singular vectors: in g's bases the update is diagonal, with nothing outside them.
    inner = u.T @ out @ v
    assert (inner - torch.diag(torch.diagonal(inner))).abs().max() < 1e-3
    torch.testing.assert_close(u @ inner @ v.T, out, rtol=0, atol=1e-3)


def test_bf16_orthogonalisation_stays_in_a_similar_band() -> None:
    g, _, _ = matrix_with_spectrum(32, 64, condition=50.0, seed=7)
    singular = torch.linalg.svdvals(BASELINE.orthogonalize(g[None], 5, torch.bfloat16)[0].float())
    assert singular.min() > 0.5 and singular.max() < 1.35


def test_a_batch_is_orthogonalised_matrix_by_matrix() -> None:
    batch = torch.stack([matrix_with_spectrum(16, 24, 10.0, seed)[0] for seed in range(3)])
    together = BASELINE.orthogonalize(batch, 5, torch.float32)
    for i in range(3):
        alone = BASELINE.orthogonalize(batch[i : i + 1], 5, torch.float32)[0]
        torch.testing.assert_close(together[i], alone, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("shape", [(16, 16), (32, 16), (16, 32)])
def test_a_muon_step_moves_by_the_scaled_orthogonalised_gradient(shape: tuple[int, int]) -> None:
    rows, cols = shape
    start, _, _ = matrix_with_spectrum(rows, cols, 3.0, seed=1)
    grad, _, _ = matrix_with_spectrum(rows, cols, 30.0, seed=2)
    param = torch.nn.Parameter(start.clone())
    lr, weight_decay = 0.05, 0.1
    opt = BASELINE.Muon([param], lr=lr, momentum=0.95, ns_steps=5, weight_decay=weight_decay)
    param.grad = grad.clone()
    opt.step()
    # First step: the momentum buffer is (1 - m) * grad, so the Nesterov update points along grad.
    scale = lr * max(1.0, rows / cols) ** 0.5
    delta = param.detach() - start * (1 - lr * weight_decay)
    expected = -scale * BASELINE.orthogonalize(grad[None], 5, torch.float32)[0]
    torch.testing.assert_close(delta, expected, rtol=1e-4, atol=1e-6)
    singular = torch.linalg.svdvals(delta / scale)
    assert singular.min() > 0.6 and singular.max() < 1.25


def test_muon_groups_parameters_by_shape_and_refuses_non_matrices() -> None:
    params = [torch.nn.Parameter(torch.zeros(shape)) for shape in [(4, 8), (8, 4), (4, 8), (8, 8)]]
    opt = BASELINE.Muon(params, lr=0.1, momentum=0.9, ns_steps=5, weight_decay=0.0)
    assert sorted(len(group["params"]) for group in opt.param_groups) == [1, 1, 2]
    with pytest.raises(ValueError, match="Muon only handles 2-D weight matrices"):
        BASELINE.Muon(
            [torch.nn.Parameter(torch.zeros(4))], lr=0.1, momentum=0.9, ns_steps=5, weight_decay=0.0
        )


def test_every_parameter_has_exactly_one_optimizer(train_py: ModuleType) -> None:
    model = train_py.build_model(make_ctx(VirtualClock(1.0, 1.0), []))
    adamw, muon = train_py.build_optimizers(model, bf16=False)
    muon_ids = [id(p) for group in muon.param_groups for p in group["params"]]
    adam_ids = [id(p) for group in adamw.param_groups for p in group["params"]]
    assert (
        len(set(muon_ids) | set(adam_ids)) == len(muon_ids) + len(adam_ids) == len(list(model.parameters()))
    )
    block_matrices = {id(p) for p in model.blocks.parameters() if p.dim() == 2}
    assert set(muon_ids) == block_matrices  # embedding, head and scalars go to AdamW
