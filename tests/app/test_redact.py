"""Secrets never reach what people see: redaction of log tails and agent text."""

from __future__ import annotations

import base64
import io
import json
import logging
import re
from urllib.parse import quote, quote_plus

import aiohttp
import pytest
from pydantic import SecretStr

from app import logs
from app import redact as redaction
from app.github.client import AppAuth, GitHubClient
from app.redact import REDACTED, encodings, redact, redact_json_body, tail
from tests.app.test_github_auth import FAST, installed  # noqa: F401 (a fixture)
from tests.test_render_secrets import knowing, leaked


@pytest.mark.parametrize(
    "secret",
    [
        "ghs_" + "a" * 36,
        "ghp_" + "B1" * 18,
        "gho_" + "c" * 36,
        "ghu_" + "d3" * 18,
        "ghr_" + "e" * 76,
        # a stateless installation token: ghs_<app id>_<JWT>
        "ghs_123456_eyJhbGciOiJSUzI1NiJ9.eyJpc3MiOiJnaXRodWIiLCJpbnN0In0.s1g-n_4tUr3xyz",
        "github_pat_11ABCDEFG0" + "x" * 12 + "_" + "y" * 59,
        "hgs_" + "Zz-_9" * 8,
        # hangar's own model, egress and API tokens (secrets.token_urlsafe(32))
        "hgm_" + "Qx-_7" * 8 + "abc",
        "hge_" + "w3_-K" * 8 + "xyz",
        "hgt_" + "0aZ-_" * 8 + "pqr",
        "sk-ant-api03-" + "q" * 40,
        "sk-" + "k" * 48,
        "AKIAABCDEFGHIJKLMNOP",
        "-----BEGIN RSA PRIVATE KEY-----\nMIIEow\nabc\n-----END RSA PRIVATE KEY-----",
    ],
)
def test_token_shapes_are_redacted(secret):
    out = redact(f"before {secret} after")
    assert secret not in out and REDACTED in out and out.startswith("before ")


def test_a_stateless_token_is_redacted_whole_and_a_sentence_keeps_its_stop():
    token = "ghs_42_eyJhbGciOiJSUzI1NiJ9.eyJpbnN0YWxsYXRpb24iOjF9.c2lnbmF0dXJl"
    assert redact(f"token {token}. Next") == f"token {REDACTED}. Next"


def test_known_values_urls_and_headers():
    text = ("cloning https://x-access-token:s3cr3tvalue@github.com/a/b.git\n"
            "Authorization: Bearer abc.def.ghi\nmy-model-key-12345 leaked")
    out = redact(text, known=["my-model-key-12345", "short"])
    assert "s3cr3tvalue" not in out and "abc.def.ghi" not in out
    assert "my-model-key-12345" not in out
    assert "https://[redacted]@github.com/a/b.git" in out


def test_ordinary_text_is_untouched():
    text = "FAILED test_calc.py::test_adds - assert -1 == 5\nsha 0123456789abcdef"
    assert redact(text) == text


def test_tail_keeps_the_end():
    text = "\n".join(f"line {i}" for i in range(500))
    assert tail(text, max_lines=3) == "line 497\nline 498\nline 499"
    assert len(tail("x" * 10_000, max_chars=100)) == 100


SECRET = "npm_Bu1ldS3cr3t-value"


@pytest.mark.parametrize("offset", [0, 1, 2])
def test_a_known_secret_is_masked_in_every_encoding_at_every_offset(offset):
    blob = b"k" * offset + SECRET.encode() + b"\n"
    carried = [SECRET, base64.b64encode(blob).decode(), base64.urlsafe_b64encode(blob).decode(),
               blob.hex(), blob.hex().upper(), quote(SECRET, safe=""),
               f"https://ci:{SECRET}@registry.example.com/"]
    with knowing(SECRET):
        for text in carried:
            out = redact(f"install printed {text} and went on")
            assert leaked(out, SECRET) is None, (text, out)
            assert out.startswith("install printed ") and out.endswith(" and went on")


@pytest.mark.parametrize("form", ["quote", "quote_plus", "lower"])
def test_a_secret_url_encoded_is_masked(form):
    """A secret with characters a URL escapes, as a query string or a form would carry it."""
    secret = "p@ss/w+rd=S3cret&more value"
    carried = {"quote": quote(secret, safe=""), "quote_plus": quote_plus(secret, safe=""),
               "lower": re.sub(r"%[0-9A-F]{2}", lambda m: m.group().lower(),
                               quote(secret, safe=""))}[form]
    assert carried != secret
    with knowing(secret):
        out = redact(f"GET /login?next=x&p={carried}&z=1 HTTP/1.1")
    assert leaked(out, secret) is None, out


def test_a_secret_given_for_one_call_is_masked_in_every_encoding_too():
    out = redact(base64.b64encode(b"xy" + SECRET.encode()).decode(), known=[SECRET])
    assert leaked(out, SECRET) is None


