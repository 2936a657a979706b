"""Acting on `/hangar` commands: what every command shares. Who may use a command, and
where (issue or pull request), is checked once, from its declaration (app.commands); then
the 👀 reaction, the command's action (each concern owns its own: app/wiring.py composes
them), one reply per comment, and the rows a command starts (a job and its runs, a turn on
a PR, a verification).

An intent is processed once. Each action it takes is safe to repeat after a crash: the
job id comes from the intent id, replies carry a marker, reactions are idempotent.
"""

from __future__ import annotations

import hashlib
import logging
import time
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Protocol

from app import render
from app.commands import grammar
from app.github.ops import RepoOps, same_repository
from app.intake.payloads import (
    Account,
    CheckRunEvent,
    CheckSuiteEvent,
    Comment,
    IssueCommentEvent,
    IssuesEvent,
    PullRequestReviewEvent,
    Repository,
    ReviewCommentEvent,
)
from app.models import (
    Deferred,
    Intent,
    IntentState,
    Job,
    JobState,
    Run,
    RunKind,
    RunStage,
    RunState,
    Thread,
    changed,
)
from app.render import replies
from app.render.reasons import Why
from app.render.text import person, thread_reply_marker

if TYPE_CHECKING:
    from app.commands.context import CommandsContext
    from app.engine import StepContext
    from app.store import Store

log = logging.getLogger(__name__)


class PrTurns(Protocol):
    """What finding a PR's job and asking for a turn on it use of the engine (other
    concerns call these with their own narrow contexts): the job and run rows, and the
    job's notes."""

    store: Store

    def get_job(self, job_id: str) -> Job | None: ...
    def runs_of(self, job_id: str) -> list[Run]: ...
    def save_run(self, run: Run) -> Run: ...
    def patch_job(self, job_id: str, **fields: Any) -> Job: ...
    def note(self, row_id: str, what: str) -> None: ...


class Answer(StrEnum):
    """What a reply to a `/hangar` command says (worded by render.replies)."""

    NO_WRITE_ACCESS = "no_write_access"
    USAGE = "usage"
    HELP = "help"
    NOT_A_HANGAR_PR = "not_a_hangar_pr"
    FORK_PR = "fork_pr"
    TURN_WAITS = "turn_waits"
    WRONG_PLACE = "wrong_place"
    NOTHING_TO_CANCEL = "nothing_to_cancel"
    ALREADY_STOPPED = "already_stopped"
    NOTHING_HELD = "nothing_held"
    NO_WORK_YET = "no_work_yet"
    NOTHING_TO_PICK = "nothing_to_pick"
    NO_SUCH_ATTEMPT = "no_such_attempt"
    PICKED_ANOTHER = "picked_another"
    PICK_INELIGIBLE = "pick_ineligible"  # the ranking calls the attempt ineligible
    PICK_NOT_RANKED = "pick_not_ranked"  # attempts still run: no ranking to judge it by
    RESUMED = "resumed"
    NOT_PAUSED = "not_paused"


async def process_intent(engine: StepContext, intent_id: str) -> None:
    """The intent's step. It takes the whole StepContext: it hands the engine on to the
    command's action (`app.engine.CommandAction`), typed by the concern that owns it."""
    intent = engine.store.get("intent", intent_id, Intent)
    if intent is None or intent.state == IntentState.DONE:
        return
    ops = await engine.github.repo_ops(intent.thread)
    # Who may use a command, and where, is checked here once for every command, from its
    # declaration; hangar's own intents (a usage reply, a button, a review) need write.
    spec = None if intent.command in INTERNAL else grammar.spec_for(intent.command)
    who = spec.who if spec else "write"
    # The API's callers hold the operator's token: they are trusted like a maintainer.
    trusted = intent.author_type == "Api"
    if who != "anyone" and not trusted and not await engine.github.may_write(ops, intent.author):
        if intent.command not in QUIET:
            await reply(ops, intent, Why(Answer.NO_WRITE_ACCESS, login=intent.author),
                        key=f"refused-{intent.author}")
        return finish(engine, intent, "refused: no write access")
    if spec and spec.where != "both" and (spec.where == "pr") != intent.thread.is_pr:
        await reply(ops, intent, Why(Answer.WRONG_PLACE, command=spec.name, usage=spec.usage,
                                     on_pr=intent.thread.is_pr))
        return finish(engine, intent, f"refused: {spec.name} works on {spec.where}s only")
    if intent.comment_id and not intent.waiting:
        await ops.react(intent.comment_id, "eyes")
    outcome = await engine.command_actions[intent.command](engine, ops, intent)
    if isinstance(outcome, Deferred):
        # The intent stays open; the end of the running turn wakes it (wake_waiting), and
        # the slow poll takes it again in case that word is lost.
        fresh = engine.store.get("intent", intent.id, Intent) or intent
        engine.save_intent(changed(fresh, **{
            "waiting": True,
            "retry_at": time.time() + engine.settings.poll_interval_seconds}))
        return
    finish(engine, intent, outcome)


