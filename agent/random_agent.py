"""The random-search agent: mutate the best train.py's constants, submit, wait, repeat.

It runs the whole research loop through the API without an LLM, and is the control that LLM
agents are compared against: an agent that cannot beat random hyperparameter search on the same
budget has not learned anything from the results.

Before submitting, it asks "has this been tried?" (POST /similar): a draw whose change was
already measured, or is being measured (the same train.py, the same change, or the same
constants set to nearby values: server/rules/similarity.py), is drawn again, so that runs go to values
not yet measured (bench/tried.py measures what that buys).
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from agent.mutation import mutate_constants
from client import ApiError, Client
from client.api import Submitted
from protocol.schemas import BestOut, ExperimentOut, SimilarExperiment
from protocol.states import FINAL_STATUSES, RETRYABLE_STATUSES, ExperimentStatus, SimilarityKind

HYPOTHESIS = "random-search control: one or two hyperparameter constants moved at random"
# Draws per submission before giving up on finding an untried change (and submitting the last
# draw anyway): with one constant moved by at most a factor 2, a quarter of the range is covered
# by each measured value near the best, so 20 tried draws in a row mean the neighbourhood is spent.
MAX_DRAWS = 20


@dataclass
class Tally:
    """What the agent did: experiments it submitted and how each one ended."""

    submitted: list[int] = field(default_factory=list)
    finished: list[ExperimentOut] = field(default_factory=list)

    @property
    def kept(self) -> int:
        return sum(1 for experiment in self.finished if experiment.status == ExperimentStatus.KEPT)


def tried_by(similar: list[SimilarExperiment]) -> SimilarExperiment | None:
    """The most alike of these similar experiments that made this change or nearly (one that only
    moved the same constants the same way, further or not as far, is another draw) and was
    measured or is being measured (not cancelled or lost with its workers), or None."""
    return next(
        (
            s
            for s in similar
            if s.kind != SimilarityKind.SAME_DIRECTION and s.status not in RETRYABLE_STATUSES
        ),
        None,
    )


def _draw(
    client: Client, best: BestOut, rng: random.Random, say: Callable[[str], None], skip_tried: bool
) -> tuple[str, str]:
    """A mutation of the best (source, description); with `skip_tried`, one not tried yet if one
    of MAX_DRAWS draws is."""
    for _ in range(MAX_DRAWS if skip_tried else 1):
        source, change = mutate_constants(best.train_py, rng)
        if not skip_tried:
            break
        tried = tried_by(client.similar(train_py=source, base=best.commit).similar)
        if tried is None:
            break
        how = f"{tried.status}, {tried.kind}"
        say(f"skipping {change}: tried in experiment {tried.experiment_id} ({how})")
    else:
        say(f"every one of {MAX_DRAWS} draws was tried; submitting the last one")
    return source, change


def _submit_one(
    client: Client, rng: random.Random, say: Callable[[str], None], skip_tried: bool, track: str | None
) -> Submitted | None:
    """Mutate the current best of the track and submit it there (its base names the track); None
    when the agent's queue is full (429)."""
    best = client.best(track)
    source, change = _draw(client, best, rng, say, skip_tried)
    try:
        experiment = client.submit(
            f"random: {change}", train_py=source, base=best.commit, hypothesis=HYPOTHESIS
        )
    except ApiError as error:
        if error.status == 429:
            return None
        raise
    if experiment.existing:
        say(f"experiment {experiment.id} already ran this train.py ({change}); following it")
    else:
        say(f"submitted experiment {experiment.id}: {change}")
    return experiment


def run_random_agent(
    client: Client,
    rng: random.Random,
    say: Callable[[str], None],
    *,
    count: int = 0,
    parallel: int = 1,
    poll_s: float = 2.0,
    stop: threading.Event | None = None,
    skip_tried: bool = True,
    track: str | None = None,
) -> Tally:
    """Submit `count` experiments to `track` (None: the only one) (0: until `stop` is set), at most
    `parallel` unfinished at a time; with `skip_tried`, draw again rather than submit a change that
    was already tried.

    Each submission starts from the best at that moment, so with `parallel=1` every change builds
    on the decisions before it. Re-based experiments are followed to their re-runs.
    """
    stop = stop or threading.Event()
    tally = Tally()
    in_flight: set[int] = set()
    queue_full = False
    while not stop.is_set() and (in_flight or count == 0 or len(tally.submitted) < count):
        while len(in_flight) < parallel and (count == 0 or len(tally.submitted) < count):
            submitted = _submit_one(client, rng, say, skip_tried, track)
            if submitted is None:  # the server's per-agent queue limit: wait for decisions first
                if not queue_full:
                    say("this agent has as many experiments queued as the server allows; waiting")
                queue_full = True
                break
            queue_full = False
            tally.submitted.append(submitted.id)
            in_flight.add(submitted.id)
        if stop.wait(poll_s):
            break
        for experiment_id in sorted(in_flight):
            experiment = client.experiment(experiment_id)
            if experiment.status not in FINAL_STATUSES:
                continue
            in_flight.discard(experiment_id)
            if experiment.rebased_to:
                say(f"experiment {experiment_id} re-based onto a newer best as {experiment.rebased_to}")
                in_flight.add(experiment.rebased_to)
                continue
            tally.finished.append(experiment)
            say(_decision(experiment))
    return tally


def _decision(experiment: ExperimentOut) -> str:
    score = experiment.val_bpb
    shown = f"val_bpb {score:.6f}" if score is not None else "no score"
    reason = experiment.reason or "-"
    return f"experiment {experiment.id} {experiment.status}: {shown} ({reason})"
