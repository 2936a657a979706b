"""Webhook intake under kill -9: a delivery answered 2xx is on disk, and one whose
dispatch outcome was not yet written when hangar died is dispatched after the restart."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3

import aiohttp

from tests.app.conftest import webhook_examples, webhook_headers
from tests.e2e.conftest import wait_until

SENT, KILL_AFTER = 120, 60


def _states(db_path) -> dict[str, str]:
    db = sqlite3.connect(db_path)
    try:
        return dict(db.execute("SELECT id, state FROM deliveries"))
    finally:
        db.close()


def test_a_delivery_answered_2xx_survives_kill_9_and_is_dispatched_after_restart(world):
    hangar = world.start_hangar(process=True)
    payload = next(p for e, a, p in webhook_examples() if (e, a) == ("issue_comment", "created"))
    body = json.dumps({**payload, "comment": {**payload["comment"], "body": "Looks good."}})
    acknowledged: list[str] = []

    async def deliver() -> None:
        async with aiohttp.ClientSession() as session:

            async def one(n: int) -> None:
                delivery = f"kill-{n}"
                headers = webhook_headers("issue_comment", body.encode(), delivery=delivery,
                                          secret=world.app.webhook_secret)
                async with session.post(f"{hangar.url}/webhook", data=body,
                                        headers=headers) as response:
                    assert response.status == 202, await response.text()
                acknowledged.append(delivery)
                if len(acknowledged) == KILL_AFTER:  # with the others still in flight
                    os.kill(hangar.proc.pid, signal.SIGKILL)

            await asyncio.gather(*(one(n) for n in range(SENT)), return_exceptions=True)

    asyncio.run(deliver())
    hangar.kill9()  # reaps it
    assert len(acknowledged) >= KILL_AFTER
    states = _states(world.settings.db_path)
    assert [d for d in acknowledged if d not in states] == []

    world.restart()
    # Whatever was stored and not yet marked dispatched at the kill is dispatched now.
    wait_until(lambda: "stored" not in _states(world.settings.db_path).values(), 30,
               "every stored delivery dispatched after the restart")
    states = _states(world.settings.db_path)
    assert {states[d] for d in acknowledged} == {"dispatched"}
