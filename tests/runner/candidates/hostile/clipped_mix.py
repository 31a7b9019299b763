# ruff: noqa: F821
# Appended to good_bigram.py by tests/runner/candidates.py, before the part that uses it.
"""Shared by the hostile candidates that mix something into the honest model's predictions and
keep every change just under the harness's tolerance, the way an attacker would: the log-
probability of no token moves by more than HOSTILE_ARGS["clip_nats"] (twice that after the
scorer renormalises; the test passes a clip that keeps two processes' answers within the
tolerance at every position)."""

import math


def clipped_mix(base_logits, other_log_probs, share):
    """log((1 - share) p + share q), each entry moved at most clip_nats from log p."""
    base = torch.log_softmax(base_logits.double(), dim=-1)
    other = other_log_probs.double()
    mixed = torch.logaddexp(base + math.log1p(-share), other + math.log(share))
    clip = HOSTILE_ARGS["clip_nats"]
    return (base + (mixed - base).clamp(-clip, clip)).float()


class Mixer(torch.nn.Module):
    """The honest bigram model, with `other(idx, base_logits)` mixed in while scored; `learn(idx)`
    runs after each scored batch."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, idx):
        logits = self.inner(idx)
        if self.training:
            return logits
        with torch.no_grad():
            mixed = clipped_mix(logits, self.other(idx, logits), HOSTILE_ARGS.get("share", 0.5))
        self.learn(idx)
        return mixed

    def learn(self, idx):
        pass


def next_token_loss(logits, idx):
    """Cross-entropy of each position's next input token: what a model can learn from the
    validation inputs it is shown (every target but a row's last is the next input)."""
    return torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1), idx[:, 1:].flatten())