def finish(engine: CommandsContext, intent: Intent, outcome: str) -> None:
    engine.save_intent(changed(intent, **{"state": IntentState.DONE, "outcome": outcome}))
    log.info("intent %s: %s", intent.command, outcome, extra={"repo": intent.thread.repo})


def give_up(engine: CommandsContext, intent_id: str, reason: str) -> None:
    """The step failed again and again: the intent is done, its outcome says why."""
    intent = engine.store.get("intent", intent_id, Intent)
    if intent:
        engine.save_intent(changed(intent, state=IntentState.DONE, outcome=f"failed: {reason}"))

async def reply(ops: RepoOps, intent: Intent, said: Why | str, *,
                key: str | None = None) -> None:
    """One reply per comment (or per `key` on this thread), found again by its marker.
    `said`: an `Answer`, or another concern's reply as render worded it. A command written
    in a review thread is answered in that thread, edited in place."""
    text = replies.answer(said) if isinstance(said, Why) else said
    root = intent.args.get("review_thread")
    if root and intent.thread.is_pr:
        marker = thread_reply_marker(root, key or intent.id)
        await ops.upsert_thread_reply(intent.thread.number, root, marker, f"{marker}\n{text}")
        return
    marker = render.reply_marker(key or intent.id)
    if await ops.find_own_comment(intent.thread.number, marker):
        return
    # Just looked: posting needs no second listing of the thread.
    await ops.upsert_comment(intent.thread.number, marker, f"{marker}\n{text}",
                             look_first=False)


# -- what every command shares ------------------------------------------------------


async def usage(engine: CommandsContext, ops: RepoOps, intent: Intent) -> str:
    await reply(ops, intent, Why(Answer.USAGE, message=intent.usage_message))
    return "usage reply"


async def show_help(engine: CommandsContext, ops: RepoOps, intent: Intent) -> str:
    # Every command, with where it applies: the issue's reader will be on the PR next.
    await reply(ops, intent, Why(Answer.HELP, table=grammar.help_text()))
    return "help reply"


# The commands this concern answers itself; every other concern registers its own
# (app/wiring.py composes them).
ACTIONS = {"usage": usage, "help": show_help}


async def hangar_pr_job(engine: PrTurns, ops: RepoOps, intent: Intent) -> Job | None:
    """The job that owns the PR this intent was written on; else a reply saying why not."""
    job = job_for_pr(engine, intent.thread.repo, intent.thread.number)
    if job is None:
        pr = await ops.get_pr(intent.thread.number)
        await reply(ops, intent, Why(Answer.NOT_A_HANGAR_PR) if same_repository(pr)
                    else Why(Answer.FORK_PR, pr=pr, default_branch=intent.default_branch))
    return job


def start_job(engine: CommandsContext, intent: Intent, prompt: str, *, attempts: int,
              trigger_label: str | None = None) -> str:
    job_id = job_id_for(intent.id)
    if engine.get_job(job_id):
        return f"job {job_id}"
    base = intent.default_branch
    job = Job(
        id=job_id, thread=intent.thread, requested_by=intent.author, prompt=prompt,
        title=intent.title, body=intent.body, issue_author=intent.issue_author,
        comments_known=intent.comments_known,
        clone_url=intent.clone_url, base_branch=base, attempts=attempts,
        trigger_label=trigger_label,
    )
    short = job_id.removeprefix("job-")[:4]
    for attempt in range(1, attempts + 1):
        suffix = f"-{attempt}" if attempts > 1 else ""
        engine.save_run(Run(
            id=f"run-{short}{attempt}-{job_id[-4:]}", job_id=job_id, attempt=attempt,
            kind=RunKind.AGENT, prompt=prompt, base_branch=base, requested_by=intent.author,
            branch=f"hangar/{intent.thread.number}-{short}{suffix}",
        ))
    engine.save_job(job)
    engine.note(job_id, f"{person(intent.author)} asked on #{intent.thread.number}")
    return f"job {job_id}"


