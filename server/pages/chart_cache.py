"""The rendered progress chart, kept until the finished experiments or the best's runs change.

With ten thousand experiments, reading every finished one and drawing the chart is most of the
cost of the leaderboard, yet it changes only when an experiment finishes or the best is run again.
Each request reads a cheap key (counts and id sums per status, from an index, plus the best's
runs and the noise estimate: `pages.chart_signature`); when it moved, only the experiments that
finished after the last one read are fetched, the kept ones' means are read again (a best's
repeats move its mean), and the chart is redrawn. One chart per track.
Should the rows read so far plus the new ones not add up to the key (an experiment that finished
"before" the last one read, by a clock that went back), everything is read again. One cache per
app, so that two apps in one process never share charts.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime

from markupsafe import Markup
from sqlalchemy.orm import Session

from protocol.states import ExperimentStatus
from server.crud import pages
from server.models import FIRST_TRACK_ID
from server.pages.chart import Finished, build_chart
from server.pages.templating import templates

Totals = dict[str, tuple[int, int]]  # status -> (count, sum of ids)


@dataclass(frozen=True)
class Plotted:
    """The plotted experiments read so far, in order of completion (never changed: extended)."""

    points: list[Finished] = field(default_factory=list)
    totals: Totals = field(default_factory=dict)
    last: tuple[datetime, int] | None = None  # (finished_at, id) of the last row read
    crashed_runs: int = 0  # reverted without a score

    def extended(self, rows: list[pages.PlottedRow]) -> Plotted:
        totals = dict(self.totals)
        crashed = self.crashed_runs
        for row in rows:
            count, ids = totals.get(row.status, (0, 0))
            totals[row.status] = (count + 1, ids + row.id)
            crashed += row.status == ExperimentStatus.REVERTED and row.val_bpb is None
        last = self.last
        if rows:
            last = (rows[-1].finished_at, rows[-1].id) if rows[-1].finished_at is not None else None
        points = self.points + [Finished(r.id, r.kept, r.val_bpb, r.description, r.runs) for r in rows]
        return Plotted(points, totals, last, crashed)

    def with_kept(self, values: dict[int, tuple[float | None, int]]) -> Plotted:
        """The same points, with the kept experiments' current means and runs."""
        points = [
            p._replace(val_bpb=values[p.id][0], runs=values[p.id][1]) if p.kept and p.id in values else p
            for p in self.points
        ]
        return Plotted(points, self.totals, self.last, self.crashed_runs)


@dataclass(frozen=True)
class PlottedView:
    key: pages.ChartSignature
    plotted: Plotted
    markup: Markup  # the chart's <figure>


class ChartCache:
    def __init__(self) -> None:
        self._views: dict[int, PlottedView] = {}  # by track

    def view(self, session: Session, totals: Totals, track_id: int = FIRST_TRACK_ID) -> PlottedView:
        """The track's chart; `totals` are its status totals (pages.status_totals)."""
        key = pages.chart_signature(session, totals, track_id)
        view = self._views.get(track_id)  # one read: another thread may replace it, which is fine
        if view is not None and view.key == key:
            return view
        plotted = None
        if view is not None and view.plotted.last is not None:
            rows = pages.plotted_rows(session, after=view.plotted.last, track_id=track_id)
            plotted = view.plotted.extended(rows)
        if plotted is None or pages.plotted_key(plotted.totals) != key.plotted:
            plotted = Plotted().extended(pages.plotted_rows(session, track_id=track_id))
        plotted = plotted.with_kept(pages.kept_values(session, track_id))
        chart = build_chart(plotted.points, key.noise.sigma if key.noise is not None else None)
        markup = Markup(templates.get_template("_chart.html").render(chart=chart))
        view = PlottedView(replace(key, plotted=pages.plotted_key(plotted.totals)), plotted, markup)
        self._views[track_id] = view
        return view
