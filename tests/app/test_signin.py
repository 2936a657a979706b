"""The pure parts of sign-in: signed values, the key file, where a browser may be sent."""

from __future__ import annotations

import stat
import time

import pytest

from app.sessions import end_sessions, session_ended
from app.settings import Settings
from app.store import Store
from app.web.signin import Signer, SignIn, local_path


def test_a_signed_value_opens_only_unaltered_for_its_purpose_and_before_expiry(tmp_path):
    signer = Signer.in_data_dir(tmp_path)
    value = signer.sign("hangar_session", {"login": "mona"}, 60)
    assert signer.open("hangar_session", value)["login"] == "mona"
    assert signer.open("hangar_oauth", value) is None  # another purpose's
    body, _, mac = value.partition(".")
    forged = Signer(b"k" * 32).sign("hangar_session", {"login": "admin"}, 60)
    assert signer.open("hangar_session", forged) is None
    assert signer.open("hangar_session", forged.partition(".")[0] + "." + mac) is None
    assert signer.open("hangar_session", body) is None
    assert signer.open("hangar_session", signer.sign("hangar_session", {"login": "m"}, -1)) \
        is None
    assert signer.open("hangar_session", None) is None


def test_the_key_is_made_once_and_readable_by_hangar_alone(tmp_path):
    first = Signer.in_data_dir(tmp_path).sign("s", {"a": 1}, 60)
    assert stat.S_IMODE((tmp_path / "session.key").stat().st_mode) == 0o600
    assert Signer.in_data_dir(tmp_path).open("s", first) is not None  # a restart keeps it


@pytest.mark.parametrize("given,sent", [
    ("/jobs/job-1", "/jobs/job-1"), (None, "/"), ("", "/"), ("//evil.example/x", "/"),
    ("https://evil.example/", "/"), ("/\\evil.example", "/"), ("jobs", "/"),
])
def test_after_sign_in_a_browser_is_sent_only_to_a_path_on_hangar(given, sent):
    assert local_path(given) == sent


@pytest.mark.parametrize("public_url,secure", [
    ("http://127.0.0.1:8787", False), ("http://localhost:8787", False),
    ("https://hangar.example.com", True), ("http://hangar.example.com", True),
])
def test_cookies_are_secure_unless_hangar_is_plain_http_on_this_machine(
        tmp_path, public_url, secure):
    settings = Settings(data_dir=tmp_path, public_url=public_url, client_id="Iv1.x",
                        client_secret="s", _env_file=None)
    assert SignIn(settings).secure_cookies is secure
    assert SignIn(settings).enabled
    assert not SignIn(Settings(data_dir=tmp_path, public_url=public_url)).enabled


def test_a_session_ends_when_its_person_revoked_hangar_after_it_began(tmp_path):
    store = Store(tmp_path / "rows.db")
    assert not session_ended(store, "mona", began=time.time())
    began = time.time()
    end_sessions(store, "Mona")
    assert session_ended(store, "mona", began)
    assert session_ended(store, "MONA", 0)  # a cookie from before sessions were dated
    assert not session_ended(store, "mona", time.time() + 1)  # signed in again after
    assert not session_ended(store, "rita", began)  # another person's goes on