def job_id_for(intent_id: str) -> str:
    """The job id derives from the intent, so a crash before the intent is marked done
    finds the job it already made instead of making a second one."""
    return "job-" + hashlib.sha256(intent_id.encode()).hexdigest()[:8]


@dataclass(frozen=True)
class Started:
    """A turn on the PR was saved as a run row; the engine takes it from there."""

    run_id: str
    kind: RunKind

    def __str__(self) -> str:  # the intent's outcome line
        return f"{self.kind} {self.run_id}"


@dataclass(frozen=True)
class Busy:
    """A turn is already running on the PR: nothing started."""

    def __str__(self) -> str:
        return "a turn is already running on this PR"


@dataclass(frozen=True)
class NoRunOnPr:
    """hangar has no turn on the PR to follow: nothing started."""

    def __str__(self) -> str:
        return "no run for this PR"


# What asking for a turn on a PR gives: the run it started, or why none.
Followup = Started | Busy | NoRunOnPr


async def start_followup(
    engine: PrTurns, job: Job, pr_number: int, prompt: str, *, kind: RunKind, requested_by: str,
    label: str | None = None, review_threads: list[int] | None = None,
) -> Followup:
    runs = engine.runs_of(job.id)
    pr_runs = [r for r in runs if r.pr_number == pr_number and r.kind != RunKind.VERIFY]
    if not pr_runs:
        return NoRunOnPr()
    last = max(pr_runs, key=lambda r: r.turn)
    if not last.finished:
        return Busy()
    run = Run(
        job_id=job.id, attempt=last.attempt, turn=last.turn + 1, kind=kind, prompt=prompt,
        base_branch=last.base_branch, base_sha=last.base_sha, branch=last.branch,
        pr_number=pr_number, label=label or replies.followup_label(last.turn, requested_by),
        requested_by=requested_by, review_threads=review_threads or [],
    )
    engine.save_run(run)
    if job.state != JobState.ACTIVE:
        engine.patch_job(job.id, state=JobState.ACTIVE)
    engine.note(job.id, f"{kind} turn {run.turn - 1} on #{pr_number} asked by @{requested_by}")
    return Started(run.id, kind)


def request_verification(engine: PrTurns, job: Job, pr_number: int,
                         base: str | None = None) -> str:
    """A verification of the PR's head (`base`: the branch whose environment verifies it,
    when it is no longer the one the turns had: the PR was retargeted)."""
    runs = [r for r in engine.runs_of(job.id) if r.pr_number == pr_number]
    if any(not r.finished for r in runs):
        return "a turn is still running; it verifies when it finishes"
    last = max(runs, key=lambda r: r.turn)
    engine.save_run(Run(
        job_id=job.id, attempt=last.attempt, turn=last.turn, kind=RunKind.VERIFY,
        base_branch=base or last.base_branch, base_sha=last.base_sha, branch=last.branch,
        pr_number=pr_number, state=RunState.EXITED, stage=RunStage.COLLECTING,
        agent=last.agent,
    ))
    if job.state != JobState.ACTIVE:
        engine.patch_job(job.id, state=JobState.ACTIVE)
    return "verification requested"


# Intents hangar records itself, typed by no one: a usage reply, a check run's "Fix with
# hangar" button, a review that asked for changes, a label added to an issue.
INTERNAL = ("usage", "autofix_button", "review_turn", "label")
# Refused without a reply: a label anyone with triage may add is no request to hangar.
QUIET = ("label",)


def wake_waiting(engine: CommandsContext, run_id: str) -> None:
    """A turn ended: the commands waiting for it on its PR are taken now."""
    run = engine.get_run(run_id)
    if run is None or not run.finished or run.pr_number is None:
        return
    job = engine.get_job(run.job_id)
    if job is None:
        return
    for intent in engine.store.all("intent", Intent, active=True):
        if (intent.waiting and intent.thread.repo == job.thread.repo
                and intent.thread.number == run.pr_number and intent.retry_at > 0):
            engine.save_intent(changed(intent, **{"retry_at": 0.0}))


