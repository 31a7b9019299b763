"""Similar experiments on an experiment's page, in a real browser (Debian's headless Chromium)
against a real server: the earlier and later experiments that set the same constant to a nearby
value, with their outcomes, linked; an unrelated change is not listed."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from tests.pages.live_server import live_server
from tests.pages.research import Research

pytestmark = [pytest.mark.browser, pytest.mark.heavy]
Shoot = Callable[[Page, str], Path]


def test_an_experiment_page_lists_the_similar_experiments_with_their_outcomes(
    page: Page, tmp_path: Path, save_screenshot: Shoot
) -> None:
    with live_server(tmp_path, agents=("alice", "bob")) as server:
        lab = Research(server)
        lab.run_next(1.0)  # the baseline
        first = lab.submit("matrix lr 0.011", agent="alice")  # MATRIX_LR = 0.011
        lab.run_next(1.02)  # measured, not kept
        second = lab.submit("matrix lr 0.012", agent="bob")  # nearby: 0.012
        best = lab.agent("bob").best().train_py
        far = lab.agent("bob").submit(
            "narrower mlp", train_py=best.replace("MLP_RATIO = 4", "MLP_RATIO = 2", 1)
        )
        assert far.similar == []

        page.goto(f"{server.url}/experiments/{second}")
        rows = page.locator("#similar tr[data-similar]")
        expect(rows).to_have_count(1)
        row = rows.first
        assert (
            row.get_attribute("data-similar") == str(first)
            and row.get_attribute("data-kind") == "nearby_constants"
        )
        expect(row.locator(".similar-kind")).to_have_text("nearby values")
        expect(row.locator(".similar-detail")).to_have_text("MATRIX_LR 0.011 (here 0.012)")
        expect(row.locator(".badge")).to_have_text("reverted")
        expect(row.locator("[data-field=val_bpb]")).to_have_text("1.020000")
        expect(row.locator("[data-field=effect]")).to_contain_text("+0.0200")
        save_screenshot(page, "experiment-similar")
        row.locator("a").click()
        expect(page).to_have_url(f"{server.url}/experiments/{first}")
        expect(page.locator("#similar tr[data-similar]")).to_have_count(1)  # the later one, #second
        assert page.locator("#similar tr[data-similar]").first.get_attribute("data-similar") == str(second)

        page.goto(f"{server.url}/experiments/{far.id}")
        expect(page.locator("#similar tr[data-similar]")).to_have_count(0)
        expect(page.locator("#similar")).to_contain_text("No other experiment made this change")
        lab.close()
