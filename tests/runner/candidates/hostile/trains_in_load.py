# ruff: noqa: F821
# Appended to good_bigram.py and hostile/carried_rows.py by tests/runner/candidates.py.
"""Hostile: goes on training while its weights are loaded. Its own load_state_dict would train
(the harness never calls it); so does a load_state_dict post-hook, which torch's own
load_state_dict runs once every tensor is in place."""


class LoadTrainer(Carrier):
    def __init__(self, vocab_size, seq_len):
        super().__init__(vocab_size, seq_len)
        self.register_load_state_dict_post_hook(
            lambda module, keys: train_on_carried(module, HOSTILE_ARGS["steps"])
        )

    def load_state_dict(self, state_dict, strict=True, assign=False):
        print("CANDIDATE load_state_dict CALLED", flush=True)
        loaded = super().load_state_dict(state_dict, strict, assign)
        train_on_carried(self, HOSTILE_ARGS["steps"])
        return loaded


def build_model(ctx):
    return carrier(ctx, LoadTrainer)
