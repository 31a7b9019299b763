"""The pages over plain HTTP: table paging, sorting and filtering, errors, offline assets.

One real server (uvicorn in a child process, SQLite, a research git repo) for the module. The
baseline is measured through the worker protocol; then 150 experiments are added in bulk to the
same database (as bench/pages.py does), enough for three pages of the table.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path

import httpx
import pytest

from server.core.db import Database, create_db_engine
from testkit.seeded_history import seed_experiments
from tests.pages.live_server import LiveServer, live_server
from tests.pages.research import Research

SEEDED = 150
IN_FLIGHT = 4
PAGE_SIZE = 50


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    data_dir = tmp_path_factory.mktemp("pages-http")
    with live_server(data_dir) as running:
        research = Research(running)
        research.run_next(1.0)  # the baseline, measured through the worker protocol
        research.close()
        db = Database(create_db_engine(f"sqlite:///{data_dir / 'autoresearch.db'}"))
        seed_experiments(db, SEEDED, in_flight=IN_FLIGHT, agents=("alice", "bob"))
        db.dispose()
        yield running


@pytest.fixture(scope="module")
def http(server: LiveServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=30) as client:
        yield client


class TableRows(HTMLParser):
    """The experiments table's rows: data-id, data-status and the text of every cell."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[dict[str, object]] = []
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if tag == "tr" and "data-id" in found:
            self.rows.append({"id": int(found["data-id"] or 0), "status": found["data-status"], "cells": []})
        elif tag == "td" and self.rows:
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag == "td" and self._cell is not None:
            cells = self.rows[-1]["cells"]
            assert isinstance(cells, list)
            cells.append(" ".join("".join(self._cell).split()))
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def table(html: str) -> list[dict[str, object]]:
    parser = TableRows()
    parser.feed(html)
    return parser.rows


def next_link(html: str) -> str | None:
    found = re.search(r'<a href="([^"]+)" rel="next">', html)
    return found.group(1).replace("&amp;", "&") if found else None


def test_the_table_pages_through_every_experiment_once(http: httpx.Client) -> None:
    seen: list[int] = []
    url: str | None = "/"
    while url is not None:
        page = http.get(url)
        assert page.status_code == 200
        rows = table(page.text)
        assert len(rows) == PAGE_SIZE or next_link(page.text) is None
        seen += [int(str(row["id"])) for row in rows]
        url = next_link(page.text)
    assert seen == sorted(seen, reverse=True)  # newest first by default
    assert seen == list(range(SEEDED + 1, 0, -1))  # the baseline (1) and every seeded experiment
    assert f"of {SEEDED + 1}" in http.get("/").text


def test_sorting_by_val_bpb_puts_the_best_first_and_unscored_last(http: httpx.Client) -> None:
    scores: list[float | None] = []
    url: str | None = "/?sort=val_bpb&order=asc"
    while url is not None:
        page = http.get(url).text
        scores += [None if row["cells"][2] == "—" else float(row["cells"][2]) for row in table(page)]  # type: ignore[index]
        url = next_link(page)
    measured = [s for s in scores if s is not None]
    assert measured == sorted(measured) and len(measured) > SEEDED / 2
    assert scores[len(measured) :] == [None] * (len(scores) - len(measured))
    best = http.get("/api/v1/best").json()["val_bpb"]
    assert measured[0] == pytest.approx(best, abs=1e-6)  # the table's best is the project's best
    assert 'aria-sort="ascending"' in http.get("/?sort=val_bpb&order=asc").text


