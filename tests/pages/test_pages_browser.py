"""The pages in a real browser (Debian's headless Chromium) against a real server.

A night of research is replayed through the HTTP API first: three agents submit changes of
train.py and a worker claims, runs and reports them (see tests/pages/research.py: the worker
reports chosen val_bpb values instead of training, as there is no GPU). The server decides keep
or revert as it always does. Screenshots go to artifacts/screenshots/.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser, Page, expect

from tests.pages.live_server import LiveServer, live_server
from tests.pages.research import Research

pytestmark = pytest.mark.browser
Shoot = Callable[[Page, str], Path]

# (description, agent, val_bpb reported; None = the run crashed)
NIGHT: list[tuple[str, str, float | None]] = [
    ("increase matrix LR to 0.06", "alice", 0.9952),
    ("remove logit softcap", "bob", 1.0031),
    ("wider MLP (ratio 5)", "alice", 0.9949),
    ("sliding window on odd layers", "carol", None),
    ("warmdown over 70% of the budget", "bob", 0.9891),
    ("rope base 50000", "alice", 0.9903),
    ("depth 10, width 640", "carol", 0.9847),
    ("muon momentum 0.9", "bob", 0.9866),
    ("batch 2x with lr x1.4", "carol", None),
    ("zero-init output projections", "bob", 0.9811),
    ("squared ReLU in the MLP", "alice", 0.9779),
    ("weight decay 0.05 on matrices", "carol", 0.9790),
    ("short warmup (2% of steps)", "alice", 0.9768),
    ("tied embeddings", "carol", 1.0120),
    ("QK norm", "alice", 0.9731),
    ("softcap 20", "bob", 0.9745),
]
PLOTTED = ("kept", "reverted", "rebased", "stale", "infra_failed")

# Counts the marks of the progress chart: one path segment per dot, one circle per kept experiment.
CHART_MARKS = """() => {
  const svg = document.querySelector('#progress-chart svg');
  const dots = (selector) => (svg.querySelector(selector).getAttribute('d').match(/M/g) || []).length;
  return {reverted: dots('path.pts.reverted'), failed: dots('path.pts.failed'),
          kept: svg.querySelectorAll('g.kept circle').length,
          labels: [...svg.querySelectorAll('g.kept text.label')].map((t) => t.textContent)};
}"""


@dataclass
class Night:
    server: LiveServer
    research: Research
    ids: dict[str, int]  # experiment id by description

    def experiments(self) -> list[dict[str, Any]]:
        """Every experiment as the JSON API reports it (a second view of the same server state)."""
        with httpx.Client(base_url=self.server.url) as http:
            return list(http.get("/api/v1/experiments", params={"limit": 200}).json()["items"])


@pytest.fixture(scope="module")
def night(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Night]:
    with live_server(tmp_path_factory.mktemp("pages-browser"), agents=("alice", "bob", "carol")) as server:
        research = Research(server)
        research.run_next(1.0)  # the baseline
        ids = {"baseline": 1}
        for description, agent, val_bpb in NIGHT:
            ids[description] = research.submit(
                description, agent=agent, hypothesis=f"{description} should help"
            )
            assert research.run_next(val_bpb).experiment_id == ids[description]
        yield Night(server, research, ids)
        research.close()


def chart_marks(page: Page) -> dict[str, Any]:
    return dict(page.evaluate(CHART_MARKS))


def wait_until_live(page: Page) -> None:
    """The page's event stream is open: what happens from now on reaches the page."""
    expect(page.locator("#live-state")).to_have_attribute("data-state", "live", timeout=10_000)


def test_chart_has_a_point_for_every_finished_experiment(
    page: Page, night: Night, save_screenshot: Shoot
) -> None:
    page.goto(night.server.url + "/")
    marks = chart_marks(page)
    experiments = night.experiments()
    finished = [e for e in experiments if e["status"] in PLOTTED]
    kept = [e for e in finished if e["status"] == "kept"]
    assert len(finished) >= len(NIGHT) + 1
    assert marks["reverted"] + marks["failed"] + marks["kept"] == len(finished)
    assert marks["kept"] == len(kept)
    assert marks["failed"] == sum(e["val_bpb"] is None for e in finished)
    # Kept experiments are labelled with their descriptions (here none are too close to label).
    assert marks["labels"] == [e["description"] for e in sorted(kept, key=lambda e: e["finished_at"])]
    best = min(e["val_bpb"] for e in kept)
    expect(page.locator('[data-stat="best"]')).to_have_text(f"{best:.6f}")
    save_screenshot(page, "leaderboard-night")


