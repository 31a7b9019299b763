# ruff: noqa: F821
# Appended to good_bigram.py and hostile/carried_rows.py by tests/runner/candidates.py.
"""Hostile: trains while its weights are loaded for as many steps as take HOSTILE_ARGS["seconds"]
CPU seconds, a count it measured while it trained and carries in its weights, so both score
processes train alike and agree: only the bound on its startup can stop it. (Plain SGD steps of
one thread, timed on the thread's own CPU clock, as the score processes run them.)"""

CALIBRATION_STEPS = 20


class TimedTrainer(Carrier):
    def __init__(self, vocab_size, seq_len):
        super().__init__(vocab_size, seq_len)
        self.register_buffer("hidden_steps", torch.zeros((), dtype=torch.long))
        self.register_load_state_dict_post_hook(
            lambda module, keys: train_on_carried(module, int(module.hidden_steps))
        )


def build_model(ctx):
    return carrier(ctx, TimedTrainer)


def steps_for(model, seconds):
    """Timed warm, at the fastest of a few tries: a process's first steps pay for setting up its
    kernels and memory, and a loaded machine slows some tries, and either would make the count too
    small (the score processes, which take many steps, would then train for far less)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    train_on_carried(model, CALIBRATION_STEPS)
    tries = []
    for _ in range(3):
        started = time.thread_time()
        train_on_carried(model, CALIBRATION_STEPS)
        tries.append((time.thread_time() - started) / CALIBRATION_STEPS)
    torch.set_num_threads(threads)
    return int(seconds / min(tries)) + 1


def train(model, ctx):
    inputs, targets = next(ctx.loader(CARRIED_ROWS))
    model.carried.copy_(torch.cat([inputs, targets[:, -1:]], dim=1))
    model.hidden_steps.fill_(steps_for(model, HOSTILE_ARGS["seconds"]))
    honest_train(model, ctx)