def test_filters_by_status_and_agent(http: httpx.Client) -> None:
    kept = table(http.get("/?status=kept").text)
    api_kept = http.get("/api/v1/experiments", params={"status": "kept", "limit": 200}).json()["items"]
    assert sorted(int(str(r["id"])) for r in kept) == sorted(e["id"] for e in api_kept)
    assert kept and all(r["status"] == "kept" for r in kept)

    page = http.get("/", params={"agent": "bob", "status": "reverted"}).text
    rows = table(page)
    assert rows and all(r["status"] == "reverted" and r["cells"][5] == "bob" for r in rows)  # type: ignore[index]
    api_rows = http.get("/api/v1/experiments", params={"status": "reverted", "agent": "bob", "limit": 200})
    assert f"of {len(api_rows.json()['items'])}" in page
    # Empty fields from the filter form mean "all".
    assert len(table(http.get("/?status=&agent=").text)) == PAGE_SIZE


def test_the_summary_counts_match_the_api(http: httpx.Client) -> None:
    items = []
    cursor = None
    while True:
        answer = http.get(
            "/api/v1/experiments", params={"limit": 200, **({"cursor": cursor} if cursor else {})}
        )
        items += answer.json()["items"]
        cursor = answer.json()["next_cursor"]
        if cursor is None:
            break
    expected = {
        "kept": sum(e["status"] == "kept" for e in items),
        "reverted": sum(
            e["status"] in ("reverted", "rebased", "stale") and e["val_bpb"] is not None for e in items
        ),
        "crashed": sum(
            (e["status"] == "reverted" and e["val_bpb"] is None) or e["status"] == "infra_failed"
            for e in items
        ),
        "running": sum(e["status"] == "running" for e in items),
        "queued": sum(e["status"] == "queued" for e in items),
    }
    html = http.get("/").text
    shown = {name: int(n.replace(",", "")) for name, n in re.findall(r'data-count="(\w+)">([\d,]+)<', html)}
    assert shown == expected
    assert expected["crashed"] > 0 and expected["reverted"] > 0  # the seed has every kind
    points = sum(html.count("M") for html in re.findall(r'class="pts \w+" d="([^"]*)"', html))
    kept_marks = len(re.findall(r"<circle [^>]*data-id=", html))
    assert points + kept_marks == expected["kept"] + expected["reverted"] + expected["crashed"]


@pytest.mark.parametrize(
    ("query", "names"),
    [
        ("status=bogus", "bogus"),
        ("sort=bogus", "sort"),
        ("order=sideways", "order"),
        ("page=0", "page"),
        ("page=abc", "page"),
    ],
)
def test_bad_query_parameters_are_a_precise_422(http: httpx.Client, query: str, names: str) -> None:
    answer = http.get(f"/?{query}")
    assert answer.status_code == 422
    assert answer.headers["content-type"].startswith("application/problem+json")
    assert names in answer.text


def test_an_unknown_experiment_is_a_404_page(http: httpx.Client) -> None:
    answer = http.get("/experiments/999999")
    assert answer.status_code == 404
    assert "text/html" in answer.headers["content-type"]
    assert "There is no experiment 999999" in answer.text
    assert http.get("/experiments/0").status_code == 422


def test_the_baseline_page_shows_its_whole_train_py_as_added(http: httpx.Client, server: LiveServer) -> None:
    page = http.get("/experiments/1").text
    train_py = http.get("/api/v1/best").json()
    assert train_py["experiment_id"] != 1  # the seed moved the best on; the baseline's file is still shown
    baseline_lines = Path("harness/baseline/train.py").read_text().count("\n")
    assert page.count('<tr class="add">') == baseline_lines
    assert '<tr class="del">' not in page
    assert "none (the baseline)" in page


def test_pages_load_nothing_from_other_hosts(http: httpx.Client) -> None:
    """Everything is served by the app: the pages work offline."""
    pages = ["/", "/experiments/2", "/agents", "/workers"]
    assets: set[str] = set()
    for path in pages:
        html = http.get(path).text
        assert not re.search(r"""(src|href)=["'](https?:)?//""", html), path
        assets.update(re.findall(r"""(?:src|href)=["'](/static/[^"']+)["']""", html))
    assert {a.split("?")[0] for a in assets} == {
        "/static/pages.css",
        "/static/pages.js",
        "/static/experiment.js",
        "/static/favicon.svg",
    }
    for asset in assets:
        answer = http.get(asset)
        assert answer.status_code == 200, asset
        assert not re.search(
            r"(https?:)?//[a-z0-9.-]+\.[a-z]{2,}/", answer.text.replace("www.w3.org/2000/svg", "")
        )