def test_a_new_result_appears_without_reloading(page: Page, night: Night, save_screenshot: Shoot) -> None:
    page.goto(night.server.url + "/")
    wait_until_live(page)
    page.evaluate("window.loadedOnce = true")  # gone if the page reloads
    before = chart_marks(page)
    points_before = before["reverted"] + before["failed"] + before["kept"]

    new_id = night.research.submit("muon ns steps 4 with nesterov", agent="carol")
    row = page.locator(f'#experiments-table tr[data-id="{new_id}"]')
    expect(row).to_have_attribute("data-status", "queued", timeout=10_000)
    expect(page.locator('[data-count="queued"]')).to_have_text("1")

    outcome = night.research.run_next(0.9702)
    assert outcome.experiment_id == new_id and outcome.decision == "keep"
    expect(row).to_have_attribute("data-status", "kept", timeout=10_000)
    expect(page.locator('[data-stat="best"]')).to_have_text("0.970200")
    page.wait_for_function(f"() => ({CHART_MARKS})().kept === {before['kept'] + 1}", timeout=10_000)
    after = chart_marks(page)
    assert after["reverted"] + after["failed"] + after["kept"] == points_before + 1
    assert after["labels"][-1] == "muon ns steps 4 with nesterov"
    assert page.evaluate("window.loadedOnce") is True
    save_screenshot(page, "leaderboard-live-update")


def test_the_diff_renders_highlighted(page: Page, night: Night, save_screenshot: Shoot) -> None:
    experiment_id = night.ids["QK norm"]
    page.goto(f"{night.server.url}/experiments/{experiment_id}")
    raw = httpx.get(f"{night.server.url}/api/v1/experiments/{experiment_id}/diff").text
    removed = [line[1:] for line in raw.splitlines() if line.startswith("-") and not line.startswith("---")]
    added = [line[1:] for line in raw.splitlines() if line.startswith("+") and not line.startswith("+++")]
    assert removed and added
    expect(page.locator("table.diff tr.del td.code")).to_have_text(removed)
    expect(page.locator("table.diff tr.add td.code")).to_have_text(added)
    expect(page.locator("table.diff tr.hunk").first).to_contain_text("@@ -")
    # Syntax highlighting: the number and the comment of the changed line are coloured tokens.
    added_line = page.locator("table.diff tr.add td.code").first
    expect(added_line.locator("span.mf")).to_have_count(1)
    expect(added_line.locator("span.c1")).to_have_text("# QK norm")
    colours = page.evaluate(
        """() => ['tr.add span.mf', 'tr.add span.n'].map(
             (s) => getComputedStyle(document.querySelector('table.diff ' + s)).color)"""
    )
    assert colours[0] != colours[1]  # the number is coloured differently from the name
    expect(page.locator("#overview .badge")).to_have_text("kept")
    expect(page.locator(".decision")).to_contain_text("< best")
    expect(page.locator(".hypothesis")).to_have_text("QK norm should help")
    save_screenshot(page, "experiment")


def test_the_progress_of_a_running_experiment_moves(page: Page, night: Night, save_screenshot: Shoot) -> None:
    experiment_id = night.research.submit("learning rate warmup of 100 steps", agent="bob")
    lease = night.research.claim()
    assert lease.experiment_id == experiment_id
    page.goto(f"{night.server.url}/experiments/{experiment_id}")
    wait_until_live(page)
    page.evaluate("window.loadedOnce = true")
    curve = page.locator("#loss-curve")
    assert page.evaluate("document.getElementById('run-bar').value") == 0
    expect(curve).to_have_attribute("data-points", "0")

    night.research.progress(lease, fraction=0.25, step=100, loss=5.1)
    page.wait_for_function("document.getElementById('run-bar').value === 0.25", timeout=10_000)
    expect(curve).to_have_attribute("data-points", "1")
    night.research.progress(lease, fraction=0.6, step=240, loss=4.2)
    page.wait_for_function("document.getElementById('run-bar').value === 0.6", timeout=10_000)
    expect(curve).to_have_attribute("data-points", "2")
    expect(page.locator("#run-facts")).to_contain_text("step 240, loss 4.2000")
    expect(page.locator("#run-fraction")).to_have_text("60.0 %")
    path = curve.locator("path.loss").get_attribute("d") or ""
    assert path.count("L") == 1  # a line from the first sample to the second
    expect(page.locator("#overview .badge")).to_have_text("running")
    save_screenshot(page, "experiment-running")

    workers = page.context.new_page()
    workers.goto(f"{night.server.url}/workers")
    expect(workers.locator('tr[data-worker="gpu-0"]')).to_contain_text(f"#{experiment_id}")
    expect(workers.locator('tr[data-worker="gpu-0"] .badge')).to_have_text("online")
    workers.close()

    night.research.report(lease, 0.9850)
    expect(page.locator("#overview .badge")).to_have_text("reverted", timeout=10_000)
    expect(page.locator("#run-progress")).to_have_attribute("data-active", "false")
    expect(page.locator("#run-log pre.log")).to_contain_text("val_bpb 0.985")
    assert page.evaluate("window.loadedOnce") is True


