"""One-click setup, end to end: a real headless Chromium registers hangar's App on
fakehub through the manifest flow, then `hangar serve` starts from what setup wrote
and accepts fakehub's signed webhook."""

from __future__ import annotations

import os
import re
import signal
import stat
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml

from tests.browser.chromium import chromium, wait_for_text, wait_for_url
from tests.e2e.conftest import ROOT, free_port, wait_until

pytestmark = pytest.mark.slow


def hangar(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "app.cli", *args], cwd=ROOT, env=env,
                            stdout=log.open("w"), stderr=subprocess.STDOUT,
                            start_new_session=True)


def answers(url: str) -> int | None:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return None


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=20)


@pytest.fixture
def clean_env(tmp_path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HANGAR_")}
    env["HANGAR_DATA_DIR"] = str(tmp_path / "data")
    return env


def offering_setup(args: list[str], env: dict[str, str], log: Path
                   ) -> tuple[subprocess.Popen, str, str]:
    """hangar started with no App: the process, its address, the setup link it printed."""
    proc = hangar(args, env, log)
    base = f"http://127.0.0.1:{env['HANGAR_PORT']}"
    wait_until(lambda: answers(f"{base}/healthz") == 200 or proc.poll() is not None, 30,
               "hangar to offer setup")
    return proc, base, setup_link(log, base)


def setup_link(log: Path, base: str) -> str:
    """The /setup link with its one-time key, as hangar printed it."""
    found = wait_until(lambda: re.search(r"Open (http://\S+/setup\?key=\S+) in a browser",
                                         log.read_text()), 30, "the setup link in the log")
    link = found.group(1)
    assert link.startswith(f"{base}/setup?key=")
    return link


def register_in_browser(browser, hub, base: str, link: str, organization: str | None) -> None:
    """Press the buttons a person presses: hangar's, then GitHub's (fakehub's)."""
    browser.get(f"{base}/setup")  # without the key from the log: nothing to press
    assert "only someone who can read its log" in browser.page_source
    assert not browser.find_elements("id", "register")
    browser.get(link)
    assert "Register hangar's GitHub App" in browser.page_source
    target = f"{hub.base_url}/settings/apps/new"
    if organization:
        # The form is shown again with the organization's new-App page as target.
        browser.find_element("id", "organization").send_keys(organization)
        browser.find_element("id", "change").click()
        # The address starts the same before and after, so wait for the new page's words.
        wait_for_text(browser, f"for the organization {organization}")
        target = f"{hub.base_url}/organizations/{organization}/settings/apps/new"
    browser.find_element("id", "register").click()
    wait_for_url(browser, target)

    # fakehub's "Create GitHub App" page shows the manifest hangar filled in.
    wait_for_text(browser, f"for {organization or 'your personal account'}")
    assert browser.title == "Create GitHub App"
    assert browser.find_element("id", "webhook-url").text == f"{base}/webhook"
    assert browser.find_element("id", "redirect-url").text == f"{base}/setup"
    name = browser.find_element("id", "name")
    name.clear()
    name.send_keys("hangar-ops")
    browser.find_element("id", "create").click()

    # Back on hangar: registered, with a link to install the App.
    wait_for_url(browser, f"{base}/setup?code=")
    wait_for_text(browser, "The GitHub App hangar-ops is registered")
    install = browser.find_element("link text", "install the App on your repositories")
    assert install.get_attribute("href") == (
        f"{hub.base_url}/apps/hangar-ops/installations/new")


def check_registration(hub, data: Path) -> dict:
    written = yaml.safe_load((data / "github-app.yaml").read_text())
    key = Path(written["private_key_file"])
    for secret in (data / "github-app.yaml", key):
        assert stat.S_IMODE(secret.stat().st_mode) == 0o600, secret
    assert written["github_url"] == hub.api_url
    assert key.read_text().startswith("-----BEGIN")
    # What sign-in to hangar's pages needs: the OAuth client and hangar's public address,
    # whose callback the App was registered with.
    assert written["client_id"] and written["client_secret"]
    app = hub.hub.store.apps[written["app_id"]]
    assert app.client_secret == written["client_secret"]
    assert app.callback_urls == [f"{written['public_url']}/login/github/callback"]
    return written


def answers_signed_webhooks(hub, app_id: int, base: str, log: Path, install=None) -> None:
    """fakehub's installation webhook, signed with the App's secret, is accepted."""
    assert answers(f"{base}/setup") == 404  # setup is off once an App exists
    mark = hub.delivery_mark()
    (install or (lambda: hub.install(app_id, "acme")))()
    delivery = wait_until(
        lambda: next((d for d in hub.deliveries(app_id, "installation")
                      if d.id > mark and d.status_code), None), 30,
        "fakehub's signed installation webhook to be answered")
    assert delivery.status_code == 202, log.read_text()
    unsigned = urllib.request.Request(f"{base}/webhook", data=b"{}", method="POST",
                                      headers={"X-GitHub-Event": "ping"})
    assert answers_request(unsigned) == 401


def test_setup_registers_the_app_in_a_browser_and_serve_starts_from_it(
        fakehub, tmp_path, clean_env):
    hub = fakehub
    hub.create_user("acme")
    port = free_port()
    env = {**clean_env, "HANGAR_GITHUB_URL": hub.api_url, "HANGAR_PORT": str(port)}
    setup, base, link = offering_setup(["setup"], env, tmp_path / "setup.log")
    try:
        with chromium(tmp_path / "profile") as browser:
            register_in_browser(browser, hub, base, link, "acme")
        assert setup.wait(timeout=20) == 0
    finally:
        stop(setup)
    printed = (tmp_path / "setup.log").read_text()
    assert f"Install it: {hub.base_url}/apps/hangar-ops/installations/new" in printed
    written = check_registration(hub, tmp_path / "data")

    # hangar serve needs nothing but the data directory now.
    serve_port = free_port()
    serve = hangar(["serve"], {**clean_env, "HANGAR_PORT": str(serve_port)},
                   tmp_path / "serve.log")
    try:
        serve_base = f"http://127.0.0.1:{serve_port}"
        wait_until(lambda: answers(f"{serve_base}/healthz") == 200, 30,
                   "hangar serve to listen")
        hub.set_webhook_url(written["app_id"], f"{serve_base}/webhook")
        answers_signed_webhooks(hub, written["app_id"], serve_base, tmp_path / "serve.log")
    finally:
        stop(serve)


def test_serve_with_no_app_offers_setup_then_serves_and_shows_a_job(
        fakehub, tmp_path, clean_env):
    hub = fakehub
    for login in ("acme", "mona"):
        hub.create_user(login)
    hub.create_repo("acme", "widgets")
    hub.grant("acme/widgets", "mona", "write")
    port = free_port()
    token = "fleet-token-0123456789"
    env = {**clean_env, "HANGAR_GITHUB_URL": hub.api_url, "HANGAR_PORT": str(port),
           "HANGAR_API_TOKEN": token}
    serve, base, link = offering_setup(["serve"], env, tmp_path / "serve.log")
    try:
        with chromium(tmp_path / "profile") as browser:
            register_in_browser(browser, hub, base, link, None)
            written = check_registration(hub, tmp_path / "data")
            # The same process, on the same port, now serves for real.
            wait_until(lambda: answers(f"{base}/setup") == 404, 30, "hangar to serve the App")

            def install_in_browser() -> None:
                browser.find_element("link text", "install the App on your repositories").click()
                wait_for_text(browser, "Install hangar-ops on the account")
                browser.find_element("id", "account").send_keys("acme")
                browser.find_element("id", "install").click()
                wait_for_text(browser, "hangar-ops is installed on acme")
            answers_signed_webhooks(hub, written["app_id"], base, tmp_path / "serve.log",
                                    install_in_browser)

        issue = hub.create_issue("acme/widgets", "add() is wrong", as_user="mona")
        hub.comment("acme/widgets", issue, "/hangar fix add()", as_user="mona")
        fleet = urllib.request.Request(f"{base}/",
                                       headers={"Authorization": f"Bearer {token}"})

        def job_on_page() -> bool:
            with urllib.request.urlopen(fleet, timeout=5) as resp:
                return f"acme/widgets#{issue}" in resp.read().decode()
        wait_until(job_on_page, 30, "the job on the fleet page")
    finally:
        stop(serve)


def answers_request(request: urllib.request.Request) -> int:
    try:
        with urllib.request.urlopen(request, timeout=5) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_setup_refuses_a_redirect_it_did_not_start(tmp_path, clean_env):
    port = free_port()
    setup = hangar(["setup", "--port", str(port)], clean_env, tmp_path / "setup.log")
    try:
        base = f"http://127.0.0.1:{port}"
        wait_until(lambda: answers(f"{base}/healthz") == 200, 30, "hangar setup to listen")
        assert answers(f"{base}/setup?code=abc&state=forged") == 400
        assert setup.poll() is None
    finally:
        stop(setup)
    assert not (tmp_path / "data" / "github-app.yaml").exists()
