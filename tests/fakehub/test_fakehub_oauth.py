"""fakehub's web application flow for a GitHub App, as strict as GitHub's: the callback
URL rule, one-use codes, the client secret, errors answered 200 with an `error` field."""

from __future__ import annotations

import urllib.error
import urllib.parse
import urllib.request

from fakehub_helpers import call, oauth_authorize, oauth_exchange, oauth_sign_in

CALLBACK = "http://127.0.0.1:9/login/github/callback"


def test_a_person_signs_in_and_the_token_reads_only_what_a_user_token_may(fakehub):
    app = fakehub.create_app(name="signin")
    fakehub.set_callback_urls(app.id, CALLBACK)
    fakehub.create_user("mona")
    web = fakehub.base_url

    back = urllib.parse.urlsplit(oauth_authorize(web, app.client_id, "mona", CALLBACK,
                                                 state="s-42"))
    assert f"{back.scheme}://{back.netloc}{back.path}" == CALLBACK
    query = dict(urllib.parse.parse_qsl(back.query))
    assert query["state"] == "s-42"
    fields = {"client_id": app.client_id, "client_secret": app.client_secret,
              "code": query["code"], "redirect_uri": CALLBACK}

    wrong = oauth_exchange(web, {**fields, "client_secret": "nope"})
    assert wrong["error"] == "incorrect_client_credentials"
    elsewhere = oauth_exchange(web, {**fields, "redirect_uri": "http://127.0.0.1:9/other"})
    assert elsewhere["error"] == "redirect_uri_mismatch"
    form = oauth_exchange(web, fields, accept="*/*")  # form-encoded unless JSON is asked
    assert form["access_token"].startswith("ghu_") and form["token_type"] == "bearer"
    assert oauth_exchange(web, fields)["error"] == "bad_verification_code"  # one use

    me = call(fakehub.api_url, "GET", "/user", form["access_token"])
    assert me.status == 200 and me.body["login"] == "mona"
    installation = fakehub.installation_token(fakehub.install(app.id, "mona"))
    assert call(fakehub.api_url, "GET", "/user", installation).status == 403
    assert call(fakehub.api_url, "GET", "/user", "ghu_unknown").status == 401


def test_the_redirect_must_lie_under_a_callback_url(fakehub):
    app = fakehub.create_app(name="strict")
    fakehub.set_callback_urls(app.id, CALLBACK)
    fakehub.create_user("mona")
    # A loopback callback takes any port; another host or a path outside it does not.
    assert oauth_authorize(fakehub.base_url, app.client_id, "mona",
                           "http://127.0.0.1:8080/login/github/callback?next=1")
    for elsewhere in ("http://attacker.example/login/github/callback",
                      "http://127.0.0.1:9/login/other", "https://127.0.0.1:9/login/github/callback"):
        query = urllib.parse.urlencode({"client_id": app.client_id, "redirect_uri": elsewhere})
        try:
            urllib.request.urlopen(f"{fakehub.base_url}/login/oauth/authorize?{query}")
            raise AssertionError(f"{elsewhere} was accepted")
        except urllib.error.HTTPError as exc:
            assert exc.code == 400


def test_a_revoked_authorization_kills_the_apps_tokens_for_that_person_only(fakehub):
    """Settings → Applications → Revoke: GitHub revokes the person's tokens of that App,
    and tells the App with `github_app_authorization` revoked (its only payload: action,
    sender), whatever events it subscribes to."""
    app = fakehub.create_app(name="signin", events=["issues"])
    other = fakehub.create_app(name="other")
    for each in (app, other):
        fakehub.set_callback_urls(each.id, CALLBACK)
    fakehub.create_user("mona")
    fakehub.create_user("hubot")
    web = fakehub.base_url
    mona = oauth_sign_in(web, app.client_id, app.client_secret, "mona", CALLBACK)
    hubot = oauth_sign_in(web, app.client_id, app.client_secret, "hubot", CALLBACK)
    mona_other = oauth_sign_in(web, other.client_id, other.client_secret, "mona", CALLBACK)
    mark = fakehub.delivery_mark()

    fakehub.revoke_authorization(app.id, "mona")

    refused = call(fakehub.api_url, "GET", "/user", mona)
    assert (refused.status, refused.body["message"]) == (401, "Bad credentials")
    assert call(fakehub.api_url, "GET", "/user", hubot).status == 200
    assert call(fakehub.api_url, "GET", "/user", mona_other).status == 200
    fakehub.settle()
    [told] = [d for d in fakehub.deliveries(app.id) if d.id > mark]
    assert (told.event, told.action) == ("github_app_authorization", "revoked")
    assert set(told.payload) == {"action", "sender"} and told.payload["sender"]["login"] == "mona"
    assert [d for d in fakehub.deliveries(other.id) if d.id > mark] == []
