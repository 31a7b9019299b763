"""How long the candidate's model may run in the score phase: the bound behind `score_over_budget`.

The model is candidate code, so it runs in the score sandboxes too, and whatever it computes
there beyond its forward passes (training on rows it carried inside its weights, say) would be
free. Each model process (eval, probe) is therefore measured from outside, by the scorer: on a GPU in
wall seconds, from `go` to `loaded` (import train.py, build_model, the harness's weight load) and
from each batch command to its answer; on a CPU in the CPU seconds of its whole process tree from
`go` on (measured_in_cpu_seconds). The sum may not exceed the process's bound:

    bound = startup + (first_share + batches - 1) x (forward + TRANSFER_SLACK x transfer)

and it holds at every point: while the model works on its k-th batch, it may have used at most
startup + (first_share + max(1, k) - 1) x (forward + TRANSFER_SLACK x transfer). `first_share` is
the first batch's rows over a full batch's (1 but on a CPU, where the first batch holds
score_plan.HEAD_ROWS rows). Work a model front-loads before its first answer (training on rows
it carried in its weights, to match in every later batch) is therefore bounded by the startup and
the first batch's allowance, however many batches follow.
    startup = max(STARTUP_MIN_S, STARTUP_FRACTION x budget)                on CUDA
    startup = min(that, max(CPU_STARTUP_MIN_S,
                            STARTUP_TOKENS x training_seconds / tokens))     on a CPU
    forward = FORWARD_SLACK[device] x FORWARD_SHARE x rows x seq_len x training_seconds / tokens

On a CPU the startup follows the run's own training cost, as the forward term does: building a
model and loading its weights costs what training on a fixed, small number of tokens costs, at any
size of the baseline (docs/runner.md has the figures), so STARTUP_TOKENS covers models that build
far more than they train (sparse ones), and what it leaves a candidate to hide is that many tokens
of its own training. CPU_STARTUP_MIN_S is for what does not grow with the model: importing train.py
(the libraries it loads, some of which cost more, are imported before the clock starts:
harness.runner.preload). On CUDA a CUDA context alone takes seconds, whatever the model.

`forward` comes from the run's own training throughput: a forward pass costs about a third of
a training step (FORWARD_SHARE). `transfer` is the scorer's own time to take one batch of logits
onto its device (out of shared memory on a CPU; on CUDA a device copy from the model's own buffer,
harness.runner.cuda_handover), the least it has seen in this run: the model process pays a copy
of the same size to put them there. In wall seconds, only what happens between the
measured points is unmeasured: the scorer's copy of a batch's logits, after the model answered and
before the next batch is commanded (the scorer computes the loss while the model runs the next
batch); CPU seconds count that too.

On a GPU a second rule holds the batches to each other (`uneven_batch`): the device is the run's
alone, so an honest model answers every batch of one shape in about the same time, and a batch
that takes more than BATCH_SPREAD times the fastest of its shape (plus BATCH_JITTER_S) had work
beside its forward pass: hidden training in bursts, or GPU work queued while the scorer copied
the previous answer, which delays the next. Each shape's first batch is left out (kernels are
chosen and caches filled then: the startup allowance covers it). Work spread evenly over every
batch stays within the bound above.

Why the probe's bound is what matters: training that changes the eval's counted outputs must be
repeated by the probe (a fresh process) before its only batch, or the two disagree (see
harness.runner.scoring.agreement). What a candidate can hide is the probe's bound less what an honest
probe needs; docs/runner.md has the figure for each preset.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

# Room for importing train.py, build_model and the weight load (an honest model needs a fraction
# of it), a CUDA context and a loaded machine; also all a model that compiles in build_model or in
# its first forward gets: compile in train(). On a CPU also the most the allowance below may reach.
# docs/runner.md, "The score phase", has the measurements.
STARTUP_MIN_S = 3.0
STARTUP_FRACTION = 0.02
# On a CPU, in CPU seconds: the floor for what does not grow with the model, and the training
# tokens whose cost the startup may take (many times what a dense model's build and load take).
CPU_STARTUP_MIN_S = 1.0
STARTUP_TOKENS = 2000
FORWARD_SHARE = 1.0 / 3.0  # forward FLOPs per token are a third of a training step's (2 of 6)
# How much slower per token than a third of a training step an honest forward may be, by device
# type: room for an eager float32 forward of a model trained compiled or in bf16, and for a
# machine whose load changed between training and scoring (the measured ratios: docs/runner.md).
FORWARD_SLACK = {"cpu": 10.0, "cuda": 20.0}
TRANSFER_SLACK = 2.0
# Assumed before the scorer has timed its first batch of logits (it then uses its own figure).
FIRST_TRANSFER_BYTES_PER_S = 1e9
# The forward term of all evaluation rows together is at most the time budget, whatever
# throughput the run had (few tokens served would otherwise mean a large bound).
FORWARD_CAP_FRACTION = 1.0
# On a GPU: how much slower than the fastest batch of its shape a batch may be (uneven_batch).
BATCH_SPREAD = 1.5
BATCH_JITTER_S = 0.01


@dataclass(frozen=True)
class ProcessBudget:
    """The bound of one model process, before the transfer term is known."""

    label: str  # eval or probe
    batches: int  # the first one included
    startup_s: float
    forward_s: float  # per full batch, slack included
    logits_bytes: int  # per full batch
    first_share: float = 1.0  # the first batch's rows over a full batch's

    def bound(self, transfer_s: float | None, given: int | None = None) -> float:
        """Seconds this process may have run by the time it works on its `given`-th batch (None: all
        of them), given the scorer's measured transfer per full batch (None: not measured yet,
        assume FIRST_TRANSFER_BYTES_PER_S)."""
        return self.startup_s + self.full_batches(given) * (
            self.forward_s + TRANSFER_SLACK * self.transfer(transfer_s)
        )

    def full_batches(self, given: int | None = None) -> float:
        """How many full batches' allowance the first `given` batches get (None: all of them)."""
        batches = self.batches if given is None else min(max(1, given), self.batches)
        return 0.0 if batches == 0 else self.first_share + batches - 1

    def transfer(self, transfer_s: float | None) -> float:
        return self.logits_bytes / FIRST_TRANSFER_BYTES_PER_S if transfer_s is None else transfer_s

    def explain(self, transfer_s: float | None, unit: str = "s", given: int | None = None) -> str:
        count = self.batches if given is None else min(max(1, given), self.batches)
        batches = f"{count} batch" + ("" if count == 1 else "es")
        so_far = "" if count == self.batches else f" (its first {batches} of {self.batches})"
        worth = "" if self.first_share == 1.0 else f" ({self.full_batches(given):g} full batches' worth)"
        transfer = self.transfer(transfer_s)
        return (
            f"{self.bound(transfer_s, given):.2f} {unit}{so_far} = startup {self.startup_s:.2f} + {batches}"
            f"{worth} x (forward {self.forward_s:.4f} + logits transfer {TRANSFER_SLACK:g} x {transfer:.4f})"
        )


