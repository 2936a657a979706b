"""People's sessions on hangar's pages that end early: a person who revokes their
authorization of the App on GitHub is signed out of every session they began before.

The session itself is a signed cookie (app/web/signin.py), good for eight hours; what ends
it early is a row here, one per login, which the pages read at every request and the
`github_app_authorization` handler writes."""

from __future__ import annotations

import time

from pydantic import BaseModel

from app.store import Store

KIND = "sessions_ended"  # the store's rows, one per login (lower case)


class SessionsEnded(BaseModel):
    """Sessions `login` began before `before` (epoch seconds) are over."""

    login: str
    before: float


def end_sessions(store: Store, login: str) -> None:
    """Every session `login` began until now is over; a new sign-in starts a new one."""
    store.put(KIND, login.lower(), SessionsEnded(login=login, before=time.time()),
              active=False)


def session_ended(store: Store, login: str, began: float) -> bool:
    """Whether the session `login` began at `began` was ended since."""
    ended = store.get(KIND, login.lower(), SessionsEnded)
    return ended is not None and began <= ended.before
