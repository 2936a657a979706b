"""Who may call hangar's API and MCP server: named tokens with scopes, and the audit trail.

A token is shown once and stored as its SHA-256 (a row of kind `api_token`). Scopes:
`read` (every GET), `operate` (start, follow up, try N, pick, cancel, verify), `land`
(ask to land, cancel a land request), `admin` (tokens, the audit trail, environment
builds; it holds every other scope too). No scope approves anything: approval stays a
person's review in GitHub. `HANGAR_API_TOKEN` is an admin token named `operator`.

A token may act for a GitHub login (`--login`): work it asks for is then that person's,
so, as with a `/hangar` comment of theirs, their approval does not count for it. A token
without one asks as `api`, and every writer's approval counts.

A token may be limited to repositories (`--repo owner/name`, repeated): it then reaches
jobs, runs, land requests and asks of those repositories only, and nothing that spans
every repository (usage, the fleet page); such a token cannot be an admin.
"""

from __future__ import annotations

import argparse
import getpass
import hashlib
import hmac
import re
import secrets
import sys
import time
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, Field

from app.models import API_ASKER, changed
from app.settings import Settings
from app.store import Store

Scope = Literal["read", "operate", "land", "admin"]
SCOPES: tuple[Scope, ...] = ("read", "operate", "land", "admin")
SCOPE_MEANING: dict[str, str] = {
    "read": "read jobs, runs, rankings, land requests, usage and the event stream",
    "operate": "start work, ask for follow-up turns, try N, pick, cancel, verify again",
    "land": "ask to land a pull request, withdraw that request",
    "admin": "manage tokens, read the audit trail, environment builds; holds every scope",
}
TOKEN_KIND = "api_token"
TOKEN_PREFIX = "hgt_"
OPERATOR = "operator"  # the name HANGAR_API_TOKEN goes by in the audit trail
_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,62}")
# GitHub's rule for a login: letters, digits and single inner hyphens, at most 39.
LOGIN = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9]|-(?=[A-Za-z0-9])){0,38}")
REPO = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9]|-(?=[A-Za-z0-9])){0,38}/[A-Za-z0-9._-]{1,100}")


class AccessError(ValueError):
    """A token request hangar refuses; the message says what to do instead."""


class ApiToken(BaseModel):
    name: str
    token_hash: str  # sha256 of the secret; the secret itself is never stored
    scopes: list[Scope]
    created_by: str
    login: str | None = None  # the GitHub login whose asks these are, when one is named
    repos: list[str] | None = None  # the repositories it reaches; None: every one
    created_at: float = Field(default_factory=time.time)
    revoked_at: float | None = None
    revoked_by: str | None = None


@dataclass(frozen=True)
class Principal:
    """The caller of one request: a token's name and what it may do."""

    name: str
    scopes: frozenset[str]
    login: str | None = None  # the GitHub login the token acts for
    repos: frozenset[str] | None = None  # lowercased owner/name it reaches; None: all

    def allows(self, scope: str) -> bool:
        return scope in self.scopes or "admin" in self.scopes

    def reaches(self, repo: str) -> bool:
        return self.repos is None or repo.lower() in self.repos

    @property
    def who(self) -> str:
        return f"token:{self.name}"

    @property
    def asker(self) -> str:
        """Who asked: the token's login, else the token itself (`token:NAME`, which no
        GitHub login can be, so it is never rendered as a mention nor taken for a person
        by the approval rules)."""
        return self.login or f"{API_ASKER}{self.name}"


def parse_scopes(text: str) -> list[Scope]:
    """`read,operate,land` → the scopes, in the canonical order; unknown words refused."""
    words = [w.strip().lower() for w in text.split(",") if w.strip()]
    unknown = [w for w in words if w not in SCOPES]
    if unknown or not words:
        raise AccessError(f"scopes are a comma-separated list of {', '.join(SCOPES)} "
                          f"(e.g. `--scope read,operate,land`); got {text!r}")
    return [s for s in SCOPES if s in words]


def digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def create_token(store: Store, name: str, scopes: list[Scope], *, who: str,
                 login: str | None = None, repos: list[str] | None = None) -> str:
    """Make a token and return its secret, which is shown this once and never again."""
    if not _NAME.fullmatch(name):
        raise AccessError(f"a token name is 1-63 lowercase letters, digits, `.`, `_` or `-`, "
                          f"starting with a letter or digit (e.g. `orchestrator`); got {name!r}")
    if name == OPERATOR:
        raise AccessError(f"`{OPERATOR}` is the name of HANGAR_API_TOKEN; choose another name")
    existing = store.get(TOKEN_KIND, name, ApiToken)
    if existing is not None and existing.revoked_at is None:
        raise AccessError(f"a token named {name!r} exists; revoke it first "
                          f"(`hangar token revoke {name}`) or choose another name")
    if not scopes:
        raise AccessError("a token needs at least one scope: " + ", ".join(SCOPES))
    if login is not None and not LOGIN.fullmatch(login):
        raise AccessError(f"a GitHub login is letters, digits and single hyphens, at most 39 "
                          f"(e.g. `mona`); got {login!r}")
    if repos is not None:
        bad = [r for r in repos if not REPO.fullmatch(r)]
        if bad or not repos:
            raise AccessError(f"a repository is owner/name (e.g. `--repo acme/widgets`); got "
                              f"{(bad or [''])[0]!r}")
        if "admin" in scopes:
            raise AccessError("an admin token reaches every repository (tokens, the audit "
                              "trail, builds): drop --repo, or the admin scope")
        repos = sorted({r.lower() for r in repos})
    secret = TOKEN_PREFIX + secrets.token_urlsafe(32)
    token = ApiToken(name=name, token_hash=digest(secret), scopes=scopes, created_by=who,
                     login=login, repos=repos)
    store.put(TOKEN_KIND, name, token, active=True)
    store.audit(who, "token.create", name,
                f"scopes {','.join(scopes)}" + (f", for @{login}" if login else "")
                + (f", only {', '.join(repos)}" if repos else ""))
    return secret


