"""A person who revokes their authorization of hangar's App on GitHub is signed out of
hangar's pages at once, whatever their cookie says; signing in again works. The web
application flow over real HTTP, cookies kept as a browser keeps them."""

from __future__ import annotations

import http.cookiejar
import urllib.error
import urllib.parse
import urllib.request

import pytest

from tests.e2e.conftest import wait_until

pytestmark = pytest.mark.slow


class Browser:
    """Cookies kept per site; redirects seen, not followed."""

    def __init__(self) -> None:
        class Keep(urllib.request.HTTPRedirectHandler):
            def redirect_request(self, *args, **kwargs):
                return None

        self.jar = http.cookiejar.CookieJar()
        self.opener = urllib.request.build_opener(
            urllib.request.HTTPCookieProcessor(self.jar), Keep)

    def go(self, url: str, form: dict[str, str] | None = None) -> tuple[int, str]:
        data = urllib.parse.urlencode(form).encode() if form is not None else None
        try:
            with self.opener.open(url, data=data, timeout=10) as answer:
                return answer.status, answer.headers.get("Location", "")
        except urllib.error.HTTPError as exc:
            return exc.code, exc.headers.get("Location", "")


def sign_in(browser: Browser, base: str, login: str) -> None:
    """hangar → GitHub's consent page, authorized as `login` → hangar's callback → "/"."""
    status, to_github = browser.go(f"{base}/login/github?next=/")
    assert status == 302 and "/login/oauth/authorize?" in to_github
    query = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(to_github).query))
    status, back = browser.go(to_github.split("?")[0], {**query, "login": login})
    assert status == 302 and "/login/github/callback?" in back, (status, back)
    assert browser.go(back) == (302, "/")


def test_a_revoked_authorization_ends_the_persons_sessions(world):
    world.start_hangar(sign_in=True)
    base = world.hangar.url
    mona, rita = Browser(), Browser()
    sign_in(mona, base, world.maintainer)
    sign_in(rita, base, world.reviewer)
    assert mona.go(f"{base}/")[0] == 200 and rita.go(f"{base}/")[0] == 200

    world.hub.revoke_authorization(world.app.id, world.maintainer)
    _, location = wait_until(lambda: (a := mona.go(f"{base}/"))[0] == 302 and a, 30,
                                  "hangar to end the revoked person's session")
    assert location.startswith("/login/github?next=")
    assert rita.go(f"{base}/")[0] == 200  # another person's session goes on
    sign_in(mona, base, world.maintainer)  # a new authorization, a new session
    assert mona.go(f"{base}/")[0] == 200