def test_encodings_are_long_enough_to_mean_something():
    assert all(len(form) >= redaction.MIN_SECRET_CHARS for form in encodings("12345678"))
    assert encodings("short") == set()


def test_endpoint_credentials_and_private_keys_are_remembered():
    pem = ("-----BEGIN RSA PRIVATE KEY-----\n" + "\n".join(["MIIEowIBAAKCAQEAv" + "x" * 47] * 3)
           + "\n-----END RSA PRIVATE KEY-----\n")
    with knowing():
        redaction.remember_url("http://llmuser:pr0xy-passw0rd@proxy.example/llm?key=q-token-123")
        redaction.remember_pem(pem)
        said = ("could not reach http://proxy.example/llm: pr0xy-passw0rd; q-token-123; "
                "one line of the key: MIIEowIBAAKCAQEAv" + "x" * 47)
        out = redact(said)
    assert "pr0xy-passw0rd" not in out and "q-token-123" not in out and "MIIEow" not in out
    assert out.startswith("could not reach http://proxy.example/llm: ")


def test_query_credentials_and_header_values_are_masked():
    out = redact("GET https://x.example/a?api_key=abc123def&page=2\nx-api-key: sk-live-1\n"
                 "Proxy-Authorization: Basic dXNlcjpwYXNz")
    assert "abc123def" not in out and "sk-live-1" not in out and "dXNlcjpwYXNz" not in out
    assert "page=2" in out


def test_a_json_body_is_masked_string_by_string():
    body = json.dumps({"body": f"key {SECRET}", "output": {"text": ["a", SECRET]},
                       "count": 3}).encode()
    with knowing(SECRET):
        clean = json.loads(redact_json_body(body))
    assert clean == {"body": f"key {REDACTED}", "output": {"text": ["a", REDACTED]},
                     "count": 3}
    assert redact_json_body(b'{"a": 1}') == b'{"a": 1}'  # nothing to mask: as sent


def test_an_api_answer_is_masked():
    """What the API answers carries an agent's and git's words: masked of every secret."""
    from app.web.api import ok

    with knowing(SECRET):
        answer = ok({"runs": [{"agent": {"summary": base64.b64encode(
            b"zz" + SECRET.encode()).decode()}, "error": f"push {SECRET}"}]})
    assert leaked(answer.text, SECRET) is None and REDACTED in answer.text, answer.text


def test_log_lines_are_masked():
    stream = io.StringIO()
    logs.configure("INFO", stream=stream)
    try:
        with knowing(SECRET):
            logging.getLogger("app.test").warning(
                "install said %s", base64.b64encode(SECRET.encode()).decode(),
                extra={"error": f"boom {SECRET}"})
    finally:
        logging.getLogger().handlers[:] = []
    line = stream.getvalue()
    assert leaked(line, SECRET) is None and REDACTED in json.loads(line)["error"]


async def test_nothing_hangar_writes_to_github_carries_a_known_secret(installed):  # noqa: F811
    """The GitHub client is the last door: a body built anywhere is masked there."""
    hub, app, installation = installed
    async with aiohttp.ClientSession() as session:
        auth = AppAuth(app.id, app.private_key_pem, api_url=hub.api_url, session=session,
                       retry=FAST)
        gh: GitHubClient = await auth.client(installation)
        with knowing(SECRET):
            issue = await gh.post("/repos/acme/widgets/issues", data={
                "title": f"leak {SECRET}",
                "body": f"b64 {base64.b64encode(b'x' + SECRET.encode()).decode()}"})
    shown = json.dumps(hub.get_issue("acme/widgets", issue["number"]))
    assert leaked(shown, SECRET) is None and REDACTED in shown


def test_building_the_pattern_may_redact_again_on_the_same_thread(monkeypatch):
    """Building the pattern can log (the collector finalising an asyncio object does), and
    the log line is redacted by the same call on the same thread: it must not wait for
    itself. It once held a lock there, and a test run hung on it."""
    import threading

    known = redaction.Secrets()
    known.add("s3cret-value-0123456789")
    build = redaction.Forms
    nested: list[str] = []

    def building_logs(values):
        if not nested:
            nested.append("")
            nested[0] = str(known.pattern())  # what a log line's redaction does
        return build(values)

    monkeypatch.setattr(redaction, "Forms", building_logs)
    done = threading.Event()
    worker = threading.Thread(target=lambda: (known.pattern(), done.set()), daemon=True)
    worker.start()
    assert done.wait(10), "pattern() waited for itself"
    assert known.pattern().search("x s3cret-value-0123456789 y")


