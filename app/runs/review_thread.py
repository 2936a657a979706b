"""The review threads a turn answers (a `/hangar` line in one, or a review that asked for
changes): for each, the file, the line range, the diff hunk and the conversation so far,
each comment marked with who wrote it and whether they may write to the repository,
text from anyone else fenced as untrusted input (app.runs.thread words each post).
hangar's own replies in the thread are its words, not the thread's: left out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from app.github.ops import PAGE, RepoOps
from app.redact import redact
from app.runs.thread import Post, bounded, longest_backtick_run, post_lines

if TYPE_CHECKING:
    from app.models import Run
    from app.runs.context import RunsContext

# The marker hangar's reply in a thread carries (one per thread: found again, edited).
REVIEW_THREAD_MARKER = "<!-- hangar:thread {root} -->"
HUNK_MAX_CHARS = 4_000  # a diff hunk GitHub gives can be long: its last lines matter most
THREADS_MAX_CHARS = 16_000  # every thread's conversation together


@dataclass(frozen=True)
class ReviewThread:
    root: int  # the id of the thread's first comment
    path: str
    start_line: int | None
    line: int | None
    diff_hunk: str
    posts: list[Post]
    left_out: int = 0

    @property
    def lines(self) -> str:
        if self.line is None:
            return "the file (an outdated or file-level comment)"
        if self.start_line and self.start_line != self.line:
            return f"lines {self.start_line}-{self.line}"
        return f"line {self.line}"


def is_hangar_reply(comment: dict) -> bool:
    user = comment.get("user") or {}
    return user.get("type") == "Bot" and "<!-- hangar:thread " in (comment.get("body") or "")


async def read_review_threads(engine: RunsContext, ops: RepoOps, run: Run) -> list[ReviewThread]:
    """The run's threads as GitHub has them now, oldest comment first in each."""
    wanted = set(run.review_threads)
    by_root: dict[int, list[dict]] = {root: [] for root in run.review_threads}
    url = f"{ops.base}/pulls/{run.pr_number}/comments?per_page={PAGE}"
    async for comment in ops.gh.getiter(url):
        root = comment.get("in_reply_to_id") or comment.get("id")
        if root in wanted and not is_hangar_reply(comment):
            by_root[root].append(comment)
    writers: dict[str, bool] = {}
    threads = []
    budget = THREADS_MAX_CHARS // max(1, len(wanted))
    for root in run.review_threads:
        comments = sorted(by_root[root], key=lambda c: c.get("id") or 0)
        first = next((c for c in comments if c.get("id") == root), None)
        if first is None:
            continue  # deleted since: nothing to read, nothing to answer
        posts = []
        for comment in comments:
            user = comment.get("user") or {}
            login = user.get("login") or "ghost"
            if login not in writers:
                # A bot never counts as a person with write access.
                writers[login] = (user.get("type") != "Bot"
                                  and await engine.github.may_write(ops, login))
            posts.append(Post(author=login, writer=writers[login], text=comment.get("body") or "",
                              is_body=comment is first))
        threads.append(thread_of(first, posts, budget))
    return threads


def thread_of(first: dict, posts: list[Post], budget: int = THREADS_MAX_CHARS) -> ReviewThread:
    """The thread its first comment (GitHub's review comment) starts, with its posts: the
    first always, the newest that fit in `budget`."""
    kept, left_out = bounded(posts, budget)
    return ReviewThread(
        root=first["id"], path=first.get("path") or "", line=first.get("line"),
        start_line=first.get("start_line"), diff_hunk=first.get("diff_hunk") or "",
        posts=kept, left_out=left_out)


def review_threads_prompt(threads: list[ReviewThread]) -> str:
    """The threads as the agent reads them: where, the hunk, then who said what."""
    if not threads:
        return ""
    lines = ["This turn answers the review thread(s) below, on the pull request's diff. "
             "Address each one with commits."]
    for number, thread in enumerate(threads, 1):
        lines += ["", f"Thread {number}: `{thread.path}`, {thread.lines}"]
        hunk = redact(thread.diff_hunk.strip("\n"))
        if hunk:
            if len(hunk) > HUNK_MAX_CHARS:
                hunk = "[… the hunk's start is cut]\n" + hunk[-HUNK_MAX_CHARS:]
            fence = "`" * max(3, longest_backtick_run(hunk) + 1)
            lines += ["The diff hunk the thread is on:", f"{fence}diff", hunk, fence]
        if thread.left_out:
            lines.append(f"[{thread.left_out} earlier comment(s) of this thread left out to "
                         "keep this prompt bounded; the newest are below]")
        lines.append("")
        for post in thread.posts:
            what = "started the thread" if post.is_body else "replied"
            lines += post_lines(post, what, about="the review")
    return "\n".join(lines).rstrip() + "\n"
