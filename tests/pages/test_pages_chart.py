"""The progress chart's geometry: one mark per finished experiment, inside the plot, in order."""

from __future__ import annotations

import itertools
import math
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from server.pages.chart import FAILED_LANE_Y, MIN_LABEL_GAP, Chart, Finished, build_chart, nice_step, y_range

_MOVE = re.compile(r"M(-?[\d.]+) (-?[\d.]+)h0")


def dots(path: str) -> list[tuple[float, float]]:
    return [(float(x), float(y)) for x, y in _MOVE.findall(path)]


def best_line_vertices(path: str) -> list[tuple[float, float]]:
    """The corners of the step line "Mx yHx'Vy'...Hx_end" where the best changes."""
    first = re.match(r"M(-?[\d.]+) (-?[\d.]+)", path)
    assert first is not None
    corners = [(float(first.group(1)), float(first.group(2)))]
    corners += [(float(x), float(y)) for x, y in re.findall(r"H(-?[\d.]+)V(-?[\d.]+)", path)]
    return corners


scores = st.floats(min_value=0.5, max_value=12.0, allow_nan=False)
finished_lists = st.lists(
    st.tuples(st.booleans(), st.one_of(st.none(), scores), st.text(max_size=80)),
    max_size=120,
).map(
    lambda items: [
        Finished(i + 1, kept and bpb is not None, bpb, text) for i, (kept, bpb, text) in enumerate(items)
    ]
)


def in_plot(chart: Chart, x: float, y: float) -> bool:
    slack = 0.5  # dots are drawn at whole units, kept marks at one decimal
    return chart.left - slack <= x <= chart.right + slack and chart.top - slack <= y <= chart.bottom + slack


@given(finished_lists)
def test_every_finished_experiment_is_one_mark(points: list[Finished]) -> None:
    chart = build_chart(points)
    reverted, failed = dots(chart.reverted_path), dots(chart.failed_path)
    assert chart.count == len(points)
    assert len(reverted) + len(failed) + len(chart.kept) == len(points)
    assert len(failed) == sum(p.val_bpb is None for p in points)
    assert [k.id for k in chart.kept] == [p.id for p in points if p.kept]


@given(finished_lists)
def test_marks_lie_in_the_plot_in_order_of_completion(points: list[Finished]) -> None:
    chart = build_chart(points)
    for x, y in dots(chart.reverted_path) + [(k.x, k.y) for k in chart.kept]:
        assert in_plot(chart, x, y)
    for x, y in dots(chart.failed_path):
        assert chart.left <= x <= chart.right and y == FAILED_LANE_Y
    # x follows the order of completion: the marks of all kinds, merged, are strictly increasing.
    xs = sorted(
        [x for x, _ in dots(chart.reverted_path) + dots(chart.failed_path)]
        + [round(k.x, 1) for k in chart.kept]
    )
    assert all(b > a for a, b in itertools.pairwise(xs))


@given(finished_lists)
def test_lower_scores_are_drawn_lower_on_the_page_never_higher(points: list[Finished]) -> None:
    chart = build_chart(points)
    kept = chart.kept
    for a in kept:
        for b in kept:
            if a.val_bpb < b.val_bpb:
                assert a.y >= b.y  # SVG y grows downwards: a lower val_bpb sits lower
    ticks = [float(t.label) for t in chart.y_ticks]
    assert ticks == sorted(ticks)


@given(finished_lists)
def test_best_line_steps_through_every_kept_experiment(points: list[Finished]) -> None:
    chart = build_chart(points)
    if not chart.kept:
        assert chart.best_path == ""
        return
    corners = best_line_vertices(chart.best_path)
    assert [(round(k.x, 1), round(k.y, 1)) for k in chart.kept] == corners
    # The best holds to the last experiment: the line ends at its x (the plot's right minus half a step).
    end = float(re.findall(r"H(-?[\d.]+)$", chart.best_path)[0])
    assert end == pytest.approx(chart.right - (chart.right - chart.left) / (2 * len(points)), abs=0.051)


@given(finished_lists)
def test_labels_never_crowd_each_other(points: list[Finished]) -> None:
    labelled = [k for k in build_chart(points).kept if k.label is not None]
    assert all(b.x - a.x >= MIN_LABEL_GAP for a, b in itertools.pairwise(labelled))
    for k in labelled:
        assert k.label is not None and len(k.label) <= 42


def test_a_diverged_run_does_not_squash_the_others() -> None:
    points = [Finished(1, True, 1.0, "baseline"), Finished(2, True, 0.98, "better"), Finished(3, False, 8.0)]
    chart = build_chart(points)
    assert chart.clipped == 1
    _, high = y_range([1.0, 0.98, 8.0], reference=1.0)
    assert high < 1.05  # 8.0 would have made the two kept points one pixel apart
    assert chart.kept[1].y - chart.kept[0].y > 100


def test_no_finished_experiments_is_an_empty_chart() -> None:
    chart = build_chart([])
    assert (chart.count, chart.reverted_path, chart.failed_path, chart.kept) == (0, "", "", [])


@given(st.floats(min_value=1e-6, max_value=1e6), st.integers(min_value=1, max_value=20))
def test_nice_steps_are_one_two_or_five_times_a_power_of_ten(span: float, ticks: int) -> None:
    step = nice_step(span, ticks)
    mantissa = step / 10 ** math.floor(math.log10(step) + 1e-9)
    assert any(math.isclose(mantissa, m, rel_tol=1e-9) for m in (1.0, 2.0, 5.0, 10.0))
    assert span / step <= ticks * 1.0000001
