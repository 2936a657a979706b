"""A real headless Chromium (Debian's chromium and chromium-driver) driven by selenium.

Started with no network but loopback in mind: no background traffic, no component or
sync updates, no QUIC, and a fresh profile each time.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
DRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--window-size=412,915")


@contextmanager
def chromium(profile_dir: Path) -> Iterator:
    """A selenium WebDriver on a headless Chromium with a fresh profile."""
    webdriver = pytest.importorskip("selenium.webdriver")
    if not (Path(CHROMIUM).exists() and Path(DRIVER).exists()):
        pytest.skip("chromium and chromium-driver are not installed (scripts/setup.sh)")
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in FLAGS:
        options.add_argument(flag)
    profile_dir.mkdir(parents=True, exist_ok=True)
    options.add_argument(f"--user-data-dir={profile_dir}")
    driver = webdriver.Chrome(service=Service(executable_path=DRIVER), options=options)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


def artifacts_dir() -> Path:
    """Where screenshots are kept for people to look at (gitignored)."""
    path = Path(__file__).resolve().parents[2] / "artifacts"
    path.mkdir(exist_ok=True)
    return path


def wait_for_url(browser, prefix: str, timeout: float = 15, exact: bool = False) -> None:
    """Wait until a navigation (a click on a submit button) arrives at `prefix` (or at
    exactly that address: a prefix the page before also had proves nothing)."""
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(browser, timeout).until(
        lambda b: b.current_url == prefix if exact else b.current_url.startswith(prefix))


def wait_for_text(browser, text: str, timeout: float = 15) -> None:
    """Wait until the page (after a click's navigation) shows `text`."""
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(browser, timeout).until(lambda b: text in b.page_source)
