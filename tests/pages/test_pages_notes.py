"""Notes on the pages, in a real browser (Debian's headless Chromium) against a real server: the
notes about an experiment on its page, every note on /notes (filtered by author), and a new note
appearing on an open page without a reload."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from tests.pages.live_server import LiveServer, live_server
from tests.pages.research import Research

pytestmark = pytest.mark.browser
Shoot = Callable[[Page, str], Path]


@pytest.fixture(scope="module")
def research(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LiveServer, Research, int]]:
    with live_server(tmp_path_factory.mktemp("pages-notes"), agents=("alice", "bob")) as server:
        research = Research(server)
        research.run_next(1.0)  # the baseline
        experiment_id = research.submit("warmup 2% of the steps", agent="alice")
        research.run_next(0.99)
        yield server, research, experiment_id
        research.close()


def test_notes_show_on_the_experiment_page_and_the_notes_page(
    page: Page, research: tuple[LiveServer, Research, int], save_screenshot: Shoot
) -> None:
    server, lab, experiment_id = research
    about = lab.agent("alice").post_note(
        "warmup 2% beats 1% by 0.004 here; <b>next</b>: 3%", experiment_id=experiment_id
    )
    general = lab.agent("bob").post_note("hypothesis: a longer warmup helps at depth 8; trying 3 variants")

    page.goto(f"{server.url}/experiments/{experiment_id}")
    notes = page.locator("#experiment-notes li.note")
    expect(notes).to_have_count(1)  # only the note about this experiment
    expect(notes.locator(".note-author")).to_have_text("alice")
    # Text is shown as written (escaped), never as markup.
    expect(notes.locator(".note-text")).to_have_text("warmup 2% beats 1% by 0.004 here; <b>next</b>: 3%")
    assert notes.first.get_attribute("data-note") == str(about.id)
    save_screenshot(page, "experiment-notes")

    page.goto(f"{server.url}/notes")
    listed = page.locator("#notes li.note")
    expect(listed).to_have_count(2)
    expect(listed.first.locator(".note-text")).to_have_text(general.text)  # newest first
    expect(listed.nth(1).locator(f'a[href="/experiments/{experiment_id}"]')).to_have_text(f"#{experiment_id}")
    page.select_option("select[name=author]", "alice")
    page.click("form.filters button[type=submit]")
    expect(listed).to_have_count(1)
    expect(listed.first.locator(".note-author")).to_have_text("alice")
    save_screenshot(page, "notes")


def test_a_new_note_appears_without_reloading(page: Page, research: tuple[LiveServer, Research, int]) -> None:
    server, lab, experiment_id = research
    page.goto(f"{server.url}/experiments/{experiment_id}")
    expect(page.locator("#live-state")).to_have_attribute("data-state", "live", timeout=10_000)
    page.evaluate("window.loadedOnce = true")  # gone if the page reloads
    count = page.locator("#experiment-notes li.note").count()
    lab.agent("bob").post_note("confirmed on a second seed", experiment_id=experiment_id)
    expect(page.locator("#experiment-notes li.note")).to_have_count(count + 1, timeout=10_000)
    expect(page.locator("#experiment-notes li.note").first.locator(".note-text")).to_have_text(
        "confirmed on a second seed"
    )
    assert page.evaluate("window.loadedOnce") is True
