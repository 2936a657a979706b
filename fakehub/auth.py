"""Credentials: App JWTs, installation tokens, user tokens, and what each may touch."""

from __future__ import annotations

import functools
import secrets
import time
from datetime import timedelta

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from fakehub.state import (
    App,
    Identity,
    Installation,
    Repo,
    Store,
    Token,
    iso,
    now,
    permission_at_least,
)

# GitHub tolerates some clock drift on `iat`; its documentation suggests 60 s.
CLOCK_SKEW = 60
JWT_MAX_LIFETIME = 600
TOKEN_LIFETIME = timedelta(hours=1)


class AuthError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def new_key_pair() -> tuple[str, str]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    ).decode()
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    ).decode()
    return private, public


@functools.cache
def app_key_pair(n: int) -> tuple[str, str]:
    """The key pair of a fakehub's n-th App. Making one costs ~0.1 s of CPU, and a test run
    starts hundreds of fakehubs: each key is made once per process, and the Apps of one
    fakehub never share a key, as on GitHub."""
    return new_key_pair()


def user_token() -> str:
    return "ghp_" + secrets.token_urlsafe(27).replace("-", "a").replace("_", "b")[:36]


def installation_token() -> str:
    return "ghs_" + secrets.token_urlsafe(27).replace("-", "a").replace("_", "b")[:36]


def verify_app_jwt(store: Store, token: str) -> App:
    """The App a JWT speaks for, checked as GitHub checks it."""
    try:
        claims = jwt.decode(token, options={"verify_signature": False})
    except jwt.PyJWTError as exc:
        raise AuthError(401, "A JSON web token could not be decoded") from exc
    app = _app_for_issuer(store, claims.get("iss"))
    if app is None:
        raise AuthError(401, "A JSON web token could not be decoded")
    try:
        jwt.decode(
            token,
            app.public_key_pem,
            algorithms=["RS256"],
            options={"verify_exp": False, "verify_iat": False, "require": ["iat", "exp", "iss"]},
        )
    except jwt.PyJWTError as exc:
        raise AuthError(401, "A JSON web token could not be decoded") from exc
    _check_times(claims)
    return app


def _app_for_issuer(store: Store, issuer: object) -> App | None:
    for app in store.apps.values():
        if str(issuer) in (str(app.id), app.client_id):
            return app
    return None


def _check_times(claims: dict) -> None:
    current = time.time()
    iat, exp = claims.get("iat"), claims.get("exp")
    if not isinstance(iat, int | float) or iat > current + CLOCK_SKEW:
        raise AuthError(
            401,
            "'Issued at' claim ('iat') must be an Integer representing the time that the "
            "assertion was issued.",
        )
    if not isinstance(exp, int | float) or exp <= current:
        raise AuthError(
            401,
            "'Expiration time' claim ('exp') must be a numeric value representing the future "
            "time at which the assertion expires.",
        )
    if exp - iat > JWT_MAX_LIFETIME:
        raise AuthError(
            401,
            "'Expiration time' claim ('exp') is too far in the future.",
        )


def lookup_token(store: Store, secret: str) -> Token:
    token = store.tokens.get(secret)
    if token is None or (token.expires_at and token.expires_at <= now()):
        raise AuthError(401, "Bad credentials")
    return token


def active_installation(store: Store, installation_id: int | None) -> Installation:
    """The installation a token acts for, while it may. GitHub refuses the tokens of an
    uninstalled App as it refuses any revoked token (401 "Bad credentials"), and those of
    a suspended installation with 403, naming whose it is and since when."""
    inst = store.installations.get(installation_id or 0)
    if inst is None:
        raise AuthError(401, "Bad credentials")
    if inst.suspended:
        raise AuthError(403, f"Sorry. This installation owned by {inst.account.login} "
                             f"suspended your access at {iso(inst.suspended_at)}.")
    return inst


def identity_for_token(store: Store, token: Token) -> Identity:
    if token.kind == "installation":
        inst = active_installation(store, token.installation_id)
        app = store.apps[inst.app_id]
        return Identity("installation", app.bot, app.id, inst.id, token)
    user = store.user(token.login or "")
    if user is None:
        raise AuthError(401, "Bad credentials")
    return Identity("user", user, token=token)


def identify(store: Store, authorization: str | None) -> Identity | None:
    """The caller named by an Authorization header; None when anonymous."""
    if not authorization:
        return None
    scheme, _, value = authorization.partition(" ")
    value = value.strip()
    if scheme.lower() not in ("bearer", "token") or not value:
        raise AuthError(401, "Bad credentials")
    if value.count(".") == 2 and not value.startswith(("ghs_", "ghp_")):
        app = verify_app_jwt(store, value)
        return Identity("app", app.bot, app.id)
    return identity_for_token(store, lookup_token(store, value))


def mint_installation_token(
    store: Store,
    inst: Installation,
    repositories: list[str] | None = None,
    repository_ids: list[int] | None = None,
    permissions: dict[str, str] | None = None,
) -> Token:
    """A 1-hour token, optionally narrowed to some repositories and permissions. GitHub
    mints none for a suspended installation."""
    if inst.suspended:
        raise AuthError(403, "This installation has been suspended")
    granted = {r.id: r for r in store.installation_repos(inst)}
    repo_ids: set[int] | None = None
    if repositories or repository_ids:
        repo_ids = set()
        for name in repositories or []:
            match = next((r for r in granted.values() if r.name.lower() == name.lower()), None)
            if match is None:
                raise AuthError(422, "There is at least one repository that does not exist or "
                                     "is not accessible to the parent installation.")
            repo_ids.add(match.id)
        for rid in repository_ids or []:
            if rid not in granted:
                raise AuthError(422, "There is at least one repository that does not exist or "
                                     "is not accessible to the parent installation.")
            repo_ids.add(rid)
    perms = dict(inst.permissions)
    if permissions:
        for name, level in permissions.items():
            have = inst.permissions.get(name)
            if have is None or (have == "read" and level in ("write", "admin")):
                raise AuthError(
                    422, "The permissions requested are not granted to this installation."
                )
        perms = dict(permissions)
        perms.setdefault("metadata", "read")
    token = Token(
        token=installation_token(),
        kind="installation",
        expires_at=now() + TOKEN_LIFETIME,
        installation_id=inst.id,
        repo_ids=repo_ids,
        permissions=perms,
    )
    store.tokens[token.token] = token
    return token


def installation_covers(store: Store, ident: Identity, repo: Repo) -> bool:
    inst = store.installations.get(ident.installation_id or 0)
    if inst is None or inst.account.id != repo.owner.id:
        return False
    if inst.repo_ids is not None and repo.id not in inst.repo_ids:
        return False
    token = ident.token
    return not (token and token.repo_ids is not None and repo.id not in token.repo_ids)


def can_read(store: Store, ident: Identity | None, repo: Repo) -> bool:
    if not repo.private:
        return True
    if ident is None or ident.kind == "app":
        return False
    if ident.kind == "installation":
        return installation_covers(store, ident, repo)
    return permission_at_least(store.permission(repo, ident.user), "read")


def installation_permission(ident: Identity, category: str) -> str:
    perms = ident.token.permissions if ident.token else {}
    return perms.get(category, "none")


def new_webhook_secret() -> str:
    return secrets.token_hex(20)