def job_for_pr(engine: PrTurns, repo: str, pr_number: int) -> Job | None:
    """The job of the latest run on this PR (indexed: the history is never read whole)."""
    for run in reversed(engine.store.find("run", Run, pr_number=pr_number)):
        job = engine.get_job(run.job_id)
        if job is not None and job.thread.repo == repo:
            return job
    return None


def job_named(engine: CommandsContext, intent: Intent) -> Job | None:
    """The job an API call named (a comment names none: the thread's latest job counts)."""
    job_id = intent.args.get("job")
    return engine.get_job(job_id) if job_id else None


def job_for_thread(engine: CommandsContext, repo: str, number: int) -> Job | None:
    jobs = engine.store.find("job", Job, thread__repo=repo, thread__number=number)
    return jobs[-1] if jobs else job_for_pr(engine, repo, number)


# -- intake: a `/hangar` line in what a person wrote becomes an intent ------------------


def record_comment(engine: CommandsContext, event: IssueCommentEvent) -> None:
    """`/hangar …` in a comment on an issue or a pull request."""
    if event.installation is None:
        return
    thread = Thread(
        repo=event.repository.full_name,
        number=event.issue.number,
        installation_id=event.installation.id,
        is_pr=event.issue.pull_request is not None,
    )
    # A new comment on an issue GitHub counts no comment on before it (`issue.comments`
    # counts those before it in `created`) is the thread's only one: no listing needed.
    only = (event.action == "created" and event.issue.comments == 0)
    if not only:
        forget_whole_threads(engine, thread, event.comment)
    record_commands(
        engine, f"comment-{event.comment.id}", thread, event.comment.body or "",
        event.comment.user, event.repository, title=event.issue.title,
        body=event.issue.body or "", comment_id=event.comment.id,
        issue_author=event.issue.user.login,
        comments_known=[{"login": event.comment.user.login, "type": event.comment.user.type,
                         "body": event.comment.body or ""}] if only else None)


def forget_whole_threads(engine: CommandsContext, thread: Thread, comment: Comment) -> None:
    """A comment after a command that was its issue's first: the thread that command's
    webhook proved whole has grown, so a job (or intent) that has not read it yet lists
    it after all, as it would have without the proof (a job queued for a place, say)."""
    if comment.user.is_bot and "<!-- hangar:" in (comment.body or ""):
        return  # hangar's own: the listing leaves them out too
    for job in engine.store.find("job", Job, thread__repo=thread.repo,
                                 thread__number=thread.number):
        if job.comments_known is not None:
            engine.patch_job(job.id, comments_known=None)
    for intent in engine.store.all("intent", Intent, active=True):
        if intent.comments_known is not None and intent.thread.repo == thread.repo \
                and intent.thread.number == thread.number:
            engine.save_intent(changed(intent, comments_known=None))


def record_label(engine: CommandsContext, event: IssuesEvent, delivery_id: str | None) -> None:
    """A label added to an issue: its step starts a job when it is the repository's trigger
    label and the person who added it may write (as if she had commented `/hangar`)."""
    sender = event.sender
    if (event.installation is None or event.label is None or event.issue.pull_request
            or sender.is_bot or sender.login in engine.settings.ignored_logins):
        return
    # One intent per label added (a redelivery keeps its delivery id).
    intent_id = f"label-{event.issue.number}-{delivery_id or event.label.name}"
    if engine.store.get("intent", intent_id, Intent):
        return
    thread = Thread(repo=event.repository.full_name, number=event.issue.number,
                    installation_id=event.installation.id, is_pr=False)
    engine.save_intent(Intent(
        id=intent_id, thread=thread, comment_id=0, author=sender.login,
        author_type=sender.type, command="label", args={"label": event.label.name},
        title=event.issue.title, body=event.issue.body or "",
        issue_author=event.issue.user.login, clone_url=event.repository.clone_url or "",
        default_branch=event.repository.default_branch))


def record_review_body(engine: CommandsContext, event: PullRequestReviewEvent) -> None:
    """`/hangar …` in the body of a submitted review."""
    if event.action != "submitted" or event.installation is None:
        return
    thread = Thread(repo=event.repository.full_name, number=event.pull_request.number,
                    installation_id=event.installation.id, is_pr=True)
    record_commands(
        engine, f"review-{event.review.id}", thread, event.review.body or "",
        event.review.user, event.repository, title=event.pull_request.title,
        body=event.pull_request.body or "")


