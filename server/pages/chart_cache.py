"""The rendered progress chart, kept until the set of finished experiments changes.

With ten thousand experiments, reading every finished one and drawing the chart is most of the
cost of the leaderboard, yet it changes only when an experiment finishes. Each request reads a
cheap key (counts and id sums per status, from an index: `queries.plotted_key`); when it moved,
only the experiments that finished after the last one read are fetched and the chart is redrawn.
Should the rows read so far plus the new ones not add up to the key (an experiment that finished
"before" the last one read, by a clock that went back), everything is read again. One cache per
app, so that two apps in one process never share charts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from markupsafe import Markup
from sqlalchemy.orm import Session

from server.models import REVERTED
from server.pages import queries
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

    def extended(self, rows: list[queries.PlottedRow]) -> Plotted:
        totals = dict(self.totals)
        crashed = self.crashed_runs
        for row in rows:
            count, ids = totals.get(row.status, (0, 0))
            totals[row.status] = (count + 1, ids + row.id)
            crashed += row.status == REVERTED and row.val_bpb is None
        last = self.last
        if rows:
            last = (rows[-1].finished_at, rows[-1].id) if rows[-1].finished_at is not None else None
        points = self.points + [Finished(r.id, r.kept, r.val_bpb, r.description) for r in rows]
        return Plotted(points, totals, last, crashed)


@dataclass(frozen=True)
class PlottedView:
    key: tuple[tuple[int, int], ...]
    plotted: Plotted
    markup: Markup  # the chart's <figure>


class ChartCache:
    def __init__(self) -> None:
        self._view: PlottedView | None = None

    def view(self, session: Session, totals: Totals) -> PlottedView:
        key = queries.plotted_key(totals)
        view = self._view  # one read: another thread may replace it meanwhile, which is fine
        if view is not None and view.key == key:
            return view
        plotted = None
        if view is not None and view.plotted.last is not None:
            plotted = view.plotted.extended(queries.plotted_rows(session, after=view.plotted.last))
        if plotted is None or queries.plotted_key(plotted.totals) != key:
            plotted = Plotted().extended(queries.plotted_rows(session))
        chart = build_chart(plotted.points)
        markup = Markup(templates.get_template("_chart.html").render(chart=chart))
        view = PlottedView(queries.plotted_key(plotted.totals), plotted, markup)
        self._view = view
        return view
