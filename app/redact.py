"""Nothing secret leaves hangar: one redaction for everything it posts, answers, logs,
stores of a sandbox's output, or tells a sandbox.

Two kinds of secret are masked wherever they appear:

- **Shapes**: tokens recognisable by their form — GitHub's (`ghp_`, `github_pat_`, `gho_`,
  `ghu_`, `ghs_`, `ghr_`), hangar's own (`hgs_` push, `hgm_` model, `hge_` egress, `hgt_`
  API), model vendors' keys, AWS key ids, private keys in PEM, credentials in a URL's
  userinfo or in a query parameter named like one, and `Authorization`/`x-api-key` header
  values.
- **Known values**: every secret this process holds or hands out — the App's private
  key, the webhook secret, the API token, the model credentials and the credentials of
  their endpoints, the operator's build secrets — registered once with `remember` when
  hangar reads them. A known value is masked in each encoding a program would leave it
  in: as it is, base64 and base64url (at each of the three byte offsets it may start at
  inside a longer encoded text), hex (either case) and URL-encoded.

The known values live in one registry for the process (`KNOWN`): secrets come from the
process's environment and settings, and a log line, a GitHub body and an API answer are
masked alike, whoever builds them.
"""

from __future__ import annotations

import base64
import json
import re
import threading
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import quote, quote_plus, urlsplit

from ahocorasick_rs import AhoCorasick, MatchKind

REDACTED = "[redacted]"
# Shorter values are not masked: they would mask ordinary words.
MIN_SECRET_CHARS = 8

# Token shapes GitHub, hangar and model vendors use; matched wherever they appear.
# GitHub's prefixes: ghp_ (classic PAT), github_pat_ (fine-grained PAT), gho_ (OAuth),
# ghu_ (user-to-server), ghs_ (installation), ghr_ (refresh). Lengths vary up to 255, and
# stateless installation tokens are ghs_<app id>_<JWT>: dots, dashes and underscores.
# hangar's own: hgs_ (push proxy), hgm_ (model gateway), hge_ (egress), hgt_ (API).
_PATTERNS = re.compile(
    r"(gh[pousr]_[A-Za-z0-9_][A-Za-z0-9._\-]{18,}[A-Za-z0-9_]"
    r"|github_pat_[A-Za-z0-9_]{20,}"
    r"|hg[smet]_[A-Za-z0-9_\-]{16,}"
    r"|sk-ant-[A-Za-z0-9_\-]{16,}"
    r"|sk-[A-Za-z0-9_\-]{20,}"
    r"|AKIA[0-9A-Z]{16}"
    r"|-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----)"
)
# A URL's userinfo (any scheme): scheme://user:password@host.
_USERINFO_URL = re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://)[^/\s:@]+:[^/\s@]+@")
# What every match of it holds, found from its literal "://" (the pattern above starts at
# each word instead, ~7x slower): most texts with a URL have no userinfo in it.
_USERINFO_HINT = re.compile(r"://[^/\s:@]+:[^/\s@]+@")
# Query parameters that carry credentials: ?key=…, &access_token=…, &sig=…
_QUERY_SECRET = re.compile(
    r"(?i)([?&](?:api[_-]?key|key|token|access[_-]?token|auth|sig|signature|password|"
    r"secret|client[_-]?secret)=)[^&#\s\"'<>]+")
_HEADER = re.compile(
    r"(?i)((?:proxy-)?authorization:\s*(?:bearer|token|basic)\s+|x-api-key:\s*)[^\s\"',]+")