def measured_in_cpu_seconds(device: str) -> bool:
    """Whether the score phase is measured in the model's CPU seconds (else in wall seconds).

    On a CPU the model's work is CPU work, and CPU seconds are what it costs whatever else the
    machine runs: a busy machine stretches wall seconds, not CPU seconds, so an honest run is not
    failed for the load, and the slack left for hidden work does not grow with it. They count the
    model's whole process tree from `go` on, between batches too. The training throughput behind
    the bound is then in the train sandbox's CPU seconds as well. On a GPU the work is the GPU's,
    which CPU seconds do not see: wall seconds, on a GPU the run has to itself.
    """
    return not device.startswith("cuda")


def startup_allowance(
    device: str, time_budget: float, training_seconds: float, train_tokens: int | None
) -> float:
    """Seconds from `go` to `loaded` (and the first batch's start), before any batch allowance.

    On a CPU never more than on CUDA: a run that trained on few tokens for long gets no more than
    the flat allowance. A run served no training tokens gets the floor.
    """
    flat = max(STARTUP_MIN_S, STARTUP_FRACTION * time_budget)
    if not measured_in_cpu_seconds(device):
        return flat
    if not train_tokens or training_seconds <= 0:
        return CPU_STARTUP_MIN_S
    return min(flat, max(CPU_STARTUP_MIN_S, STARTUP_TOKENS * training_seconds / train_tokens))


def forward_seconds_per_token(
    device: str, time_budget: float, training_seconds: float, train_tokens: int | None, eval_tokens: int
) -> float:
    """The bound's forward seconds per token on `device`, slack included.

    0 when the feeder served no training tokens: its model trained on nothing, and startup and
    transfer are what it may spend.
    """
    if not train_tokens or training_seconds <= 0:
        return 0.0
    slack = FORWARD_SLACK["cuda" if device.startswith("cuda") else "cpu"]
    estimate = slack * FORWARD_SHARE * training_seconds / train_tokens
    return min(estimate, FORWARD_CAP_FRACTION * time_budget / max(1, eval_tokens))


def process_budget(
    label: str,
    batches: int,
    batch_tokens: int,
    logits_bytes: int,
    startup_s: float,
    per_token_s: float,
    first_share: float = 1.0,
) -> ProcessBudget:
    return ProcessBudget(
        label=label,
        batches=batches,
        startup_s=startup_s,
        forward_s=per_token_s * batch_tokens,
        logits_bytes=logits_bytes,
        first_share=first_share,
    )


def uneven_batch(answers: Sequence[tuple[int, float]]) -> tuple[int, float, float] | None:
    """The first batch that took longer than BATCH_SPREAD x the fastest batch of its row count
    + BATCH_JITTER_S, as (its number from 1, its seconds, that fastest), or None. `answers`: each
    batch's (rows, seconds from command to answer), in order; each row count's first batch is not
    judged (kernel choice, cold caches) and sets no fastest."""
    later: dict[int, list[tuple[int, float]]] = {}
    seen: set[int] = set()
    for number, (rows, seconds) in enumerate(answers, start=1):
        if rows in seen:
            later.setdefault(rows, []).append((number, seconds))
        seen.add(rows)
    slow = [
        (number, seconds, fastest)
        for batches in later.values()
        for fastest in [min(seconds for _, seconds in batches)]
        for number, seconds in batches
        if seconds > BATCH_SPREAD * fastest + BATCH_JITTER_S
    ]
    return min(slow, default=None)
