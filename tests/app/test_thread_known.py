"""A command that is its issue's first comment: GitHub's `issue_comment` created payload
counts the comments before it (its own examples: 0 on a first comment, 1 once edited),
so the webhook alone proves the thread whole and the first turn lists no comments."""

from __future__ import annotations

import json

from app.commands import record_comment
from app.intake.payloads import IssueCommentEvent
from app.models import Intent, Job, Thread
from app.runs.thread import read_thread
from tests.app.conftest import webhook_examples
from tests.recording_github import REPO, RecordingGitHub


def example(action: str, comment_id: int = 1, **issue) -> IssueCommentEvent:
    payload = json.loads(json.dumps(next(
        p for e, a, p in webhook_examples() if (e, a) == ("issue_comment", action))))
    payload["comment"].update(body="/hangar fix it", id=comment_id)
    payload["installation"] = {"id": 1, "node_id": "MDIzOkludGVncmF0aW9uSW5zdGFsbGF0aW9uMQ"}
    payload["issue"].update(issue)
    return IssueCommentEvent.model_validate(payload)


def known(step_engine, event: IssueCommentEvent) -> list[dict] | None:
    engine = step_engine(RecordingGitHub())
    record_comment(engine, event)
    intent = engine.store.get("intent", f"comment-{event.comment.id}-0", Intent)
    return intent.comments_known


def test_githubs_own_examples_count_the_comments_before_a_new_one():
    assert example("created").issue.comments == 0
    assert example("edited").issue.comments == 1


def test_only_a_new_first_comment_is_known_to_be_the_whole_thread(step_engine):
    event = example("created")
    assert known(step_engine, event) == [{"login": event.comment.user.login,
                                          "type": event.comment.user.type,
                                          "body": "/hangar fix it"}]
    assert known(step_engine, example("created", 2, comments=2)) is None
    assert known(step_engine, example("edited", 3)) is None


class Writers:
    """A step's context whose GitHub says only mona may write."""

    class Reads:
        async def may_write(self, ops, login: str) -> bool:
            return login == "mona"

    github = Reads()


async def test_a_known_thread_is_the_prompts_without_a_listing():
    gh = RecordingGitHub()
    job = Job(thread=Thread(repo=REPO, number=3, installation_id=1), requested_by="mona",
              prompt="fix it", title="add() is wrong", body="It subtracts.",
              issue_author="rita", clone_url="", base_branch="main",
              comments_known=[{"login": "mona", "type": "User", "body": "/hangar fix it"}])
    from app.github.ops import RepoOps

    context = await read_thread(Writers(), RepoOps(gh, REPO), job)
    assert [(p.author, p.writer, p.text, p.is_body) for p in context.posts] == [
        ("rita", False, "It subtracts.", True), ("mona", True, "/hangar fix it", False)]
    assert gh.calls == []  # neither the issue nor its comments read
    job.comments_known = None
    await read_thread(Writers(), RepoOps(gh, REPO), job)
    assert [c.path for c in gh.calls] == [f"/repos/{REPO}/issues/3/comments?per_page=100"]


def test_a_later_comment_makes_the_thread_read_again(step_engine):
    """Someone comments after the command, before its job's first turn read the thread (it
    waited for a place): the webhook no longer proves the thread whole, so the turn lists
    it. hangar's own status comment changes nothing."""
    engine = step_engine(RecordingGitHub())
    first = example("created")
    record_comment(engine, first)
    intent = engine.store.get("intent", f"comment-{first.comment.id}-0", Intent)
    job = engine.save_job(Job(thread=intent.thread, requested_by="mona", prompt="fix it",
                              clone_url="", base_branch="main",
                              comments_known=intent.comments_known))
    own = example("created", 2, comments=1)
    own.comment.body = "<!-- hangar:status job-1 -->\nworking on it"
    own.comment.user.type = "Bot"
    record_comment(engine, own)
    assert engine.get_job(job.id).comments_known is not None
    assert engine.store.get("intent", intent.id, Intent).comments_known is not None
    later = example("created", 3, comments=2)
    later.comment.body = "also: the test is in tests/test_add.py"
    record_comment(engine, later)
    assert engine.get_job(job.id).comments_known is None
    assert engine.store.get("intent", intent.id, Intent).comments_known is None
