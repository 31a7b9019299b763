"""Fixtures of the page tests: Debian's Chromium (one per session) and screenshot saving."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, sync_playwright

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
# Screenshots are artifacts for people (and the README), in a git-ignored folder.
SCREENSHOTS = Path(__file__).resolve().parents[2] / "artifacts" / "screenshots"


@pytest.fixture(scope="module")
def chromium() -> Iterator[Browser]:
    # Playwright cannot download its own browser here; Debian's Chromium is the browser under test.
    # One per module, not per session: Playwright's sync API keeps an event loop running in this
    # thread while it is open, and later tests call asyncio.run() (tests/worker/test_mcp.py).
    assert CHROMIUM.is_file(), f"{CHROMIUM} is missing: install Debian's chromium package"
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture
def page(chromium: Browser) -> Iterator[Page]:
    context = chromium.new_context(viewport={"width": 1280, "height": 900}, device_scale_factor=1)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    yield page
    context.close()
    assert not errors, f"JavaScript errors on the page: {errors}"


@pytest.fixture
def save_screenshot() -> Callable[[Page, str], Path]:
    def save(page: Page, name: str) -> Path:
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        path = SCREENSHOTS / f"{name}.png"
        page.screenshot(path=str(path), full_page=True)
        return path

    return save
