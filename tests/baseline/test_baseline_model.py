"""The baseline model: causal, the contract's output, sliding windows, weights that rebuild it."""

from __future__ import annotations

from types import ModuleType

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.baseline.tiny import SEQ_LEN, VOCAB, VirtualClock, load_baseline, make_ctx


def random_model(module: ModuleType, seed: int = 0) -> torch.nn.Module:
    """The baseline model with every weight random: at init the output projections are zero, which
    would make attention (and so any causality leak) invisible."""
    model = module.build_model(make_ctx(VirtualClock(1.0, 1.0), []))
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=generator) * 0.5)
    return model.eval()


def mixed_model() -> torch.nn.Module:
    """Sliding-window and full layers alternating."""
    module = load_baseline(depth=3)
    module.WINDOW_PATTERN = "SL"
    module.SHORT_WINDOW_FRACTION = 0.25
    return random_model(module, seed=1)


# Built once: hypothesis runs the causality test many times on the same two models.
FULL = random_model(load_baseline())
MIXED = mixed_model()


@settings(max_examples=10, deadline=None)
@given(
    cut=st.integers(min_value=0, max_value=SEQ_LEN - 2),
    seed=st.integers(min_value=0, max_value=2**31 - 1),
    sliding=st.booleans(),
)
def test_later_tokens_never_change_earlier_logits(cut: int, seed: int, sliding: bool) -> None:
    model = MIXED if sliding else FULL
    generator = torch.Generator().manual_seed(seed)
    idx = torch.randint(VOCAB, (2, SEQ_LEN), generator=generator)
    changed = idx.clone()
    changed[:, cut + 1 :] = (
        idx[:, cut + 1 :] + 1 + torch.randint(VOCAB - 1, (1,), generator=generator)
    ) % VOCAB
    with torch.no_grad():
        before, after = model(idx), model(changed)
    torch.testing.assert_close(after[:, : cut + 1], before[:, : cut + 1], rtol=0, atol=1e-5)
    # The control that makes the check meaningful: the changed tokens' own logits do change.
    assert (after[:, cut + 1 :] - before[:, cut + 1 :]).abs().max() > 1e-3


def test_a_sliding_window_layer_sees_only_its_window() -> None:
    module = load_baseline(depth=1)
    module.WINDOW_PATTERN = "S"
    module.SHORT_WINDOW_FRACTION = 0.25  # window of 8 tokens: position i sees i-7..i
    model = random_model(module)
    idx = torch.randint(VOCAB, (1, SEQ_LEN), generator=torch.Generator().manual_seed(3))
    last = SEQ_LEN - 1
    outside, inside = idx.clone(), idx.clone()
    outside[0, last - 8] = (idx[0, last - 8] + 1) % VOCAB
    inside[0, last - 7] = (idx[0, last - 7] + 1) % VOCAB
    with torch.no_grad():
        base, out_logits, in_logits = model(idx)[0, last], model(outside)[0, last], model(inside)[0, last]
    torch.testing.assert_close(out_logits, base, rtol=0, atol=1e-6)
    assert (in_logits - base).abs().max() > 1e-3


def test_forward_returns_soft_capped_float_logits_of_the_contract_shape(train_py: ModuleType) -> None:
    model = random_model(train_py)
    for length in (SEQ_LEN, 5):
        idx = torch.randint(VOCAB, (3, length))
        with torch.no_grad():
            logits = model(idx)
        assert logits.shape == (3, length, VOCAB)
        assert logits.dtype == torch.float32
        assert torch.isfinite(logits).all()
        assert logits.abs().max() <= train_py.LOGIT_SOFTCAP


def test_forward_under_bf16_autocast_still_returns_float32_logits(train_py: ModuleType) -> None:
    model = random_model(train_py)
    idx = torch.randint(VOCAB, (2, SEQ_LEN))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = model(idx)
    logits.float().sum().backward()
    assert logits.dtype == torch.float32
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())


def test_rows_longer_than_seq_len_are_refused_with_a_clear_error(train_py: ModuleType) -> None:
    model = random_model(train_py)
    with pytest.raises(ValueError, match=f"exceeds the model's seq_len {SEQ_LEN}"):
        model(torch.zeros((1, SEQ_LEN + 1), dtype=torch.long))


def test_saved_weights_rebuild_the_same_model(train_py: ModuleType) -> None:
    """The harness saves state_dict() after training and rebuilds with build_model to score."""
    trained = random_model(train_py)
    weights = trained.state_dict()
    assert all(name not in weights for name in ("cos", "sin")), "derived tables are not weights"
    rebuilt = train_py.build_model(make_ctx(VirtualClock(1.0, 1.0), []))
    rebuilt.load_state_dict(weights, strict=True)
    idx = torch.randint(VOCAB, (2, SEQ_LEN))
    with torch.no_grad():
        torch.testing.assert_close(rebuilt.eval()(idx), trained(idx), rtol=0, atol=0)


def test_the_baseline_declares_the_anchors_flops_per_token(train_py: ModuleType) -> None:
    """The MFU figure uses the model's own count (harness.runner.devices.flops_per_token); the
    baseline's is autoresearch's: 6 x the parameters other than the token embedding, plus 12 x
    layers x width x sequence length. Computed here from the parameters as the anchor does (all of
    them: the baseline counts matmul weights only, so its scalars make the difference)."""
    model = random_model(train_py)
    blocks = len(model.blocks)
    width = model.wte.embedding_dim
    others = sum(p.numel() for p in model.parameters()) - model.wte.weight.numel()
    anchor = 6 * others + 12 * blocks * width * SEQ_LEN
    assert model.flops_per_token() == pytest.approx(anchor, rel=1e-3)