def test_keyboard_users_reach_sorting_and_see_focus(page: Page, night: Night) -> None:
    page.goto(night.server.url + "/")
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.textContent") == "Skip to content"
    page.keyboard.press("Enter")
    assert page.evaluate("document.activeElement.id") == "main"
    target = 'thead a[href*="sort=val_bpb"]'
    for _ in range(200):
        page.keyboard.press("Tab")
        if page.evaluate(f"document.activeElement.matches('{target}')"):
            break
    else:
        pytest.fail("the val_bpb sort link cannot be reached with the Tab key")
    outline = page.evaluate("getComputedStyle(document.activeElement).outlineStyle")
    assert outline != "none"  # a visible focus ring
    page.keyboard.press("Enter")
    page.wait_for_url("**/?*sort=val_bpb*")
    expect(page.locator("thead th[aria-sort]")).to_have_attribute("aria-sort", "ascending")
    expect(page.get_by_label("Status")).to_be_visible()  # form controls have labels
    expect(page.get_by_label("Agent")).to_be_visible()


CONTRAST = """(selectors) => {
  const rgb = (c) => c.match(/[\\d.]+/g).map(Number);
  const luminance = ([r, g, b]) => [r, g, b].map((v) => {
    v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4;
  }).reduce((sum, v, i) => sum + v * [0.2126, 0.7152, 0.0722][i], 0);
  const background = (node) => {
    for (; node; node = node.parentElement) {
      const c = rgb(getComputedStyle(node).backgroundColor);
      if (c.length < 4 || c[3] > 0) return c.slice(0, 3);
    }
    return [255, 255, 255];
  };
  return selectors.map((selector) => {
    const node = document.querySelector(selector);
    if (!node) return [selector, null];
    const style = getComputedStyle(node);
    const fg = rgb(node instanceof SVGElement ? style.fill : style.color).slice(0, 3);
    const [a, b] = [luminance(fg), luminance(background(node))].sort((x, y) => y - x);
    return [selector, (a + 0.05) / (b + 0.05)];
  });
}"""
CONTRAST_CHECKS = {
    "/": [
        "h1",
        ".stat-label",
        ".stat.best .stat-value a",
        ".count dt",
        "thead th a",
        "td.desc a",
        "td.num.better",
        ".badge.s-kept",
        ".badge.s-reverted",
        ".count.running dd",
        ".count.crashed dd",
        ".table-info",
        "header nav a",
        "#progress-chart .axis.y text",
        "#progress-chart .kept text.label",
        "footer.site",
        ".live-state",
    ],
    "/experiments/{qk}": [
        "tr.add td.code",
        "tr.del td.code",
        "tr.add span.mf",
        "tr.add span.c1",
        "tr.hunk td",
        "td.ln",
        ".decision",
        ".facts dt",
        "pre.log",
    ],
}


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_text_has_enough_contrast(
    chromium: Browser, night: Night, scheme: str, save_screenshot: Shoot
) -> None:
    context = chromium.new_context(color_scheme=scheme, viewport={"width": 1280, "height": 900})  # type: ignore[arg-type]
    page = context.new_page()
    try:
        for path, selectors in CONTRAST_CHECKS.items():
            page.goto(night.server.url + path.format(qk=night.ids["QK norm"]))
            ratios = dict(page.evaluate(CONTRAST, selectors))
            missing = [s for s, r in ratios.items() if r is None]
            assert not missing, f"not on {path}: {missing}"
            low = {s: round(r, 2) for s, r in ratios.items() if r < 4.5}
            assert not low, f"{scheme} scheme, {path}: contrast below 4.5:1 for {low}"
        if scheme == "dark":
            page.goto(night.server.url + "/")
            save_screenshot(page, "leaderboard-dark")
    finally:
        context.close()


def test_small_screens_scroll_tables_not_the_page(
    chromium: Browser, night: Night, save_screenshot: Shoot
) -> None:
    context = chromium.new_context(viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True)
    page = context.new_page()
    try:
        for path in ("/", f"/experiments/{night.ids['QK norm']}", "/agents", "/workers"):
            page.goto(night.server.url + path)
            overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
            assert overflow <= 0, f"{path} is {overflow}px wider than a phone screen"
        page.goto(night.server.url + "/")
        save_screenshot(page, "leaderboard-mobile")
    finally:
        context.close()


def test_leaderboard_screenshot_with_work_in_flight(page: Page, night: Night, save_screenshot: Shoot) -> None:
    """The README's picture: a night of results, one experiment running and one queued."""
    night.research.submit("lower final LR fraction to 0.05", agent="alice")
    running = night.research.claim()
    night.research.progress(running, fraction=0.4, step=380, loss=3.9)
    night.research.submit("gradient clipping at 1.0", agent="bob")
    page.goto(night.server.url + "/")
    expect(page.locator('[data-count="running"]')).to_have_text("1")
    expect(page.locator('[data-count="queued"]')).to_have_text("1")
    save_screenshot(page, "leaderboard")
