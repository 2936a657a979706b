"""Nothing secret leaves hangar in what it renders.

Hostile text that embeds a secret hangar knows — as it is, base64 or base64url at any byte
offset inside a longer encoded blob, hex, URL-encoded, in a URL's userinfo, in a JSON
string — goes into every field of every render function (the status comment in each of its
shapes, the PR body and title, every check run output, every reason table's sentences, the
model failure sentences). The output is then searched by an oracle that does not share
hangar's code: it decodes every base64, base64url and hex run at every alignment and
URL-decodes the whole text, and looks for the secret's bytes.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import inspect
import json
import re
import string
from collections.abc import Iterator
from urllib.parse import quote, quote_plus, unquote, unquote_plus

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app import redact, render
from app.landing import LandRequest, LandState
from app.models import Run, RunStage, RunState
from app.render import landing as land_words
from app.render.reasons import Why, word
from tests.test_render_hostile import PIECES, job, renders, runs
from tests.test_render_reasons import TABLES

_B64_RUN = re.compile(r"[A-Za-z0-9+/_\-]{8,}")
_HEX_RUN = re.compile(r"[0-9a-fA-F]{16,}")


def leaked(output: str, secret: str) -> str | None:
    """How `secret` can be read back from `output`, or None."""
    raw = secret.encode()
    if secret in output:
        return "as it is"
    if secret in unquote(output) or secret in unquote_plus(output):
        return "URL-encoded"
    for run in _HEX_RUN.findall(output):
        for start in (0, 1):
            piece = run[start:]
            with contextlib.suppress(ValueError):
                if raw in bytes.fromhex(piece[: len(piece) // 2 * 2]):
                    return "hex"
    for run in _B64_RUN.findall(output):
        standard = run.replace("-", "+").replace("_", "/")
        for start in range(4):
            piece = standard[start:]
            piece = piece[:-1] if len(piece) % 4 == 1 else piece + "=" * (-len(piece) % 4)
            with contextlib.suppress(binascii.Error, ValueError):
                if raw in base64.b64decode(piece):
                    return "base64"
    return None


@contextlib.contextmanager
def knowing(*secrets: str) -> Iterator[None]:
    """A registry of its own for the test, so that the process's stays small."""
    saved = redact.KNOWN
    redact.KNOWN = redact.Secrets()
    try:
        redact.remember(*secrets)
        yield
    finally:
        redact.KNOWN = saved


SECRET = st.text(alphabet=string.ascii_letters + string.digits + "-_.~!$*+/=",
                 min_size=12, max_size=48)


@st.composite
def carrying(draw: st.DrawFn, secret: str) -> str:
    """`secret` as a program would leave it, in hostile text."""
    raw = secret.encode()
    before = draw(st.binary(max_size=5))
    after = draw(st.binary(max_size=5))
    form = draw(st.sampled_from([
        "raw", "b64", "b64url", "hex", "HEX", "quote", "quote_plus", "userinfo", "json"]))
    blob = before + raw + after
    carried = {
        "raw": secret,
        "b64": base64.b64encode(blob).decode(),
        "b64url": base64.urlsafe_b64encode(blob).decode().rstrip("="),
        "hex": blob.hex(),
        "HEX": blob.hex().upper(),
        "quote": quote(secret, safe=""),
        "quote_plus": quote_plus(secret, safe=""),
        "userinfo": f"https://build:{quote(secret, safe='')}@registry.example.com/x",
        "json": json.dumps({"token": secret}),
    }[form]
    words = st.lists(st.sampled_from(PIECES) | st.text(max_size=4), max_size=6).map("".join)
    return draw(words) + carried + draw(words)


# Facts a sentence does arithmetic or lookups with: given as the type it expects.
TYPED_FACTS = {"running": False, "minutes": 30.0, "gap": None, "on_pr": False, "pct": 91.0,
               "threshold": 90.0, "warn_at": 80.0, "until": 2_000_000_000.0, "n": 4, "cap": 3,
               "reset_at": 2_000_000_000.0, "reasons": []}


