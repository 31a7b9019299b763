"""Each number of a tuple or list is a knob (issue 51): `ADAM_BETAS = (0.8, 0.95)` gives
`ADAM_BETAS[0]` and `ADAM_BETAS[1]`, which search, "has this been tried?", keep rates and near
misses name as they name any constant; and a change that moves the same knobs the same way as an
earlier one, further, names it (`same_direction`, "pushed further"). Through a live server, the
change judged by the noise-aware rule from a simulated worker's results."""

from __future__ import annotations

from protocol.constants import find_constants
from tests.server.conftest import BASELINE, LiveFactory, sim_worker
from tests.server.history_play import NOISE, summarised

SOURCE = BASELINE + "\n\nBETAS = (0.8, 0.95)\n"


def changed(lr: str, warmup: str, beta: str) -> str:
    return (
        SOURCE.replace("LEARNING_RATE = 0.01", f"LEARNING_RATE = {lr}")
        .replace("WARMUP_STEPS = 10", f"WARMUP_STEPS = {warmup}")
        .replace("BETAS = (0.8, 0.95)", f"BETAS = (0.8, {beta})")
    )


def test_a_tuples_numbers_are_knobs_everywhere_and_pushing_them_further_names_the_earlier_try(
    live_factory: LiveFactory,
) -> None:
    assert [(c.name, c.value) for c in find_constants(SOURCE)][-2:] == [("BETAS[0]", 0.8), ("BETAS[1]", 0.95)]
    live = live_factory(baseline=SOURCE, **NOISE)
    worker, agent = sim_worker(live), live.client("agent", "alice")
    for value in (1.0, 1.002, 0.998):  # the baseline, measured
        worker.run_next(value)
    earlier = agent.submit("three knobs up", train_py=changed("0.02", "15", "0.97")).id
    for value in (0.9985, 0.9995):  # promising, then not: a near miss
        assert worker.run_next(value).experiment_id == earlier
    assert agent.experiment(earlier).decision == "revert"
    summarised(live)

    def ids(constant: str) -> list[int]:
        return [e.id for e in agent.search(constant=constant).items]

    assert ids("BETAS") == ids("BETAS[1]") == [earlier] and ids("BETAS[0]") == []
    (near,) = agent.near_misses().items
    assert near.experiment_id == earlier
    assert {(c.name, c.old, c.new, c.direction) for c in near.changes.constants} == {
        ("LEARNING_RATE", 0.01, 0.02, "up"),
        ("WARMUP_STEPS", 10, 15, "up"),
        ("BETAS[1]", 0.95, 0.97, "up"),
    }
    (rate,) = agent.keep_rates(part="constant", name="BETAS[1]").kinds
    assert (rate.direction, rate.tried, rate.measured, rate.kept) == ("up", 1, 1, 0)

    further = agent.similar(train_py=changed("0.04", "20", "0.99")).similar
    assert [(s.experiment_id, s.kind) for s in further] == [(earlier, "same_direction")]
    assert further[0].detail == (
        "pushed further: LEARNING_RATE 0.01 -> 0.02 (here 0.01 -> 0.04), "
        "WARMUP_STEPS 10 -> 15 (here 10 -> 20), BETAS[1] 0.95 -> 0.97 (here 0.95 -> 0.99)"
    )
    assert further[0].decision == "revert" and further[0].effect is not None and further[0].effect < 0
    # Less far the same way is the same way; any knob the other way is not similar.
    assert (
        agent.similar(train_py=changed("0.015", "20", "0.99"))
        .similar[0]
        .detail.startswith("moved the same way: ")
    )
    assert agent.similar(train_py=changed("0.04", "20", "0.9")).similar == []
