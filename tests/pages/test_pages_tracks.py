"""Tracks on the pages, in a real browser (Debian's headless Chromium) against a real server: the
track selector, each track's leaderboard and chart, the transfer view, and the workers page
saying why a worker is not accepted."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from client import ApiError, Client
from tests.pages.live_server import LiveServer, live_server
from tests.pages.research import Research

pytestmark = pytest.mark.browser
Shoot = Callable[[Page, str], Path]
ADMIN = "pages-admin-token"
H100, H100_HARNESS = "NVIDIA H100 80GB HBM3", "h100-harness"


@dataclass
class TwoTracks:
    server: LiveServer
    kept: int  # kept on the default track
    port: int  # its port to h100, reverted there
    h100_baseline: int


def run_on_h100(worker: Client, worker_id: str, val_bpb: float) -> int:
    claimed = worker.claim(worker_id, wait_s=5.0)
    assert claimed is not None
    result = {
        "status": "ok",
        "val_bpb": val_bpb,
        "device": H100,
        "harness_id": H100_HARNESS,
        "sandbox": True,
        "log_tail": "",
    }
    worker.result(claimed.lease_id, str(uuid.uuid4()), result)
    return claimed.experiment_id


@pytest.fixture(scope="module")
def two_tracks(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TwoTracks]:
    folder = tmp_path_factory.mktemp("pages-tracks")
    with live_server(folder, agents=("alice",), env={"ADMIN_TOKEN": ADMIN}) as server:
        research = Research(server)
        research.run_next(1.0)  # the default track's baseline
        kept = research.submit("raise matrix LR")
        assert research.run_next(0.98).decision == "keep"
        Client(server.url, ADMIN).create_track("h100", preset="h100", platforms="NVIDIA H100*")
        worker = Client(server.url, server.worker_token)
        h100 = worker.register(name="h100-0", device=H100, memory_gb=80, harness_id=H100_HARNESS)
        assert h100.tracks == ["h100"]
        with pytest.raises(ApiError):  # recorded, with why, for the workers page
            worker.register(name="a100-0", device="NVIDIA A100-SXM4-80GB", memory_gb=80, harness_id="x")
        baseline = run_on_h100(worker, h100.worker_id, 0.90)
        port = research.agent("alice").port(kept, "h100").id
        assert run_on_h100(worker, h100.worker_id, 0.95) == port
        yield TwoTracks(server, kept, port, baseline)
        research.close()


def test_the_selector_shows_each_tracks_leaderboard_and_chart(
    page: Page, two_tracks: TwoTracks, save_screenshot: Shoot
) -> None:
    page.goto(two_tracks.server.url + "/")
    selector = page.get_by_role("navigation", name="Tracks")
    expect(selector.get_by_role("link")).to_have_text(["default", "h100"])
    expect(selector.get_by_role("link", name="default")).to_have_attribute("aria-current", "page")
    expect(page.locator('[data-stat="best"]')).to_have_text("0.980000")
    expect(page.locator("#progress-chart g.kept circle")).to_have_count(2)  # the baseline, the keep

    selector.get_by_role("link", name="h100").click()
    expect(page).to_have_url(re.compile(r"/\?track=h100$"))
    expect(page.get_by_role("heading", level=1)).to_have_text("Leaderboard · h100")
    expect(page.locator('[data-stat="best"]')).to_have_text("0.900000")
    expect(page.locator("#progress-chart g.kept circle")).to_have_count(1)  # its baseline only
    rows = page.locator("table.experiments-table tbody tr")
    expect(rows).to_have_count(2)
    expect(page.locator(f'tr[data-id="{two_tracks.port}"]')).to_be_visible()
    save_screenshot(page, "leaderboard-track-h100")

    page.get_by_label("Status").select_option("reverted")  # filters keep the track
    page.get_by_role("button", name="Filter").click()
    expect(page).to_have_url(re.compile(r"track=h100.*status=reverted|status=reverted.*track=h100"))
    expect(rows).to_have_count(1)


def test_the_transfer_view_shows_a_change_on_each_track(
    page: Page, two_tracks: TwoTracks, save_screenshot: Shoot
) -> None:
    page.goto(two_tracks.server.url + "/")
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Transfer").click()
    row = page.locator(f'tr[data-change="{two_tracks.kept}"]')
    expect(row.get_by_role("rowheader")).to_contain_text("raise matrix LR")
    expect(row.locator('td[data-track="default"] [data-field="effect"]')).to_have_text("-0.0200")
    expect(row.locator('td[data-track="default"]')).to_contain_text("kept")
    expect(row.locator('td[data-track="h100"] [data-field="effect"]')).to_have_text("+0.0500")
    expect(row.locator('td[data-track="h100"]')).to_contain_text("reverted")
    expect(row.locator('td[data-track="h100"]')).to_contain_text("port")
    save_screenshot(page, "transfer")
    row.locator('td[data-track="h100"] a').click()
    expect(page.locator('[data-field="ported_from"]')).to_contain_text(f"#{two_tracks.kept}")
    expect(page.locator('[data-field="track"]')).to_have_text("h100")


def test_the_workers_page_says_which_tracks_each_serves_and_why_one_is_not_accepted(
    page: Page, two_tracks: TwoTracks
) -> None:
    page.goto(two_tracks.server.url + "/workers")
    expect(page.locator('tr[data-worker="h100-0"] [data-field="tracks"]')).to_have_text("h100")
    expect(page.locator('tr[data-worker="gpu-0"] [data-field="tracks"]')).to_have_text("default")
    refused = page.locator('tr[data-worker="a100-0"] [data-field="tracks"]')
    expect(refused).to_contain_text("not accepted")
    expect(refused.locator('[data-field="refused"]')).to_contain_text(
        "track h100 measures on 'NVIDIA H100 80GB HBM3'; the worker's device is 'NVIDIA A100-SXM4-80GB'"
    )


def test_the_agents_page_follows_the_selected_track(page: Page, two_tracks: TwoTracks) -> None:
    page.goto(two_tracks.server.url + "/agents?track=h100")
    expect(page.get_by_role("heading", level=1)).to_have_text("Agents · h100")
    alice = page.locator('tr[data-agent="alice"]')
    expect(alice.locator("td").first).to_have_text("1")  # the port, on this track
    alice.get_by_role("link", name="alice").click()
    expect(page).to_have_url(re.compile(r"track=h100&agent=alice"))
    page.goto(two_tracks.server.url + "/?track=nope")
    expect(page.locator("body")).to_contain_text("no track named 'nope'")