def record_review_comment(engine: CommandsContext, event: ReviewCommentEvent) -> None:
    """`/hangar …` in a line comment of a review, or a reply in its thread (no 👀:
    GitHub's reactions for those live elsewhere; the reply in the thread says it was
    heard). A turn it starts reads the thread and answers in it."""
    if event.installation is None:
        return
    thread = Thread(repo=event.repository.full_name, number=event.pull_request.number,
                    installation_id=event.installation.id, is_pr=True)
    # The thread is named by its first comment: the turn reads it, and replies there.
    root = event.comment.in_reply_to_id or event.comment.id
    record_commands(
        engine, f"review-comment-{event.comment.id}", thread, event.comment.body or "",
        event.comment.user, event.repository, title=event.pull_request.title,
        body=event.pull_request.body or "", context={"review_thread": root})


def record_commands(
    engine: CommandsContext, source: str, thread: Thread, text: str, user: Account,
    repository: Repository, *, title: str, body: str, comment_id: int = 0,
    issue_author: str = "", context: dict | None = None,
    comments_known: list[dict[str, str]] | None = None,
) -> None:
    """Record each `/hangar` command in `text` as an intent, once per source. `context`:
    where it was written, beside the command's own arguments (a review thread)."""
    if user.is_bot or user.login in engine.settings.ignored_logins:
        return  # bots, hangar included, never trigger
    parsed = grammar.parse(text)
    for index, item in enumerate(parsed):
        intent_id = f"{source}-{index}"
        if engine.store.get("intent", intent_id, Intent):
            continue
        usage = item if isinstance(item, grammar.UsageError) else None
        command = item if isinstance(item, grammar.Command) else None
        engine.save_intent(
            Intent(
                id=intent_id,
                thread=thread,
                comment_id=comment_id,
                author=user.login,
                author_type=user.type,
                command=command.name if command else "usage",
                args={**(context or {}), **(command.args if command else {})},
                usage_message=usage.message if usage else None,
                title=title,
                body=body,
                issue_author=issue_author,
                comments_known=comments_known,
                clone_url=repository.clone_url or "",
                default_branch=repository.default_branch,
            )
        )


def record_check_action(engine: CommandsContext, event: CheckRunEvent) -> None:
    """A button on one of hangar's check runs ("Verify again", "Fix with hangar")."""
    if event.installation is None or event.sender.is_bot:
        return
    identifier = (event.requested_action or {}).get("identifier") or "verify"
    external = event.check_run.external_id or ""
    run = engine.get_run(external)
    if run is None or run.pr_number is None:
        return

    intent_id = f"check-{event.check_run.id}-{identifier}-{event.check_run.head_sha[:12]}"
    if engine.store.get("intent", intent_id, Intent):
        return
    thread = Thread(repo=event.repository.full_name, number=run.pr_number,
                    installation_id=event.installation.id, is_pr=True)
    command = {"verify": "verify", "retry": "retry"}.get(identifier, "autofix_button")
    engine.save_intent(Intent(id=intent_id, thread=thread, comment_id=0,
                              author=event.sender.login, command=command))


def record_suite_rerun(engine: CommandsContext, event: CheckSuiteEvent) -> None:
    """"Re-run all checks" on hangar's check suite (GitHub sends it only to the suite's
    App): each hangar PR whose head it is is verified again, as "Verify again" does."""
    sender = event.sender
    if event.installation is None or sender is None or sender.is_bot:
        return
    suite = event.check_suite
    head = suite.get("head_sha") or ""
    for pr in suite.get("pull_requests") or []:
        number = pr.get("number")
        job = job_for_pr(engine, event.repository.full_name, number) if number else None
        if job is None:
            continue
        # One verification per press: the suite's updated_at is new each time.
        intent_id = f"suite-{suite.get('id')}-{head[:12]}-{suite.get('updated_at')}-{number}"
        if engine.store.get("intent", intent_id, Intent):
            continue
        thread = Thread(repo=event.repository.full_name, number=number,
                        installation_id=event.installation.id, is_pr=True)
        engine.save_intent(Intent(id=intent_id, thread=thread, comment_id=0,
                                  author=sender.login, command="verify"))