def sentences(text: str) -> dict[str, str]:
    """Every reason table's every sentence, with text for each fact it names."""
    from app.commands import COMMANDS

    said = {}
    for _, table in TABLES:
        for code, sentence in table.items():
            facts: dict = {}
            for name in inspect.signature(sentence).parameters:
                facts[name] = TYPED_FACTS.get(name, text)
            if "pr" in facts:
                facts["pr"] = {"number": 8, "head": {"label": text, "ref": text}}
            if "command" in facts and code == "wrong_place":
                facts["command"] = COMMANDS[0]
            if code == "review_not_started":
                facts["why"] = Why("max_turns", turns=2)
            if code == "auto_land_refused":  # auto-land's own reason, nested
                facts["why"] = Why("auto_sensitive", paths=[text])
            for nested in ("needs", "cannot"):  # what GitHub's rules ask: the gate's codes
                if nested in facts:
                    facts[nested] = [Why("gate_locked", rule=text)]
            if code == "resumed":
                facts["pauses"] = [Why("model_window_full", window="7d", pct=91.0,
                                       threshold=90.0, until=None, source=text)]
            if code == "sensitive":
                facts["paths"] = [text]
            with contextlib.suppress(KeyError):  # a nested code this table does not word
                said[f"{code}"] = word(table, Why(code, **facts))
    return said


def failures(text: str) -> dict[str, str]:
    """The model failure in each of its kinds, as the status comment and check run say it."""
    base = runs("x")[0]
    shown = {}
    for kind in ("rate_limit", "auth", "unreachable", "resume_failed", "other"):
        run = base.model_copy(update={
            "stage": RunStage.DONE, "state": RunState.EXITED,
            "agent": {"failure": kind, "error_message": text, "http_status": 502,
                      "model": {"last_error": text}}})
        shown[f"{kind} comment"] = render.status_comment(job("x"), [run])
        shown[f"{kind} check"] = render.agent_check_output(run)["summary"]
    return shown


def everything(text: str) -> dict[str, str]:
    error_run = Run(id="run-9", job_id="job-1", attempt=1, branch="hangar/7-ab",
                    base_branch="main", stage=RunStage.ERROR, error=text)
    request = LandRequest(id="land-1", job_id="job-1", repo="acme/widgets",
                          installation_id=1, pr_number=8, base="main", branch="hangar/7-ab",
                          requested_by="mona", state=LandState.REJECTED, reason=text,
                          problems=[text])
    held = {"environment": render.environment_line({"fallback": True, "reason": text}),
            "land line": render.land_line(request),
            "land check": land_words.land_check_summary(request, [(False, text)]),
            "land notes": "\n".join(land_words.land_notes(request)),
            "impostors": render.impostors_note([text]),
            "error run": render.run_line(error_run),
            "pr title": render.pr_title(job("x").model_copy(update={"title": text})),
            "prompt": render.quote_prompt(text), "agent says": render.agent_says(text)}
    return {**renders(text), **sentences(text), **failures(text), **held}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), secret=SECRET)
def test_no_render_shows_a_known_secret_in_any_encoding(data, secret):
    text = data.draw(carrying(secret))
    with knowing(secret):
        for name, shown in everything(text).items():
            how = leaked(shown, secret)
            assert how is None, f"{name} shows the secret {how}: {shown!r}"


@pytest.mark.parametrize("token", [
    "hgs_" + "a1B2-_" * 7, "hgm_" + "Zz09_-" * 7, "hge_" + "q" * 43, "hgt_" + "T" * 43])
def test_hangars_own_tokens_never_show(token):
    for name, shown in everything(f"HTTP_PROXY=http://sb-1:{token}@127.0.0.1:9 {token}").items():
        assert token not in shown, name


def test_the_oracle_finds_each_encoding():
    secret = "build-secret-1234567"
    for blob in (b"x" + secret.encode() + b"yz", b"xy" + secret.encode(), secret.encode()):
        assert leaked(f"log: {base64.b64encode(blob).decode()} end", secret) == "base64"
        assert leaked(base64.urlsafe_b64encode(blob).decode(), secret) == "base64"
        assert leaked(f"<{blob.hex()}>", secret) == "hex"
    assert leaked(quote(secret, safe=""), secret) in ("as it is", "URL-encoded")
    assert leaked("nothing here", secret) is None
