"""Baseline train.py: a small modern GPT trained for a fixed time budget.

The harness imports this file, calls `build_model(ctx)` and then `train(model, ctx)`, saves the
weights and scores the model itself (validation bits per byte, lower is better). Everything here
is fair game for experiments: architecture, optimizer, schedule, batch size, model size.

Importing this module must stay cheap and side-effect free: no device work, no threads, no I/O.
The only inputs are the `ctx` (device, vocab_size, seq_len, time budget and clock, data loader,
seed, log) and the constants below.
"""

import math
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

import torch
import torch.nn as nn
import torch.nn.functional as F

# ---------------------------------------------------------------------------------------------
# Hyperparameters


@dataclass(frozen=True)
class DeviceSettings:
    """Model and batch size for one device type."""

    depth: int  # transformer blocks
    width: int  # model dimension
    head_dim: int
    device_batch: int  # rows per forward/backward
    total_batch_tokens: int  # tokens per optimizer step; a multiple of device_batch * seq_len
    bf16: bool | None  # bf16 autocast for the matmuls; None = use it if it measures faster here
    compile: bool  # torch.compile the model for training


# "cuda" is sized for one H100 at the h100 preset (seq 2048, vocab 8192, 5 minutes). "cpu" is
# sized for the cpu preset (seq 256, vocab 4096, 60 s on 2 cores), where a few hundred thousand
# tokens is all there is time for: a small, shallow model taking many small steps did best
# (docs/baseline.md). It runs eager (compiling would take a large share of the budget there), with
# bf16 only where the CPU has fast bf16 matmuls (AMX), and keeps each micro-batch's float32 logits
# under 32 MB: larger blocks go back to the OS after every use and cost page faults each step.
DEVICE_SETTINGS = {
    "cuda": DeviceSettings(
        depth=8, width=512, head_dim=128, device_batch=64, total_batch_tokens=2**19, bf16=True, compile=True
    ),
    "cpu": DeviceSettings(
        depth=2, width=128, head_dim=64, device_batch=4, total_batch_tokens=4 * 256, bf16=None, compile=False
    ),
}
# On a CPU, torch's threads (one per core by default) stall whenever another thread wants a core:
# the loader's prefetch thread, the harness, anything else on the machine. Leaving a core free
# measured several times faster on a busy 2-core machine (docs/baseline.md has the figures).
CPU_SPARE_CORES = 1
MLP_RATIO = 4  # hidden width of the MLP as a multiple of the model width
WINDOW_PATTERN = "L"  # per layer, repeated over the depth: L = full causal, S = sliding window
SHORT_WINDOW_FRACTION = 0.5  # an S layer attends to the last seq_len * this tokens
LOGIT_SOFTCAP = 15.0  # logits = cap * tanh(logits / cap): bounds them, which steadies early training
ROPE_BASE = 10000.0

# Optimizers: Muon for the 2-D matrices inside the blocks, AdamW for everything else.
MATRIX_LR = 0.04
MUON_MOMENTUM = 0.95
MUON_NS_STEPS = 5
EMBEDDING_LR = 0.6  # the AdamW learning rates are for width 768 and scale with 1/sqrt(width)
UNEMBEDDING_LR = 0.004
SCALAR_LR = 0.5
ADAM_BETAS = (0.8, 0.95)
WEIGHT_DECAY = 0.0  # decoupled, on the Muon matrices only

# Schedule, by fraction of the time budget used: linear warmup, constant, linear warmdown.
WARMUP_FRACTION = 0.0
WARMDOWN_FRACTION = 0.5
FINAL_LR_FRACTION = 0.0


# ---------------------------------------------------------------------------------------------
# Model


def norm(x: torch.Tensor) -> torch.Tensor:
    """RMSNorm without a learned gain: the following linear layer can learn any scale it needs."""
    return F.rms_norm(x, (x.size(-1),))


