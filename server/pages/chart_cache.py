"""The rendered progress chart, kept until the set of finished experiments changes.

With ten thousand experiments, reading every finished one and drawing the chart is most of the
cost of the leaderboard, yet it changes only when an experiment finishes. Each request reads a
cheap key (counts and id sums per status, from an index: `queries.plotted_key`) and redraws only
when the key moved. One cache per app, so that two apps in one process never share charts.
"""

from __future__ import annotations

from dataclasses import dataclass

from markupsafe import Markup
from sqlalchemy.orm import Session

from server.pages import queries
from server.pages.chart import build_chart
from server.pages.templating import templates


@dataclass(frozen=True)
class PlottedView:
    key: tuple[tuple[int, int], ...]
    markup: Markup  # the chart's <figure>
    points: int
    crashed_runs: int  # reverted without a score, for the summary


class ChartCache:
    def __init__(self) -> None:
        self._view: PlottedView | None = None

    def view(self, session: Session, totals: dict[str, tuple[int, int]]) -> PlottedView:
        key = queries.plotted_key(totals)
        view = self._view  # one read: another thread may replace it meanwhile, which is fine
        if view is None or view.key != key:
            chart = build_chart(queries.finished_points(session))
            markup = Markup(templates.get_template("_chart.html").render(chart=chart))
            view = PlottedView(key, markup, chart.count, queries.unscored_reverted(session))
            self._view = view
        return view
