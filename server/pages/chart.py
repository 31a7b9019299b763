"""Geometry of the progress chart: finished experiments by order of completion, and the best.

This is the chart autoresearch draws after a night of experiments: x is the order in which
experiments finished, y is val_bpb (lower is better; an experiment's mean over its runs);
reverted results are grey dots, kept ones are highlighted and labelled, and the best so far is a
step line at each best's mean, in a band of plus or minus one standard error of that mean (the
noise estimate over the square root of its runs). Experiments that ended without a score
(crashes, infrastructure failures) sit as red dots in a lane above the plot.

Points that are not kept are drawn as one SVG path of zero-length segments with round caps (one
`M x y h0` per point), so that ten thousand of them cost a few hundred kilobytes of markup and
one DOM node instead of ten thousand.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

WIDTH, HEIGHT = 1000.0, 440.0
LEFT, RIGHT, TOP, BOTTOM = 70.0, 24.0, 64.0, 48.0  # room for axis labels and the kept labels
FAILED_LANE_Y = TOP - 14.0  # the lane of experiments that have no score
LABEL_CHARS = 42
MIN_LABEL_GAP = 30.0  # user units between labelled points; closer slanted labels would overlap
LABEL_RUN_PER_CHAR = 5.3  # horizontal extent of one label character (11px text slanted by 28 degrees)


class Finished(NamedTuple):
    """One finished experiment as the chart needs it (a tuple: ten thousand are made per chart)."""

    id: int
    kept: bool
    val_bpb: float | None  # None: ended without a score; else the mean of its runs
    description: str = ""
    runs: int = 1  # valid runs behind val_bpb


class KeptMark(NamedTuple):
    id: int
    x: float
    y: float
    val_bpb: float
    description: str
    label: str | None = None  # None where a label would crowd another one or run off the chart
    label_left: bool = False  # near the right edge: the label ends at the point instead of starting there


@dataclass(frozen=True)
class Tick:
    at: float
    label: str


@dataclass(frozen=True)
class Chart:
    count: int  # points drawn: every finished experiment
    reverted_path: str
    failed_path: str
    kept: list[KeptMark]
    best_path: str
    band_path: str  # the best's mean plus or minus one standard error
    y_ticks: list[Tick]
    x_ticks: list[Tick]
    clipped: int  # scored points above the top of the y range, drawn at its edge
    width: float = WIDTH
    height: float = HEIGHT
    left: float = LEFT
    right: float = WIDTH - RIGHT
    top: float = TOP
    bottom: float = HEIGHT - BOTTOM


def nice_step(span: float, target_ticks: int) -> float:
    """A step of 1, 2 or 5 times a power of ten that cuts `span` into about `target_ticks` parts."""
    raw = span / max(target_ticks, 1)
    magnitude = 10 ** math.floor(math.log10(raw))
    for multiple in (1.0, 2.0, 5.0, 10.0):
        if raw <= multiple * magnitude:
            return multiple * magnitude
    return 10.0 * magnitude


def y_range(scores: Sequence[float], reference: float | None) -> tuple[float, float]:
    """The val_bpb range shown: all scores, but not far above the reference (the baseline).

    A diverged run (val_bpb 8 when the best is 1.0) would otherwise squash every other point
    into a line. Scores above the baseline by more than the progress made so far, or by more
    than 2 % of the baseline if that is more, are drawn at the top edge instead.
    """
    low, high = min(scores), max(scores)
    if reference is not None:
        high = min(high, reference + max(reference - low, abs(reference) * 0.02))
    if high - low < 1e-9:
        pad = max(abs(low) * 0.01, 1e-3)
        return low - pad, high + pad
    pad = (high - low) * 0.06
    return low - pad, high + pad


def _label(description: str) -> str:
    text = " ".join(description.split())
    return text if len(text) <= LABEL_CHARS else text[: LABEL_CHARS - 1] + "…"


def _labelled(kept: list[KeptMark]) -> list[KeptMark]:
    """The kept marks, labelled where labels fit: the biggest improvements first.

    A label needs MIN_LABEL_GAP of room on both sides. Labels slant up to the right; the one
    nearest the right edge may instead sit level, to the left of its point (the empty area under
    the best line); others that would run off the chart stay unlabelled (their titles remain).
    """
    gains = [math.inf] + [a.val_bpb - b.val_bpb for a, b in itertools.pairwise(kept)]
    chosen_x: list[float] = []
    chosen: set[int] = set()
    for i in sorted(range(len(kept)), key=lambda i: (-gains[i], i)):
        at = bisect.bisect_left(chosen_x, kept[i].x)
        crowded_left = at > 0 and kept[i].x - chosen_x[at - 1] < MIN_LABEL_GAP
        crowded_right = at < len(chosen_x) and chosen_x[at] - kept[i].x < MIN_LABEL_GAP
        if not (crowded_left or crowded_right):
            chosen_x.insert(at, kept[i].x)
            chosen.add(i)
    last = max(chosen, default=-1)
    kept = list(kept)
    for i in sorted(chosen):
        label = _label(kept[i].description)
        if kept[i].x + len(label) * LABEL_RUN_PER_CHAR <= WIDTH:
            kept[i] = kept[i]._replace(label=label)
        elif i == last:
            kept[i] = kept[i]._replace(label=label, label_left=True)
    return kept


def _y_ticks(low: float, high: float, scale: float, bottom: float) -> list[Tick]:
    step = nice_step(high - low, 5)
    decimals = max(0, -math.floor(math.log10(step))) if step < 1 else 0
    first = math.ceil(low / step) * step
    ticks = []
    value = first
    while value <= high + step * 1e-9:
        ticks.append(Tick(bottom - (value - low) * scale, f"{value:.{decimals}f}"))
        value = first + len(ticks) * step
    return ticks


def _x_ticks(count: int, x_of: list[float]) -> list[Tick]:
    if count == 0:
        return []
    step = max(1, int(nice_step(count, 8))) if count > 1 else 1
    numbers = [1, *range(step, count + 1, step)] if step > 1 else list(range(1, count + 1))
    return [Tick(x_of[n - 1], str(n)) for n in sorted(set(numbers))]


def build_chart(points: Sequence[Finished], sigma: float | None = None) -> Chart:
    """The chart of `points`, given in order of completion; `sigma`, the noise estimate, sets the
    width of the best's band (none without it)."""
    count = len(points)
    plot_left, plot_right, plot_top, plot_bottom = LEFT, WIDTH - RIGHT, TOP, HEIGHT - BOTTOM
    x_step = (plot_right - plot_left) / max(count, 1)
    x_of = [plot_left + x_step * (i + 0.5) for i in range(count)]
    scores = [p.val_bpb for p in points if p.val_bpb is not None]
    failed = [f"M{x_of[i]:.1f} {FAILED_LANE_Y:.1f}h0" for i, p in enumerate(points) if p.val_bpb is None]
    if not scores:
        return Chart(count, "", "".join(failed), [], "", "", [], _x_ticks(count, x_of), 0)
    reference = next((p.val_bpb for p in points if p.kept and p.val_bpb is not None), None)
    low, high = y_range(scores, reference)
    scale = (plot_bottom - plot_top) / (high - low)
    reverted: list[str] = []
    kept: list[KeptMark] = []
    best_steps: list[str] = []
    band: list[tuple[float, float, float] | None] = []  # per best: (its x, top y, bottom y) or None
    clipped = 0
    for x, (id_, is_kept, score, description, runs) in zip(x_of, points, strict=True):
        if score is None:
            continue
        if score > high:  # off the scale: drawn at the top edge
            clipped += 1
            y = plot_top
        else:
            y = plot_bottom - (score - low) * scale
        if not is_kept:
            # Whole units are finer than a dot: 906 of them span the plot, a dot is 3 to 6 wide.
            reverted.append(f"M{round(x)} {round(y)}h0")
            continue
        kept.append(KeptMark(id_, x, y, score, description))
        # The best holds until the next keep: a horizontal run, then a drop to the new best.
        best_steps.append(f"H{x:.1f}V{y:.1f}" if best_steps else f"M{x:.1f} {y:.1f}")
        half = sigma / math.sqrt(runs) * scale if sigma is not None and runs > 0 else None
        band.append((x, max(plot_top, y - half), min(plot_bottom, y + half)) if half is not None else None)
    if best_steps:
        best_steps.append(f"H{x_of[-1]:.1f}")
    # Each best's band runs from its mark to the next best's (the last one to the chart's end).
    ends = [kept_mark.x for kept_mark in kept[1:]] + [x_of[-1]] * bool(kept)
    band_path = "".join(
        f"M{b[0]:.1f} {b[1]:.1f}H{end:.1f}V{b[2]:.1f}H{b[0]:.1f}Z"
        for b, end in zip(band, ends, strict=True)
        if b is not None
    )
    return Chart(
        count=count,
        reverted_path="".join(reverted),
        failed_path="".join(failed),
        kept=_labelled(kept),
        best_path="".join(best_steps),
        band_path=band_path,
        y_ticks=_y_ticks(low, high, scale, plot_bottom),
        x_ticks=_x_ticks(count, x_of),
        clipped=clipped,
    )
