"""bench/research_night.py and its parts: the two loops at a tiny size, the fleet rules, the fit's
data and the chart, each on an invariant a wrong simulator would break."""

from __future__ import annotations

import math
import tempfile
from collections.abc import Container
from pathlib import Path

import numpy as np
import pytest

from bench.night_effects import HISTORIES, log_erfc, read_history
from bench.night_plot import chart
from bench.night_rules import Corrections, best_out_of_limits, recent, slowed
from bench.research_night import (
    BASELINE_BPB,
    Scenario,
    Server,
    autoresearch,
    make_fleet,
)
from server.core.config import ServerSettings
from server.rules.worker_offsets import Measured, corrected, worker_offsets

SETTINGS = ServerSettings(data_dir=Path(tempfile.gettempdir()))


class Fixed:
    """Each proposal a new change with the next effect of a cycle (val_bpb; None crashes)."""

    kinds: tuple[str, ...] = ("good", "null", "harmful", "fail")
    null_kinds: frozenset[str] = frozenset({"null", "harmful"})

    def __init__(self, *effects: float) -> None:
        self.cycle, self.effects = effects, list[float]()

    def propose(self, rng: np.random.Generator, excluded: Container[int]) -> int:
        self.effects.append(self.cycle[len(self.effects) % len(self.cycle)])
        return len(self.effects) - 1

    def effect(self, idea: int) -> float | None:
        return self.effects[idea]

    def kind(self, idea: int) -> str:
        effect = self.effects[idea]
        return "good" if effect < 0 else "harmful" if effect > 0 else "null"


def both(scenario: Scenario, effects: tuple[float, ...], seed: int = 0) -> tuple:
    fleet = make_fleet(scenario, np.random.default_rng([seed, 0]))
    greedy = autoresearch(scenario, Fixed(*effects), fleet, SETTINGS, np.random.default_rng([seed, 1]))
    server = Server(
        scenario, Fixed(*effects), fleet, SETTINGS, Corrections(), np.random.default_rng([seed, 2])
    )
    return greedy, server.run()


def test_without_noise_both_loops_keep_exactly_the_improvements() -> None:
    # Effects far above MIN_DELTA, noise a millionth of them: both keep every improvement they
    # decide and nothing harmful, and the lineage's true gain is the sum of what it kept.
    scenario = Scenario(gpus=2, hours=2.0, sigma=1e-8, spread=0.0, drift=0.0)
    greedy, server = both(scenario, (-0.01, 0.01, 0.01))
    assert greedy.kept["harmful"] == server.kept["harmful"] == 0
    assert greedy.kept["good"] == greedy.proposed["good"] > 0
    chosen_keeps = len(greedy.lineage) - 1  # the lineage starts at the baseline
    assert greedy.gain == pytest.approx(0.01 * chosen_keeps)
    # The server decides a change in two runs or three (a rebase): all but the last few are kept.
    assert server.proposed["good"] - 2 * scenario.gpus <= server.kept["good"] <= server.proposed["good"]
    assert server.gain == pytest.approx(0.01 * server.kept["good"])
    assert server.lineage[-1][1] == pytest.approx(BASELINE_BPB - server.gain)


def test_with_null_changes_only_nothing_improves_and_greedy_keeps_its_records() -> None:
    # A greedy loop's best is the lowest run so far, so a null change is kept when its run is a
    # new record: after n runs, sum(1/k, k = 2..n) keeps on average, not half of them.
    scenario = Scenario(gpus=16, hours=4.0, spread=0.0, drift=0.0)
    greedy, server = both(scenario, (0.0,))
    assert greedy.gain == server.gain == 0.0
    proposals = greedy.proposed["null"] // scenario.gpus
    records = scenario.gpus * sum(1 / k for k in range(2, proposals + 2))
    assert abs(greedy.kept["null"] - records) < 4 * math.sqrt(records), (greedy.kept, records)
    assert greedy.kept["null"] < 0.2 * greedy.proposed["null"]
    assert server.false_keeps <= 0.10


def test_a_slow_gpu_reads_worse_by_its_offset() -> None:
    fleet = make_fleet(Scenario(gpus=3, spread=0.02, drift=0.0), np.random.default_rng(1))
    for gpu in range(3):
        assert fleet.offset(gpu, 3600.0) == pytest.approx(-0.1 * fleet.speed[gpu])


