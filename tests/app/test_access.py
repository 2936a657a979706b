"""Tokens and scopes, usage per credential, and the change log waiters wake on."""

from __future__ import annotations

import asyncio

import pytest
from pydantic import SecretStr

from app.changes import Changes
from app.models import Run, RunStage, RunState
from app.store import Store
from app.web import access
from app.web.access import AccessError, Principal
from app.web.api import usage_view


@pytest.mark.parametrize(
    ("text", "scopes"),
    [
        ("read", ["read"]),
        ("land, read ,operate", ["read", "operate", "land"]),
        ("ADMIN", ["admin"]),
        ("read,approve", None),
        ("", None),
        ("read;operate", None),
    ],
)
def test_scopes_are_read_from_a_comma_list(text, scopes):
    if scopes is None:
        with pytest.raises(AccessError, match="read, operate, land, admin"):
            access.parse_scopes(text)
    else:
        assert access.parse_scopes(text) == scopes


@pytest.mark.parametrize(
    ("held", "asked", "allowed"),
    [
        ({"read"}, "read", True),
        ({"read"}, "operate", False),
        ({"operate", "land"}, "read", False),  # scopes are separate: read is asked for
        ({"land"}, "land", True),
        ({"admin"}, "land", True),  # admin holds every scope
        ({"admin"}, "read", True),
        ({"read", "operate", "land"}, "admin", False),
    ],
)
def test_what_a_token_allows(held, asked, allowed):
    assert Principal("t", frozenset(held)).allows(asked) is allowed


def test_tokens_are_hashed_found_by_secret_and_revoked(tmp_path, settings):
    store = Store(tmp_path / "hangar.db")
    secret = access.create_token(store, "bot", ["read"], who="cli:me")
    assert secret not in (tmp_path / "hangar.db").read_bytes().decode("latin-1")
    assert access.authenticate(store, settings, f"Bearer {secret}") == Principal(
        "bot", frozenset({"read"}))
    assert access.authenticate(store, settings, f"Basic {secret}") is None
    assert access.authenticate(store, settings, f"Bearer {secret}x") is None
    with pytest.raises(AccessError, match="exists"):
        access.create_token(store, "bot", ["read"], who="cli:me")
    with pytest.raises(AccessError, match="lowercase"):
        access.create_token(store, "Bad Name", ["read"], who="cli:me")
    access.revoke_token(store, "bot", who="cli:me")
    assert access.authenticate(store, settings, f"Bearer {secret}") is None
    assert [(e["who"], e["action"]) for e in store.audit_trail()] == [
        ("cli:me", "token.create"), ("cli:me", "token.revoke")]


def test_the_operator_token_is_admin(tmp_path, settings):
    store = Store(tmp_path / "hangar.db")
    settings.api_token = SecretStr("op-secret-0123456789")
    assert access.authenticate(store, settings, "Bearer op-secret-0123456789") == Principal(
        "operator", frozenset({"admin"}))
    with pytest.raises(AccessError, match="HANGAR_API_TOKEN"):
        access.create_token(store, "operator", ["read"], who="cli:me")


def _run(state: RunState, *, cost: float = 0.0, started: bool = True, kind: str = "agent",
         rate_limit: dict | None = None) -> Run:
    return Run(job_id="job-1", branch="b", base_branch="main", state=state, kind=kind,
               stage=RunStage.DONE if state == RunState.EXITED else RunStage.PENDING,
               env={"model_credential_env": "ANTHROPIC_API_KEY"},
               started_at=1.0 if started else None,
               agent={"cost_usd": cost, "turns": 2, **({"rate_limit": rate_limit}
                                                       if rate_limit else {})})


def test_usage_per_credential():
    runs = [_run(RunState.EXITED, cost=0.5, rate_limit={"status": "allowed_warning"}),
            _run(RunState.RUNNING, cost=0.25), _run(RunState.QUEUED, started=False),
            _run(RunState.EXITED, kind="verify", cost=9.0)]
    assert usage_view(runs, 3) == {"credentials": {"ANTHROPIC_API_KEY": {
        "running": 1, "queued": 1, "max_concurrent": 3, "turns": 2, "agent_turns": 6,
        "cost_usd": 0.75, "cost_unknown_turns": 0, "input_tokens": 0, "output_tokens": 0,
        "rate_limit": {"status": "allowed_warning"}, "windows": [], "paused": None,
        "resumed": None}}}


