"""The job page and the fleet page behind GitHub sign-in, in a real headless Chromium:
signed out → fakehub's OAuth consent page → the page; a person who cannot read the
private repository gets 404 for the job and a fleet page without it. Screenshots are
kept in the test's tmp directory (and in artifacts/)."""

from __future__ import annotations

import shutil
import urllib.error
import urllib.request

import pytest

from app.models import Job
from app.web.keys import STORE
from tests.browser.chromium import artifacts_dir, chromium, wait_for_text, wait_for_url
from tests.e2e.conftest import wait_until

pytestmark = pytest.mark.slow

TOKEN = "job-page-token-0123456789"


def answer(url: str, headers: dict[str, str] | None = None) -> tuple[int, str, str]:
    """(status, Location, body) without following redirects."""
    class Keep(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args, **kwargs):
            return None

    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.build_opener(Keep).open(request, timeout=10) as resp:
            return resp.status, resp.headers.get("Location", ""), resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers.get("Location", ""), exc.read().decode()


def sign_in(browser, hub_url: str, login: str) -> None:
    """On fakehub's consent page (as on GitHub's): who is signed in, then Authorize."""
    wait_for_url(browser, f"{hub_url}/login/oauth/authorize?")
    browser.find_element("id", "login").send_keys(login)
    browser.find_element("id", "authorize").click()


def keep(browser, tmp_path, name: str) -> None:
    shot = tmp_path / "screenshots" / name
    shot.parent.mkdir(exist_ok=True)
    browser.save_screenshot(str(shot))
    assert shot.stat().st_size > 1000
    shutil.copy(shot, artifacts_dir() / name)


def test_people_sign_in_with_github_and_see_only_what_they_can_read(world, tmp_path):
    world.hub.set_private(world.repo)
    world.hub.create_user("stranger")
    world.api_token = TOKEN
    world.start_hangar(sign_in=True)
    base, hub_url = world.hangar.url, world.hub.base_url
    issue, _ = world.ask("/hangar fix the failing test")
    pr = wait_until(lambda: world.verified(issue), 120, "the verified PR")["number"]
    store = world.hangar.app[STORE]
    job = next(j for j in store.all("job", Job) if j.thread.number == issue)
    # GitHub's surfaces lead to the page: the status comment and each check run of the run.
    page_url = f"{base}/jobs/{job.id}"
    wait_until(lambda: f"[View job]({page_url})" in world.status(issue), 30,
               "the status comment's View job link")
    head = world.hub.get_pr(world.repo, pr)["head"]["sha"]
    assert world.checks(head)["hangar / verify"]["details_url"] == page_url

    # Signed out: off to GitHub's sign-in, state and all; operators' tokens work as before.
    status, location, _ = answer(f"{base}/jobs/{job.id}")
    assert status == 302 and location.startswith("/login/github?next=")
    assert answer(f"{base}/jobs/{job.id}", {"Authorization": f"Bearer {TOKEN}"})[0] == 200
    assert answer(f"{base}/jobs/{job.id}", {"Authorization": "Bearer wrong"})[0] == 302
    # A callback this browser did not start is refused (the state is bound to it).
    status, _, body = answer(f"{base}/login/github/callback?code=abc&state=forged")
    assert status == 400 and "not started in this browser" in body

    with chromium(tmp_path / "reader") as browser:
        browser.get(f"{base}/jobs/{job.id}")
        sign_in(browser, hub_url, world.reader)
        wait_for_url(browser, f"{base}/jobs/{job.id}", exact=True)
        wait_for_text(browser, "Signed in as @rick")
        cookie = browser.get_cookie("hangar_session")
        assert cookie["httpOnly"] and cookie["sameSite"] == "Lax"
        facts = browser.find_element("id", "facts").text
        assert "/hangar fix the failing test" in facts or "fix the failing test" in facts
        links = {a.text: a.get_attribute("href")
                 for a in browser.find_elements("tag name", "a")}
        assert links[f"acme/widgets#{issue}"] == f"{hub_url}/acme/widgets/issues/{issue}"
        assert links[f"#{pr}"] == f"{hub_url}/acme/widgets/pull/{pr}"
        assert links[f"hangar / verify on {head[:7]}"].startswith(
            f"{hub_url}/acme/widgets/runs/")
        assert "passed" in browser.find_element("id", "verification").text
        runs = browser.find_element("id", "runs").text
        assert "script" in runs  # the harness
        assert browser.find_element("id", "timeline").find_elements("css selector", "tr")
        width = browser.execute_script("return document.documentElement.scrollWidth")
        assert width <= browser.execute_script("return window.innerWidth")
        keep(browser, tmp_path, "job-page.png")

        # The fleet page: the same session, the repository they can read.
        browser.get(f"{base}/")
        wait_for_text(browser, f"acme/widgets#{issue}")
        needs = browser.find_element("id", "needs").text  # what needs a person comes first
        assert "Pull requests waiting for your review" in needs and f"#{pr}" in needs
        recent = browser.find_element("id", "recent")
        assert recent.find_element("link text", "View job").get_attribute("href") == page_url
        keep(browser, tmp_path, "fleet-signed-in.png")

    with chromium(tmp_path / "stranger") as browser:
        browser.get(f"{base}/jobs/{job.id}")
        sign_in(browser, hub_url, "stranger")
        wait_for_url(browser, f"{base}/jobs/{job.id}", exact=True)
        wait_for_text(browser, "No job here, or not one you can see")
        assert f"acme/widgets#{issue}" not in browser.page_source
        keep(browser, tmp_path, "job-page-refused.png")
        browser.get(f"{base}/jobs/job-that-does-not-exist")  # the same answer, word for word
        wait_for_text(browser, "No job here, or not one you can see")
        browser.get(f"{base}/")
        wait_for_text(browser, "Signed in as @stranger")
        assert f"acme/widgets#{issue}" not in browser.page_source
        assert "No jobs yet." in browser.find_element("id", "recent").text
        keep(browser, tmp_path, "fleet-stranger.png")
