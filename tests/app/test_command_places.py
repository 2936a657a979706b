"""Who may use a command and where are checked once, from the command's declaration,
before its action runs: a command asked on the wrong kind of thread is answered with
where it works, and nothing is started."""

from __future__ import annotations

import pytest

from app.commands import grammar as commands
from app.commands import intents
from app.models import Intent, Thread
from app.wiring import command_actions
from tests.recording_github import PR_NUMBER, REPO, RecordingGitHub

ISSUE, PR = 3, PR_NUMBER
# (command, args, on a PR, what the reply says, or None where the action itself runs)
CASES = [
    ("land", {}, False,
     "`/hangar land [--ack-sensitive] [--ack-large]` works on pull requests, not on issues"),
    ("land_cancel", {}, False, "`/hangar land cancel` works on pull requests"),
    ("resolve", {"prompt": ""}, False, "`/hangar resolve [<instruction>]` works on pull "
     "requests"),
    ("verify", {}, False, "comment it on the pull request hangar opened"),
    ("autofix", {"on": False}, False, "`/hangar autofix on|off` works on pull requests"),
    ("try", {"n": 2, "prompt": "fix it"}, True,
     "works on issues, not on pull requests: it starts fresh attempts from an issue. On a "
     "pull request, `/hangar <instruction>` asks for another turn."),
    # commands that work on both reach their action: here, there is nothing to pick
    ("pick", {"n": 2}, True, None),
    ("pick", {"n": 2}, False, None),
]


def intent(command: str, args: dict, on_pr: bool, author: str = "rita") -> Intent:
    thread = Thread(repo=REPO, number=PR if on_pr else ISSUE, installation_id=1, is_pr=on_pr)
    return Intent(id=f"comment-1-{command}", thread=thread, comment_id=0, author=author,
                  command=command, args=args)


@pytest.mark.parametrize(("command", "args", "on_pr", "said"), CASES,
                         ids=[f"{c[0]} on {'a PR' if c[2] else 'an issue'}" for c in CASES])
async def test_a_command_on_the_wrong_thread_is_answered_with_where_it_works(
        step_engine, command, args, on_pr, said):
    gh = RecordingGitHub(permissions={"rita": "write"})
    engine = step_engine(gh)
    engine.on_command(command_actions())
    asked = engine.save_intent(intent(command, args, on_pr))
    await intents.process_intent(engine, asked.id)
    done = engine.store.get("intent", asked.id, Intent)
    assert done.state == "done"
    replies = [c for c in gh.writes("POST") if c.path.endswith("/comments")]
    assert len(replies) == 1
    if said is None:
        assert not done.outcome.startswith("refused"), done.outcome
        return
    assert done.outcome == f"refused: {command} works on " \
        f"{commands.spec_for(command).where}s only"
    assert replies[0].path.endswith(f"/issues/{PR if on_pr else ISSUE}/comments")
    assert said in replies[0].body["body"]
    assert engine.runs_of(intents.job_id_for(asked.id)) == []


async def test_who_is_checked_before_where(step_engine):
    """Someone without write access learns that, not where the command would work."""
    gh = RecordingGitHub(permissions={"eve": "read"})
    engine = step_engine(gh)
    engine.on_command(command_actions())
    asked = engine.save_intent(intent("land", {}, False, author="eve"))
    await intents.process_intent(engine, asked.id)
    assert engine.store.get("intent", asked.id, Intent).outcome == "refused: no write access"