def encodings(secret: str) -> set[str]:
    """`secret` as a program would leave it: raw, base64 and base64url at each byte offset,
    hex in either case, URL-encoded (escapes in either case). Encoded forms too short to be
    told from chance are left out."""
    if len(secret) < MIN_SECRET_CHARS:
        return set()
    raw = secret.encode()
    escaped = {quote(secret, safe=""), quote_plus(secret, safe="")}
    # Percent-escapes in either case: `%2F` and `%2f` are the same byte.
    lowered = {re.sub(r"%[0-9A-F]{2}", lambda m: m.group().lower(), e) for e in escaped}
    found = {secret, raw.hex(), raw.hex().upper(), *escaped, *lowered}
    for offset in range(3):
        # Inside a longer text the secret's bytes start `offset` bytes into a group of
        # three; the characters that depend on its bytes alone are the same wherever it is.
        padded = b"\0" * offset + raw
        first, end = -(-8 * offset // 6), 8 * (offset + len(raw)) // 6
        for encode in (base64.b64encode, base64.urlsafe_b64encode):
            found.add(encode(padded).decode()[first:end])
    return {form for form in found if len(form) >= MIN_SECRET_CHARS}


# Layers a pattern may have before it is built again as one: a layer costs each text one
# more pass (a few microseconds), a rebuild every form of every value.
MAX_LAYERS = 8


class Secrets:
    """Known secret values and one pattern that finds any of their encodings."""

    def __init__(self) -> None:
        self._values: set[str] = set()
        self._lock = threading.Lock()
        self._pattern: Forms | None = None
        self._covered: frozenset[str] = frozenset()  # the values _pattern finds

    def add(self, *values: str | None) -> None:
        fresh = self.unknown(v for v in values if v)
        if not fresh:
            return
        with self._lock:
            self._values |= fresh

    def known(self) -> frozenset[str]:
        with self._lock:
            return frozenset(self._values)

    def keep_only(self, values: frozenset[str]) -> None:
        """Forget every value but these (a process that hosts one hangar after another,
        as the tests do: each hangar's own key would otherwise make every later pattern
        larger, and every start and every log line slower)."""
        with self._lock:
            if self._values != values:
                self._values = set(values)
                self._pattern, self._covered = None, frozenset()

    def unknown(self, values: Iterable[str]) -> set[str]:
        """Those of `values` long enough to mask and not registered."""
        return {v for v in values if v and len(v) >= MIN_SECRET_CHARS} - self._values

    def pattern(self) -> Forms | None:
        with self._lock:
            pattern, covered = self._pattern, self._covered
            if len(covered) == len(self._values):  # values are only added, or all replaced
                return pattern
            values = frozenset(self._values)
        # Built with no lock held: building may log (the collector finalising an asyncio
        # object does), and that log line is redacted with this very call, on the same
        # thread; a lock held here would wait for itself forever.
        # Values added since (a token minted per push, say) get a layer of their own, not
        # a rebuild of every form of every value: the App's key alone has hundreds.
        # A value inside another (or around it) is built with it: one layer masking the
        # shorter first would leave the rest of the longer one to be seen.
        fresh = values - covered
        if pattern is not None and covered <= values and pattern.layers < MAX_LAYERS and \
                not any(a in b or b in a for a in fresh for b in covered):
            pattern = Forms(fresh, below=pattern)
        else:
            pattern = Forms(values)
        with self._lock:
            if self._values == values:
                self._pattern, self._covered = pattern, values
        return pattern


class Forms:
    """Every encoding of some values, found in a text in one pass (Aho-Corasick, the
    leftmost and then the longest form first).

    A regular expression over the same forms (a trie of alternations) cost ~260 us per
    log line and ~0.4 s to build with the App's key among them: Python's engine tries
    the trie at every position of the text, and nearly every character of a text starts
    some base64 form."""

    def __init__(self, values: Iterable[str], below: Forms | None = None):
        """The forms of `values`, and those `below` finds (each a layer of its own)."""
        forms = sorted({form for value in values for form in encodings(value)})
        self._finders: list[AhoCorasick] = [*(below._finders if below is not None else []),
                         *([AhoCorasick(forms, matchkind=MatchKind.LeftmostLongest)]
                           if forms else [])]

    @property
    def layers(self) -> int:
        return len(self._finders)

    def search(self, text: str) -> bool:
        return any(finder.find_matches_as_indexes(text) for finder in self._finders)

    def sub(self, replacement: str, text: str) -> str:
        for finder in self._finders:
            found = finder.find_matches_as_indexes(text)
            if not found:
                continue
            parts, last = [], 0
            for _form, start, end in found:
                parts += [text[last:start], replacement]
                last = end
            parts.append(text[last:])
            text = "".join(parts)
        return text


KNOWN = Secrets()


def remember(*values: str | None) -> None:
    """Register secret values hangar holds or hands out: from now on each is masked, in
    every encoding, from everything that leaves hangar."""
    KNOWN.add(*values)


def remember_pem(pem: str | None) -> None:
    """A private key: the whole PEM, its body without line breaks, and each of its lines
    (a program may print one)."""
    if not pem:
        return
    body = [line.strip() for line in pem.splitlines()
            if line.strip() and not line.startswith("-----")]
    remember(pem.strip(), "".join(body), *(line for line in body if len(line) >= 16))


def remember_url(url: str | None) -> None:
    """The credentials in an endpoint's URL: its userinfo password and user, and the
    values of its query."""
    if not url:
        return
    parts = urlsplit(url)
    remember(parts.password, parts.username if parts.password else None)
    for pair in parts.query.split("&"):
        remember(pair.partition("=")[2])


def redact(text: str, known: Iterable[str] = ()) -> str:
    """`text` with every known secret (in every encoding) and every token shape masked."""
    if not text:
        return text
    extra = KNOWN.unknown(known)
    if extra:
        text = Forms(extra).sub(REDACTED, text)
    pattern = KNOWN.pattern()
    if pattern is not None:
        text = pattern.sub(REDACTED, text)
    text = _PATTERNS.sub(REDACTED, text)
    # The shapes below are rare: a plain substring test (C speed) spares their patterns.
    if "://" in text and _USERINFO_HINT.search(text):
        text = _USERINFO_URL.sub(r"\1" + REDACTED + "@", text)
    if "=" in text:
        text = _QUERY_SECRET.sub(r"\1" + REDACTED, text)
    lowered = text.lower()
    if "authorization" in lowered or "x-api-key" in lowered:
        text = _HEADER.sub(r"\1" + REDACTED, text)
    return text


def redact_data(data: Any, clean: Callable[[str], str] = redact) -> Any:
    """Every string in a JSON-shaped value (keys too) redacted (or made `public`)."""
    if isinstance(data, str):
        return clean(data)
    if isinstance(data, dict):
        return {redact_data(k, clean): redact_data(v, clean) for k, v in data.items()}
    if isinstance(data, list | tuple):
        return [redact_data(v, clean) for v in data]
    return data


def redact_json_body(body: bytes, clean: Callable[[str], str] = redact) -> bytes:
    """A JSON request or answer body with its strings redacted (or made `public`); another
    body as text."""
    if not body:
        return body
    try:
        data = json.loads(body)
    except ValueError:
        text = body.decode("utf-8", "surrogateescape")
        cleaned = clean(text)
        return body if cleaned == text else cleaned.encode("utf-8", "surrogateescape")
    cleaned = redact_data(data, clean)
    return body if cleaned == data else json.dumps(cleaned).encode()


# -- the operator's places: what people are told names them by what they are ----------


class Places:
    """Where hangar keeps things and how it is reached: its data directory, its sandbox
    gate, the model endpoints, its database. None is a secret, so logs keep them for the
    operator; but none is the business of the people hangar answers, and an error's words
    (git's "unable to access 'http://10.0.0.5:8080/git/…'", a path under the data
    directory) carry them. `public` names each by what it is instead."""

    def __init__(self) -> None:
        self._names: dict[str, str] = {}
        self._lock = threading.Lock()
        self._order: list[tuple[str, str]] = []

    def add(self, value: str | None, name: str) -> None:
        if not value or len(value) < MIN_SECRET_CHARS:
            return
        with self._lock:
            self._names[value] = name
            # The longest first: a path inside the data directory is named as the one
            # it is, not as the data directory followed by the rest.
            self._order = sorted(self._names.items(), key=lambda item: -len(item[0]))

    def hide(self, text: str) -> str:
        for value, name in self._order:
            if value in text:
                text = text.replace(value, name)
        return text

    def keep_only(self, values: dict[str, str]) -> None:
        with self._lock:
            self._names = dict(values)
            self._order = sorted(self._names.items(), key=lambda item: -len(item[0]))

    def known(self) -> dict[str, str]:
        with self._lock:
            return dict(self._names)


PLACES = Places()


def remember_place(value: str | None, name: str) -> None:
    """A host path or an address of the operator's: from now on what hangar tells people
    says `name` instead."""
    PLACES.add(value, name)


def public(text: str) -> str:
    """`text` as hangar may tell a person: secrets masked, and the operator's places named
    by what they are (app.redact.Places)."""
    return redact(PLACES.hide(text)) if text else text


# Room around a cut: longer than any secret's encoding, so none is cut before it is masked.
_CUT_MARGIN = 16384


def tail(text: str, max_chars: int = 6000, max_lines: int = 80) -> str:
    """The end of an output, redacted before it is cut (a secret cut in two is not found)."""
    lines = redact(text[-(max_chars + _CUT_MARGIN):]).splitlines()[-max_lines:]
    out = "\n".join(lines)
    return out[-max_chars:]