def test_worker_offsets_are_recovered_and_centred() -> None:
    # Three commits, each measured on every worker, exact runs: the offsets come back exactly.
    truth = {0: 0.002, 1: -0.001, 2: 0.0005, 3: -0.0015}
    groups = [
        [Measured(level + truth[w], w, 60.0 * (3 * c + w)) for w in truth]
        for c, level in enumerate((1.0, 0.99, 0.985))
    ]
    offsets = worker_offsets(groups, half_life_h=0.0)
    centre = sum(truth.values()) / len(truth)
    for worker, offset in truth.items():
        assert offsets.at(worker, 0.0) == pytest.approx(offset - centre, abs=1e-9)
    assert offsets.at(99, 0.0) == 0.0  # a worker never measured
    assert corrected(groups[0], offsets) == pytest.approx([1.0 - centre] * 4, abs=1e-9)


def test_offsets_with_a_half_life_follow_a_gpu_that_slows_down() -> None:
    # Worker 1 reads 0.003 worse from hour 4; the best is measured on both workers every 20 min.
    groups = [
        [Measured(1.0 + (0.003 if w == 1 and t >= 4 * 3600 else 0.0), w, t) for t in range(0, 8 * 3600, 1200)]
        for w in (0, 1)
    ]
    runs = [[run for group in groups for run in group]]
    offsets = worker_offsets(runs, half_life_h=0.5, shrink=0.0)
    early = offsets.at(1, 2 * 3600) - offsets.at(0, 2 * 3600)
    late = offsets.at(1, 7 * 3600) - offsets.at(0, 7 * 3600)
    assert abs(early) < 0.0003 and late == pytest.approx(0.003, abs=0.0003)


def test_a_best_s_value_rests_on_recent_runs_and_a_far_repeat_is_out_of_limits() -> None:
    runs = [Measured(1.0, 0, 3600.0 * h) for h in range(8)]
    assert [r.time for r in recent(runs, 8 * 3600.0, 2.0, 4)] == [3600.0 * h for h in range(4, 8)]
    assert [r.time for r in recent(runs, 8 * 3600.0, 2.5, 1)] == [3600.0 * h for h in range(6, 8)]
    assert best_out_of_limits([1.0, 1.001, 0.999, 1.0], 1.004, 0.001, 3.0)
    assert not best_out_of_limits([1.0, 1.001, 0.999, 1.0], 1.003, 0.001, 3.0)


def test_only_a_run_far_worse_than_its_reference_is_presumed_slowed() -> None:
    assert slowed(1.0031, 1.0, 0.001, 3.0)
    assert not slowed(1.0029, 1.0, 0.001, 3.0)
    assert not slowed(0.99, 1.0, 0.001, 3.0)  # far better is evidence, not a slow-down
    assert (
        not slowed(1.1, None, 0.001, 3.0)
        and not slowed(1.1, 1.0, None, 3.0)
        and not slowed(1.1, 1.0, 0.001, 0.0)
    )


def test_the_h100_history_reads_as_published() -> None:
    # 125 experiments after the baseline: 2 crashed or broke training, 22 kept, 0.9979 -> 0.9697.
    history = read_history(HISTORIES["h100"])
    assert (len(history.values), history.fails, sum(history.kept)) == (123, 2, 22)
    assert history.gain == pytest.approx(0.997900 - 0.969686)


def test_log_erfc_agrees_with_the_standard_library() -> None:
    x = np.linspace(-4.0, 25.0, 300)
    exact = np.array([math.log(math.erfc(v)) for v in x])
    assert np.abs(log_erfc(x) - exact).max() < 1e-6


def test_the_chart_is_a_png_of_its_size() -> None:
    canvas = chart({"(B) SERVER": ([(0.0, 1.0), (2.0, 0.99)], (0, 0, 255), 0)}, 4.0, "TITLE", 320, 200)
    png = canvas.png()
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and png[16:24] == (320).to_bytes(4, "big") + (200).to_bytes(
        4, "big"
    )
    assert (canvas.pixels == (0, 0, 255)).all(axis=2).any()
