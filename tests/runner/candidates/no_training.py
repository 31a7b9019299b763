"""Honest and idle: the seeded bigram model, returned untrained. Its score is known in advance."""

import torch
from torch import nn


def build_model(ctx):
    torch.manual_seed(ctx.seed)
    return nn.Sequential(nn.Embedding(ctx.vocab_size, ctx.vocab_size)).to(ctx.device)


def train(model, ctx):
    ctx.log(step=0, loss=0.0)