def test_workers_and_agents_pages_list_who_did_the_work(http: httpx.Client) -> None:
    workers = http.get("/workers").text
    assert "gpu-0" in workers and 'data-online="true"' in workers  # the protocol's worker, just seen
    agents = http.get("/agents").text
    api = {a["agent"]: a for a in http.get("/api/v1/agents").json()["agents"]}
    for name in ("alice", "bob"):
        row = re.search(rf'<tr data-agent="{name}">(.*?)</tr>', agents, re.S)
        assert row is not None
        cells = re.findall(r"<td[^>]*>(.*?)</td>", row.group(1), re.S)
        assert int(cells[1]) == api[name]["kept"]
        judged = api[name]["kept"] + api[name]["reverted"] + api[name]["failed"]
        assert cells[2].strip() == f"{100 * api[name]['kept'] / judged:.1f} %"


def test_private_reads_keep_the_pages_private(tmp_path: Path) -> None:
    with (
        live_server(tmp_path, env={"PUBLIC_READS": "false"}) as private,
        httpx.Client(base_url=private.url) as http,
    ):
        assert http.get("/").status_code == 401
        assert http.get("/experiments/1").status_code == 401
        token = private.agent_tokens["alice"]
        assert http.get("/", headers={"Authorization": f"Bearer {token}"}).status_code == 200


def test_noise_aware_pages_state_decisions_as_effect_plus_minus_noise(tmp_path: Path) -> None:
    """The leaderboard shows the best as the mean of its runs ± its standard error, the noise and
    what it rests on, and the best's band in the chart; an experiment's page shows its effect ±
    noise, the runs on each side, the p-value and each of its runs."""
    env = {"DECISION_RULE": "noise_aware", "NOISE_RUNS": "3", "BEST_REPEATS": "1", "BEST_RERUN_EVERY": "0"}
    with live_server(tmp_path, env=env) as running, httpx.Client(base_url=running.url) as http:
        research = Research(running)
        for value in (1.0, 1.002, 0.998):  # the baseline and its repeats: sigma 0.002
            research.run_next(value)
        kept = research.submit("a better learning rate")
        research.run_next(0.994)
        answer = research.run_next(0.995)
        assert answer.decision == "keep"
        experiment = research.agent("alice").experiment(kept)
        comparison = experiment.comparison
        page = http.get(f"/experiments/{kept}").text
        assert answer.reason in page and experiment.reason == answer.reason
        assert f'data-field="effect">{comparison.effect:+.4f} ± {comparison.se:.4f}<' in page
        assert (
            'data-field="runs">2 vs 3<' in page and f'data-field="p_value">{comparison.p_value:.3f}<' in page
        )
        rows = re.findall(r'<tr data-run="(\d+)">(.*?)</tr>', page, re.S)
        assert [number for number, _ in rows] == [
            "1",
            "2",
            "3",
        ]  # its runs, and the repeat it got as the best
        assert all(str(run.seed) in cells for run, (_, cells) in zip(experiment.runs, rows, strict=True))
        board = http.get("/").text
        summary = re.search(r'<section id="summary".*?</section>', board, re.S).group(0)  # type: ignore[union-attr]
        best = research.agent("alice").best()
        assert f"± {best.se:.4f}, mean of 2 runs" in summary
        assert 'data-stat="noise">' in summary and "3 runs of 1 experiment, on" in summary  # the baseline's
        assert re.search(r'class="best-band" d="M[\d.]+ [\d.]+H', board)
        research.close()