def test_a_value_added_later_is_a_layer_not_a_rebuild_of_every_form(monkeypatch):
    known = redaction.Secrets()
    key = "-----BEGIN KEY-----" + "k3yMaterial" * 150
    known.add(key)
    assert known.pattern().layers == 1
    built: list[frozenset[str]] = []
    real = redaction.Forms

    def counting(values, below=None):
        built.append(frozenset(values))
        return real(values, below)

    monkeypatch.setattr(redaction, "Forms", counting)
    tokens = [f"ghs_token{i:02d}" + "t" * 30 for i in range(redaction.MAX_LAYERS + 2)]
    for n, token in enumerate(tokens, 1):
        known.add(token)
        pattern = known.pattern()
        assert pattern is known.pattern()  # kept until the next value
        text = f"a {key} b {tokens[0].encode().hex()} c {quote(token)} d"
        assert pattern.sub("X", text) == "a X b X c X d"
        assert pattern.search(token) and not pattern.search("ghs_other" + "t" * 30)
        if n < redaction.MAX_LAYERS:
            # Only the new token's forms were built, beside the layers before.
            assert built[-1] == {token} and pattern.layers == n + 1
    # Past MAX_LAYERS the layers were built again as one, every value in it.
    assert any(key in values and tokens[0] in values for values in built)
    assert known.pattern().layers <= redaction.MAX_LAYERS
    known.keep_only(frozenset({tokens[-1]}))
    assert known.pattern().layers == 1 and not known.pattern().search(key)


def test_a_value_holding_one_known_before_is_masked_whole():
    known = redaction.Secrets()
    token = "ghs_" + "n3sted" * 6
    known.add(token)
    assert known.pattern().layers == 1
    url_password = f"user-{token}-suffix-secret"
    known.add(url_password)
    # Built with the shorter value, not as a layer after it: masked whole, never in part.
    assert known.pattern().sub("X", f"a {url_password} b {token} c") == "a X b X c"
    assert known.pattern().layers == 1


# -- the operator's places -----------------------------------------------------------------


def test_what_people_are_told_names_the_operators_places_by_what_they_are(settings):
    """An error's words carry where hangar keeps things and how it is reached: git's
    "unable to access" names the sandbox gate, a failed copy names the data directory, an
    unreachable endpoint its host and port. What hangar tells people names each by what it
    is; its log keeps them for the operator."""
    from app.redact import PLACES, public
    from app.wiring import remember_places

    configured = settings.model_copy(update={
        "git_proxy_url": "http://10.88.0.1:8431",
        "public_url": "https://hangar.example.com",
        "model_endpoints": {"ANTHROPIC_API_KEY": {"base_url": "https://llm.corp.internal:8443/v1"}},
        "database_url": SecretStr("postgresql://hangar:pw-0123456789@db.corp.internal/hangar"),
    })
    remember_places(configured)
    data = str(configured.data_dir.resolve())
    said = public(
        "fatal: unable to access 'http://10.88.0.1:8431/git/sb-123/acme/widgets.git/': 503\n"
        f"cp: cannot create '{data}/envbuilds/b-1/rootfs': No space left on device\n"
        "Cannot connect to host llm.corp.internal:8443 ssl:default [Connection refused]\n"
        "hangar could not reach the model endpoint https://llm.corp.internal:8443/v1\n"
        "could not connect to postgresql://hangar:pw-0123456789@db.corp.internal/hangar\n"
        "see https://hangar.example.com/jobs/job-1")
    assert said.splitlines() == [
        "fatal: unable to access '[hangar's sandbox gate]/git/sb-123/acme/widgets.git/': 503",
        "cp: cannot create '[hangar's data directory]/envbuilds/b-1/rootfs': No space left "
        "on device",
        "Cannot connect to host [the model endpoint] ssl:default [Connection refused]",
        "hangar could not reach the model endpoint [the model endpoint]",
        "could not connect to [hangar's database]",
        "see https://hangar.example.com/jobs/job-1"]  # hangar's public address stays
    # hangar's log (redact alone) keeps them for the operator.
    assert redact("http://10.88.0.1:8431/git/sb-1") == "http://10.88.0.1:8431/git/sb-1"
    assert "http://10.88.0.1:8431" in PLACES.known()


def test_a_gate_at_hangars_public_address_is_left_as_it_is(settings):
    """hangar's links start with its public URL: a sandbox gate reached at the same
    address is not renamed, or every link to a job page would be."""
    from app.redact import public
    from app.wiring import remember_places

    remember_places(settings.model_copy(update={
        "git_proxy_url": "https://hangar.example.com", "public_url": "https://hangar.example.com/"}))
    assert public("https://hangar.example.com/jobs/job-1") == "https://hangar.example.com/jobs/job-1"


async def test_what_hangar_writes_to_github_names_no_place_of_the_operators(installed):  # noqa: F811
    hub, app, installation = installed
    from app.redact import remember_place

    remember_place("/srv/hangar-data", "[hangar's data directory]")
    async with aiohttp.ClientSession() as session:
        auth = AppAuth(app.id, app.private_key_pem, api_url=hub.api_url, session=session,
                       retry=FAST)
        gh: GitHubClient = await auth.client(installation)
        issue = await gh.post("/repos/acme/widgets/issues", data={
            "title": "a failure", "body": "cp: /srv/hangar-data/envbuilds/x: disk full"})
    assert hub.get_issue("acme/widgets", issue["number"])["body"] == \
        "cp: [hangar's data directory]/envbuilds/x: disk full"
