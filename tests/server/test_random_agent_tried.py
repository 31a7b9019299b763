"""The random agent asks "has this been tried?" before submitting (agent/random_agent.py), against
a real server: a draw that was already submitted, or set the same constant to a nearby value, is
drawn again; with the check off it is submitted; when every draw was tried it says so and submits
the last one."""

from __future__ import annotations

import random

from agent.mutation import mutate_constants
from agent.random_agent import MAX_DRAWS, _draw, tried_by
from tests.server.conftest import BASELINE, Live, LiveFactory


def test_a_draw_that_was_tried_is_drawn_again(live: Live) -> None:
    other, agent = live.client("agent", "other"), live.client("agent", "random")
    best = agent.best()
    first, change = mutate_constants(best.train_py, random.Random(5))
    other.submit("tried already", train_py=first)
    said: list[str] = []
    source, _ = _draw(agent, best, random.Random(5), said.append, skip_tried=True)
    assert source != first
    assert said[0].startswith(f"skipping {change}: tried in experiment 2 (queued, identical)")
    assert tried_by(agent.similar(train_py=source).similar) is None  # what it submits is new
    unchecked, _ = _draw(agent, best, random.Random(5), said.append, skip_tried=False)
    assert unchecked == first


def test_a_nearby_value_counts_as_tried_and_a_cancelled_one_does_not(live: Live) -> None:
    agent = live.client("agent")
    near = agent.submit(
        "lr 0.0201", train_py=BASELINE.replace("LEARNING_RATE = 0.01", "LEARNING_RATE = 0.0201")
    )
    similar = agent.similar(train_py=BASELINE.replace("LEARNING_RATE = 0.01", "LEARNING_RATE = 0.02")).similar
    assert tried_by(similar).experiment_id == near.id
    agent.cancel(near.id)
    similar = agent.similar(train_py=BASELINE.replace("LEARNING_RATE = 0.01", "LEARNING_RATE = 0.02")).similar
    assert [s.status for s in similar] == ["cancelled"] and tried_by(similar) is None


def test_when_every_draw_was_tried_the_last_one_is_submitted(live_factory: LiveFactory) -> None:
    # One power-of-two constant: a draw can only halve or double it, and both were tried.
    live = live_factory(baseline="DEPTH = 4\n\n\ndef build_model(ctx):\n    raise NotImplementedError\n")
    agent = live.client("agent")
    best = agent.best()
    for depth in (2, 8):
        agent.submit(f"depth {depth}", train_py=best.train_py.replace("DEPTH = 4", f"DEPTH = {depth}"))
    said: list[str] = []
    source, _ = _draw(agent, best, random.Random(1), said.append, skip_tried=True)
    assert source in {best.train_py.replace("DEPTH = 4", f"DEPTH = {d}") for d in (2, 8)}
    assert (
        len(said) == MAX_DRAWS + 1
        and said[-1] == f"every one of {MAX_DRAWS} draws was tried; submitting the last one"
    )