def test_usage_sums_turns_own_costs_and_counts_unknown_ones():
    priced = _run(RunState.EXITED, cost=0.11)
    priced.agent.update(input_tokens=1000, output_tokens=10)
    unpriced = _run(RunState.EXITED)
    unpriced.agent.update(cost_usd=None, input_tokens=500, output_tokens=5)
    window = {"window": "7d", "utilization": 0.91, "reset_at": 2e9, "status": None,
              "source": "anthropic headers", "at": 1.0}
    view = usage_view([priced, unpriced], 3, {"ANTHROPIC_API_KEY": {
        "windows": [window], "paused": None, "resumed": None}})["credentials"]
    usage = view["ANTHROPIC_API_KEY"]
    assert (usage["cost_usd"], usage["cost_unknown_turns"]) == (0.11, 1)
    assert (usage["input_tokens"], usage["output_tokens"]) == (1500, 15)
    assert usage["windows"] == [window]


async def test_waiters_wake_on_the_change_not_a_timer(tmp_path):
    store = Store(tmp_path / "hangar.db")
    changes = Changes(asyncio.get_running_loop(), keep=3)
    store.listeners.append(changes.record)
    after = changes.seq
    waiting = asyncio.create_task(changes.wait(after, lambda c: c.job == "job-2", 30))
    await asyncio.sleep(0)
    store.note("job-1", "not this job")
    await asyncio.sleep(0)
    assert not waiting.done()
    loop = asyncio.get_running_loop()
    started = loop.time()
    store.note("job-2", "this one")
    found = await waiting
    assert loop.time() - started < 1 and [(c.kind, c.job) for c in found] == [("note", "job-2")]
    for i in range(4):
        store.note("job-3", f"line {i}")
    assert changes.missed(after) and not changes.missed(changes.seq - 1)
    assert await changes.wait(changes.seq, lambda c: True, 0.01) == []


async def test_a_number_from_before_a_restart_is_missed_not_waited_past(tmp_path):
    loop = asyncio.get_running_loop()
    before = Changes(loop)
    before.record("note", "job-1", None)
    before.record("note", "job-1", None)
    old = before.seq
    after_restart = Changes(loop)  # a new process: nothing of the old ring is here
    assert after_restart.seq > old
    assert after_restart.missed(old)  # said at once, before any new change
    after_restart.record("note", "job-1", None)
    assert after_restart.missed(old) and not after_restart.missed(after_restart.seq - 1)
    assert [c.seq for c in after_restart.since(old)] == [after_restart.seq]
    assert after_restart.seq < 2**53


def test_a_token_may_act_for_a_github_login(tmp_path, settings):
    store = Store(tmp_path / "hangar.db")
    secret = access.create_token(store, "mona-bot", ["operate"], who="cli:root", login="mona-lisa")
    plain = access.create_token(store, "plain", ["operate"], who="cli:root")
    mona = access.authenticate(store, settings, f"Bearer {secret}")
    assert (mona.login, mona.asker) == ("mona-lisa", "mona-lisa")
    assert access.authenticate(store, settings, f"Bearer {plain}").asker == "token:plain"
    assert "asks as @mona-lisa" in access.tokens_table(access.list_tokens(store))
    for bad in ("-mona", "mona--lisa", "mona lisa", "m" * 40, "mona-"):
        with pytest.raises(AccessError, match="GitHub login"):
            access.create_token(store, f"t{len(bad)}", ["read"], who="cli:root", login=bad)


def test_a_token_may_be_limited_to_repositories(tmp_path, settings):
    store = Store(tmp_path / "hangar.db")
    secret = access.create_token(store, "ci", ["read", "operate"], who="cli:me",
                                 repos=["Acme/Widgets", "acme/gadgets"])
    principal = access.authenticate(store, settings, f"Bearer {secret}")
    assert principal.repos == frozenset({"acme/widgets", "acme/gadgets"})
    assert principal.reaches("acme/WIDGETS") and not principal.reaches("acme/secret")
    assert Principal("all", frozenset({"read"})).reaches("any/repo")
    assert "only acme/gadgets, acme/widgets" in access.tokens_table(access.list_tokens(store))
    for repos, scopes, said in [(["acme"], ["read"], "owner/name"),
                                ([], ["read"], "owner/name"),
                                (["acme/widgets"], ["admin"], "admin token")]:
        with pytest.raises(AccessError, match=said):
            access.create_token(store, "x", scopes, who="cli:me", repos=repos)
