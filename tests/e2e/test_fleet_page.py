"""The fleet page in a real headless Chromium: sign in with the API token, see a job
with its outcome and links to GitHub; a screenshot is kept in artifacts/."""

from __future__ import annotations

import urllib.error
import urllib.request

import pytest

from tests.browser.chromium import artifacts_dir, chromium, wait_for_text, wait_for_url
from tests.e2e.conftest import wait_until

pytestmark = pytest.mark.slow

TOKEN = "fleet-token-0123456789"
# An agent that works for a while, so the page shows it running.
SLOW_AGENT = "sleep 6\nsed -i 's/return a - b/return a + b/' calc.py\ngit commit -qam 'Fix add()'\n"


def status_of(url: str, headers: dict[str, str] | None = None) -> int:
    request = urllib.request.Request(url, headers=headers or {})

    class Keep(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args, **kwargs):
            return None

    try:
        with urllib.request.build_opener(Keep).open(request, timeout=10) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_the_fleet_page_shows_a_running_agent_then_the_finished_job(world, tmp_path):
    world.api_token = TOKEN
    world.start_hangar(SLOW_AGENT, max_agents=1)
    base = world.hangar.url
    assert status_of(f"{base}/") == 302  # to /login
    assert status_of(f"{base}/", {"Authorization": "Bearer wrong"}) == 302
    assert status_of(f"{base}/", {"Authorization": f"Bearer {TOKEN}"}) == 200
    # Named tokens: the read scope is what the page needs.
    from app.web import access
    from app.web.keys import STORE

    store = world.hangar.app[STORE]
    reader = access.create_token(store, "dashboard", ["read"], who="test")
    lander = access.create_token(store, "lander", ["land"], who="test")
    assert status_of(f"{base}/", {"Authorization": f"Bearer {reader}"}) == 200
    assert status_of(f"{base}/", {"Authorization": f"Bearer {lander}"}) == 302

    issue, _ = world.ask("/hangar fix the failing test")
    second, _ = world.ask("/hangar fix it as well", title="add() again")
    with chromium(tmp_path / "profile") as browser:
        browser.get(f"{base}/")
        wait_for_url(browser, f"{base}/login")
        browser.find_element("id", "token").send_keys("not-the-token")
        browser.find_element("id", "sign-in").click()
        wait_for_text(browser, "That is not a live hangar token with the read scope.")
        browser.find_element("id", "token").send_keys(TOKEN)
        browser.find_element("id", "sign-in").click()
        wait_for_url(browser, f"{base}/", exact=True)

        def running_and_queued():
            browser.get(f"{base}/")
            running = browser.find_element("id", "running").text
            queue = browser.find_element("id", "queue").text
            # Either may have been taken first; the other waits behind it.
            for first, then in ((issue, second), (second, issue)):
                if f"acme/widgets#{first}" in running and f"acme/widgets#{then}" in queue:
                    return then
            return None
        waiting = wait_until(running_and_queued, 30, "one agent running and one queued")
        queue = browser.find_element("id", "queue")
        cells = [c.text for c in queue.find_elements("css selector", "tbody td")]
        assert cells[:3] == ["1", "script", f"acme/widgets#{waiting}"]
        usage = [c.text for c in browser.find_elements("css selector", "#usage tbody td")]
        assert usage[:3] == ["script", "1 of 1", "1"]  # the one slot taken, one waiting
        browser.save_screenshot(str(artifacts_dir() / "fleet-running.png"))

        wait_until(lambda: world.verified(issue) and world.verified(second), 120,
                   "both verified PRs")
        pr = world.verified(issue)["number"]

        def finished_rows():
            browser.get(f"{base}/")
            return browser.find_element("id", "recent").text.count("pr, verified") == 2
        wait_until(finished_rows, 30, "the finished jobs on the page")
        recent = browser.find_element("id", "recent")
        assert f"acme/widgets#{issue}" in recent.text
        links = {a.text: a.get_attribute("href") for a in recent.find_elements("tag name", "a")}
        assert links[f"acme/widgets#{issue}"] == (
            f"{world.hub.base_url}/acme/widgets/issues/{issue}")
        assert links[f"#{pr}"] == f"{world.hub.base_url}/acme/widgets/pull/{pr}"
        assert "No agent is running." in browser.find_element("id", "running").text
        # Readable on a phone: the page is no wider than the 412-pixel window.
        width = browser.execute_script("return document.documentElement.scrollWidth")
        assert width <= browser.execute_script("return window.innerWidth")
        browser.save_screenshot(str(artifacts_dir() / "fleet.png"))
    assert (artifacts_dir() / "fleet.png").stat().st_size > 1000