def rotary_tables(seq_len: int, head_dim: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of the rotary angles, [seq_len, head_dim / 2]."""
    inv_freq = ROPE_BASE ** (-torch.arange(0, head_dim, 2, dtype=torch.float32, device=device) / head_dim)
    angles = torch.outer(torch.arange(seq_len, dtype=torch.float32, device=device), inv_freq)
    return angles.cos(), angles.sin()


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate pairs of channels of x [B, H, T, D] by position-dependent angles."""
    x1, x2 = x.chunk(2, dim=-1)
    # Keep x's dtype under autocast: the float32 tables would otherwise promote q and k.
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


class CausalSelfAttention(nn.Module):
    def __init__(self, width: int, head_dim: int, sliding: bool) -> None:
        super().__init__()
        if width % head_dim:
            raise ValueError(f"width {width} is not a multiple of head_dim {head_dim}")
        self.n_head = width // head_dim
        self.head_dim = head_dim
        self.sliding = sliding
        # Separate q, k, v matrices so that Muon orthogonalises each one on its own.
        self.c_q = nn.Linear(width, width, bias=False)
        self.c_k = nn.Linear(width, width, bias=False)
        self.c_v = nn.Linear(width, width, bias=False)
        self.c_proj = nn.Linear(width, width, bias=False)

    def forward(
        self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, window_mask: torch.Tensor | None
    ) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = (
            lin(x).view(B, T, self.n_head, self.head_dim).transpose(1, 2)
            for lin in (self.c_q, self.c_k, self.c_v)
        )
        # QK-norm: unit-RMS queries and keys keep attention logits bounded whatever the weights do.
        q, k = apply_rotary(norm(q), cos, sin), apply_rotary(norm(k), cos, sin)
        q, k = q.to(v.dtype), k.to(v.dtype)  # some autocast policies run rms_norm in float32
        if self.sliding:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=window_mask)
        else:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).reshape(B, T, C))