def revoke_token(store: Store, name: str, *, who: str) -> ApiToken:
    token = store.get(TOKEN_KIND, name, ApiToken)
    if token is None or token.revoked_at is not None:
        raise AccessError(f"no live token named {name!r}; `hangar token list` shows them")
    token = changed(token, **{"revoked_at": time.time(), "revoked_by": who})
    store.put(TOKEN_KIND, name, token, active=False)
    store.audit(who, "token.revoke", name, None)
    return token


def list_tokens(store: Store) -> list[ApiToken]:
    return store.all(TOKEN_KIND, ApiToken)


def authenticate(store: Store, settings: Settings, authorization: str) -> Principal | None:
    """The caller behind an `Authorization: Bearer …` header, or None."""
    scheme, _, secret = authorization.partition(" ")
    secret = secret.strip()
    if scheme.lower() != "bearer" or not secret:
        return None
    if settings.api_token is not None and hmac.compare_digest(
            secret.encode(), settings.api_token.get_secret_value().encode()):
        return Principal(OPERATOR, frozenset({"admin"}))
    wanted = digest(secret)
    for token in store.all(TOKEN_KIND, ApiToken, active=True):
        if hmac.compare_digest(token.token_hash, wanted):
            return Principal(token.name, frozenset(token.scopes), token.login,
                             None if token.repos is None else frozenset(token.repos))
    return None


def api_enabled(store: Store, settings: Settings) -> bool:
    """The API answers once there is HANGAR_API_TOKEN or a live named token."""
    return settings.api_token is not None or bool(store.all(TOKEN_KIND, ApiToken, active=True))


def tokens_table(tokens: list[ApiToken]) -> str:
    """`hangar token list`: one line per token, never a secret."""
    if not tokens:
        return "no API tokens yet; `hangar token create NAME --scope read,operate` makes one"
    lines = []
    for t in tokens:
        state = "revoked" if t.revoked_at else "live"
        when = time.strftime("%Y-%m-%d %H:%M", time.gmtime(t.created_at))
        lines.append(f"{t.name:<24} {state:<8} {','.join(t.scopes):<24} created {when} UTC "
                     f"by {t.created_by}" + (f", asks as @{t.login}" if t.login else "")
                     + (f", only {', '.join(t.repos)}" if t.repos else ""))
    return "\n".join(lines)


def add_token_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="token_command", required=True)
    create = sub.add_parser("create", help="make a token; its secret is printed once")
    create.add_argument("name", metavar="NAME")
    create.add_argument("--scope", required=True, metavar="SCOPES",
                        help=f"comma-separated, of {', '.join(SCOPES)}")
    create.add_argument("--login", metavar="LOGIN",
                        help="the GitHub login whose asks these are: their approval then does "
                             "not count for the work the token starts")
    create.add_argument("--repo", action="append", metavar="OWNER/NAME",
                        help="limit the token to this repository (repeat for more); it then "
                             "reaches nothing of any other")
    sub.add_parser("list", help="tokens, their scopes, live or revoked (never secrets)")
    sub.add_parser("revoke", help="revoke a token at once").add_argument("name", metavar="NAME")


def token_command(args: argparse.Namespace, settings: Settings) -> int:
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    store = Store(settings.database)
    who = f"cli:{getpass.getuser()}"
    try:
        if args.token_command == "create":
            secret = create_token(store, args.name, parse_scopes(args.scope), who=who,
                                  login=args.login, repos=args.repo)
            print(secret)
            print(f"hangar: token {args.name!r} made; this is the only time its secret is "
                  "shown. Send it as `Authorization: Bearer <token>`.", file=sys.stderr)
        elif args.token_command == "list":
            print(tokens_table(list_tokens(store)))
        elif args.token_command == "revoke":
            revoke_token(store, args.name, who=who)
            print(f"hangar: token {args.name!r} revoked", file=sys.stderr)
    except AccessError as exc:
        print(f"hangar: {exc}", file=sys.stderr)
        return 1
    finally:
        store.close()
    return 0
