"""Who asked, wherever hangar names them: a GitHub login as a mention, an API token by its
name and never as `@token:…` (a mention of nobody, or of a GitHub user of that name)."""

from __future__ import annotations

import pytest

from app.models import API_ASKER, Run
from app.render.notify import TEXTS
from app.render.reviewers import waiting_note
from app.render.threads import thread_reply

TOKEN = f"{API_ASKER}ci-bot"


def said_by(asker: str) -> list[str]:
    return [
        waiting_note(asker, 2, [], [], refused=None),
        thread_reply(Run(job_id="job-1", branch="hangar/1-ab", base_branch="main",
                         requested_by=asker, turn=2, ending={"code": "no_changes"}), None),
        TEXTS["approval.requested"]({"pr": 2, "head_sha": "a" * 40, "asker": asker,
                                     "reviewers": []}),
    ]


@pytest.mark.parametrize("index", range(3))
def test_an_api_token_is_named_as_one_and_a_login_as_a_mention(index):
    by_token = said_by(TOKEN)[index]
    assert "the API token `ci-bot`" in by_token and "@" not in by_token
    assert "@mona" in said_by("mona")[index]
