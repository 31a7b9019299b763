# ruff: noqa: F821
# Appended to good_bigram.py and hostile/clipped_mix.py by tests/runner/candidates.py.
"""Hostile: puts HOSTILE_ARGS["share"] of its probability on the true next token (it reads
idx[:, t + 1]), clipped under the tolerance."""


class LookAheadMix(Mixer):
    def other(self, idx, logits):
        peek = torch.full(logits.shape, -math.inf, dtype=torch.float64)
        peek[:, :-1].scatter_(2, idx[:, 1:, None], 0.0)
        peek[:, -1] = torch.log_softmax(logits[:, -1].double(), dim=-1)  # nothing to read at the end
        return peek


def build_model(ctx):
    return LookAheadMix(honest_build_model(ctx))