class MLP(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.c_fc = nn.Linear(width, MLP_RATIO * width, bias=False)
        self.c_proj = nn.Linear(MLP_RATIO * width, width, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c_proj(F.relu(self.c_fc(x)).square())  # ReLU^2: cheap, and sparse activations


class Block(nn.Module):
    def __init__(self, width: int, head_dim: int, sliding: bool) -> None:
        super().__init__()
        self.attn = CausalSelfAttention(width, head_dim, sliding)
        self.mlp = MLP(width)

    def forward(
        self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, window_mask: torch.Tensor | None
    ) -> torch.Tensor:
        x = x + self.attn(norm(x), cos, sin, window_mask)
        return x + self.mlp(norm(x))


class GPT(nn.Module):
    def __init__(self, vocab_size: int, seq_len: int, depth: int, width: int, head_dim: int) -> None:
        super().__init__()
        self.seq_len = seq_len
        self.wte = nn.Embedding(vocab_size, width)
        pattern = (WINDOW_PATTERN * depth)[:depth]
        self.blocks = nn.ModuleList(Block(width, head_dim, kind == "S") for kind in pattern)
        self.short_window = max(1, int(seq_len * SHORT_WINDOW_FRACTION))
        # Per-layer scalars: how much of the residual stream and of the initial embedding x0 enter
        # each block. Mixing x0 back in gives every layer direct access to the token identity.
        self.resid_lambdas = nn.Parameter(torch.ones(depth))
        self.x0_lambdas = nn.Parameter(torch.zeros(depth))
        self.lm_head = nn.Linear(width, vocab_size, bias=False)  # untied from wte
        cos, sin = rotary_tables(seq_len, head_dim, self.wte.weight.device)
        # Not persistent: derived from the shape, so the saved weights hold only learned values.
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)

    @torch.no_grad()
    def init_weights(self) -> None:
        width = self.wte.embedding_dim
        bound = math.sqrt(3.0 / width)  # uniform with the variance of N(0, 1/width)
        nn.init.normal_(self.wte.weight, std=1.0)
        nn.init.normal_(self.lm_head.weight, std=0.001)  # start near uniform predictions
        for block in self.blocks:
            for lin in (block.attn.c_q, block.attn.c_k, block.attn.c_v, block.mlp.c_fc):
                nn.init.uniform_(lin.weight, -bound, bound)
            # Zero output projections: every block starts as the identity on the residual stream.
            nn.init.zeros_(block.attn.c_proj.weight)
            nn.init.zeros_(block.mlp.c_proj.weight)
        self.resid_lambdas.fill_(1.0)
        self.x0_lambdas.zero_()

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        if idx.size(1) > self.seq_len:
            raise ValueError(f"sequence length {idx.size(1)} exceeds the model's seq_len {self.seq_len}")
        T = idx.size(1)
        cos, sin = self.cos[:T], self.sin[:T]
        window_mask = None
        if any(block.attn.sliding for block in self.blocks):
            pos = torch.arange(T, device=idx.device)
            offset = pos[:, None] - pos[None, :]  # query position minus key position
            window_mask = (offset >= 0) & (offset < self.short_window)  # True = may attend
        x = x0 = norm(self.wte(idx))
        for i, block in enumerate(self.blocks):
            x = block(self.resid_lambdas[i] * x + self.x0_lambdas[i] * x0, cos, sin, window_mask)
        logits = self.lm_head(norm(x)).float()
        return LOGIT_SOFTCAP * torch.tanh(logits / LOGIT_SOFTCAP)

    def flops_per_token(self) -> float:
        """Training FLOPs per token: 6 per matmul weight, plus attention's score and value matmuls."""
        matmul_params = sum(p.numel() for p in self.parameters() if p.dim() == 2) - self.wte.weight.numel()
        width = self.wte.embedding_dim
        return 6.0 * matmul_params + 12.0 * len(self.blocks) * width * self.seq_len


# ---------------------------------------------------------------------------------------------
# Optimizer


def orthogonalize(g: torch.Tensor, steps: int, dtype: torch.dtype) -> torch.Tensor:
    """Approximately replace the singular values of each matrix in g [batch, rows, cols] by 1.

    A quintic Newton-Schulz iteration whose coefficients push singular values in (0, 1] quickly
    into a band around 1 (about 0.7..1.2) instead of converging exactly: that is enough for an
    update direction and needs only a few matmuls, which are stable even in bf16.
    """
    a, b, c = 3.4445, -4.7750, 2.0315
    x = g.to(dtype)
    transposed = x.size(-2) > x.size(-1)
    if transposed:  # iterate on the wide orientation: the Gram matrix x @ x.T is then the smaller one
        x = x.mT
    x = x / (x.norm(dim=(-2, -1), keepdim=True) + 1e-7)  # Frobenius norm >= spectral norm: all <= 1
    for _ in range(steps):
        gram = x @ x.mT
        poly = torch.baddbmm(gram, gram, gram, beta=b, alpha=c)  # b * gram + c * gram @ gram
        x = torch.baddbmm(x, poly, x, beta=a)  # a * x + poly @ x
    return x.mT if transposed else x


class Muon(torch.optim.Optimizer):
    """MomentUm Orthogonalized by Newton-schulz, for 2-D weight matrices.

    SGD with Nesterov momentum whose update is orthogonalised: every direction of the update gets
    the same step size, so rare directions are not drowned by dominant ones. Parameters of the same
    shape are grouped and orthogonalised as one batch.
    """

    def __init__(
        self,
        params: list[nn.Parameter],
        lr: float,
        momentum: float,
        ns_steps: int,
        weight_decay: float,
        ns_dtype: torch.dtype = torch.float32,
    ) -> None:
        if any(p.dim() != 2 for p in params):
            raise ValueError("Muon only handles 2-D weight matrices")
        shapes = sorted({tuple(p.shape) for p in params})
        groups = [{"params": [p for p in params if tuple(p.shape) == shape]} for shape in shapes]
        defaults = {"lr": lr, "momentum": momentum, "ns_steps": ns_steps, "weight_decay": weight_decay}
        super().__init__(groups, defaults)
        self.ns_dtype = ns_dtype

    @torch.no_grad()
    def step(self) -> None:  # type: ignore[override]
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            if not params:
                continue
            momentum = group["momentum"]
            updates = []
            for p in params:
                buf = self.state[p].setdefault("momentum_buffer", torch.zeros_like(p))
                buf.lerp_(p.grad, 1 - momentum)
                updates.append(p.grad.lerp(buf, momentum))  # Nesterov: look ahead along the momentum
            ortho = orthogonalize(torch.stack(updates), group["ns_steps"], self.ns_dtype)
            rows, cols = params[0].shape
            # An orthogonal update has unit singular values; scale up tall matrices so that the
            # per-element step size does not shrink with the matrix's aspect ratio.
            scale = group["lr"] * max(1.0, rows / cols) ** 0.5
            for p, update in zip(params, ortho.unbind(0), strict=True):
                p.mul_(1 - group["lr"] * group["weight_decay"])
                p.add_(update.to(p.dtype), alpha=-scale)


def build_optimizers(model: GPT, bf16: bool) -> list[torch.optim.Optimizer]:
    """Muon for the block matrices; AdamW for the embedding, the head and the scalars."""
    width = model.wte.embedding_dim
    adam_scale = (width / 768) ** -0.5
    matrices = [p for p in model.blocks.parameters() if p.dim() == 2]
    scalars = [model.resid_lambdas, model.x0_lambdas]
    adam_groups = [
        {"params": [model.wte.weight], "lr": EMBEDDING_LR * adam_scale},
        {"params": [model.lm_head.weight], "lr": UNEMBEDDING_LR * adam_scale},
        {"params": scalars, "lr": SCALAR_LR},
    ]
    covered = len(matrices) + 2 + len(scalars)
    if covered != len(list(model.parameters())):
        raise ValueError("every parameter must belong to exactly one optimizer group")
    adamw = torch.optim.AdamW(
        adam_groups, betas=ADAM_BETAS, eps=1e-10, weight_decay=0.0, fused=model.wte.weight.is_cuda
    )
    muon = Muon(
        matrices,
        lr=MATRIX_LR,
        momentum=MUON_MOMENTUM,
        ns_steps=MUON_NS_STEPS,
        weight_decay=WEIGHT_DECAY,
        ns_dtype=torch.bfloat16 if bf16 else torch.float32,
    )
    optimizers: list[torch.optim.Optimizer] = [adamw, muon]
    for opt in optimizers:
        for group in opt.param_groups:
            group["initial_lr"] = group["lr"]
    return optimizers


def lr_multiplier(progress: float) -> float:
    """Learning-rate multiplier for the fraction of the time budget used so far."""
    if progress < WARMUP_FRACTION:
        return (progress + 1e-3) / WARMUP_FRACTION
    if progress <= 1.0 - WARMDOWN_FRACTION:
        return 1.0
    cooldown = (1.0 - progress) / WARMDOWN_FRACTION
    return FINAL_LR_FRACTION + (1.0 - FINAL_LR_FRACTION) * max(cooldown, 0.0)


# ---------------------------------------------------------------------------------------------
# The contract: build_model(ctx) and train(model, ctx)


class Context(Protocol):
    """What this file uses of the harness's ctx (harness.context.TrainContext)."""

    device: torch.device
    vocab_size: int
    seq_len: int
    time_budget: float
    seed: int
    peak_flops: float | None

    def time_left(self) -> float: ...
    def loader(self, batch_size: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]: ...
    def log(self, step: int, loss: float, **extra: float) -> None: ...


def device_settings(ctx: Context) -> DeviceSettings:
    if ctx.device.type not in DEVICE_SETTINGS:
        raise ValueError(f"no DEVICE_SETTINGS entry for device type {ctx.device.type!r}; add one")
    return DEVICE_SETTINGS[ctx.device.type]


def bf16_is_faster(device: torch.device) -> bool:
    """Time a model-sized matmul in float32 and bf16; choose bf16 only when clearly faster.

    CPUs with AMX run bf16 matmuls several times faster than float32; most others run them slower.
    The 2x margin keeps the choice stable under timing noise. The bf16 timing stops as soon as it
    has lost: on CPUs without fast bf16 its ten matmuls took seconds of a startup that the
    compile allowance bounds.
    """
    seconds = {}
    for dtype in (torch.float32, torch.bfloat16):
        a = torch.randn(1024, 256, device=device, dtype=dtype)
        b = torch.randn(256, 1024, device=device, dtype=dtype)
        a @ b  # warm up
        limit = 0.5 * seconds[torch.float32] if seconds else math.inf
        started = time.perf_counter()
        for _ in range(10):
            a @ b
            if time.perf_counter() - started >= limit:
                return False
        seconds[dtype] = time.perf_counter() - started
    return True


def build_model(ctx: Context) -> GPT:
    cfg = device_settings(ctx)
    torch.manual_seed(ctx.seed)
    with torch.device(ctx.device):
        model = GPT(ctx.vocab_size, ctx.seq_len, cfg.depth, cfg.width, cfg.head_dim)
    model.init_weights()
    return model


def compile_before_data(
    forward: nn.Module, model: GPT, autocast: torch.autocast, batch_size: int, ctx: Context
) -> None:
    """One forward and backward pass on dummy tokens, so that torch.compile does its work now.

    Startup, which the harness does not count as training (up to its compile allowance), ends
    at the first batch requested or the first ctx.log: compiling lazily on the first real batch
    would spend the training budget on it. Same shapes as training, so nothing recompiles.
    """
    dummy = torch.zeros((batch_size, ctx.seq_len), dtype=torch.long, device=ctx.device)
    with autocast:
        logits = forward(dummy)
    F.cross_entropy(logits.flatten(0, 1), dummy.flatten()).backward()
    model.zero_grad(set_to_none=True)


def train(model: GPT, ctx: Context) -> None:
    cfg = device_settings(ctx)
    torch.manual_seed(ctx.seed)
    tokens_per_micro = cfg.device_batch * ctx.seq_len
    if cfg.total_batch_tokens % tokens_per_micro:
        raise ValueError(
            f"total_batch_tokens {cfg.total_batch_tokens} is not a multiple of "
            f"device_batch * seq_len = {tokens_per_micro}"
        )
    accum_steps = cfg.total_batch_tokens // tokens_per_micro
    if ctx.device.type == "cuda":
        torch.set_float32_matmul_precision("high")  # TF32 for the float32 matmuls outside autocast
    if ctx.device.type == "cpu":
        # The cores this process may use (a sandbox may restrict them), not the machine's count.
        torch.set_num_threads(max(1, len(os.sched_getaffinity(0)) - CPU_SPARE_CORES))
    bf16 = bf16_is_faster(ctx.device) if cfg.bf16 is None else cfg.bf16
    optimizers = build_optimizers(model, bf16)
    # Compile a wrapper, not the model: the harness saves `model`'s own (unprefixed) weights.
    forward = torch.compile(model) if cfg.compile else model
    autocast = torch.autocast(device_type=ctx.device.type, dtype=torch.bfloat16, enabled=bf16)
    flops_per_step = model.flops_per_token() * accum_steps * tokens_per_micro
    model.train()
    if cfg.compile:
        compile_before_data(forward, model, autocast, cfg.device_batch, ctx)
    batches = ctx.loader(cfg.device_batch)  # the training clock runs from the first batch asked

    step = 0
    while ctx.time_left() > 0:
        started = time.perf_counter()
        progress = min(max(1.0 - ctx.time_left() / ctx.time_budget, 0.0), 1.0)
        multiplier = lr_multiplier(progress)
        for opt in optimizers:
            for group in opt.param_groups:
                group["lr"] = group["initial_lr"] * multiplier

        loss_sum = torch.zeros((), device=ctx.device)
        for _ in range(accum_steps):
            inputs, targets = next(batches)
            with autocast:
                logits = forward(inputs)
            loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten())
            (loss / accum_steps).backward()
            loss_sum += loss.detach()
        for opt in optimizers:
            opt.step()
        model.zero_grad(set_to_none=True)

        loss_value = loss_sum.item() / accum_steps  # .item() waits for the step: timing is honest
        if not math.isfinite(loss_value):
            raise FloatingPointError(
                f"training loss is {loss_value} at step {step}: the run diverged "
                "(lower the learning rates or check the latest change)"
            )
        seconds = time.perf_counter() - started
        extra = {"tokens_per_s": accum_steps * tokens_per_micro / seconds, "lr_multiplier": multiplier}
        if ctx.peak_flops:
            extra["mfu_percent_estimate"] = 100.0 * flops_per_step / seconds / ctx.peak_flops
        ctx.log(step=step, loss=loss_value, **extra)
        step += 1
