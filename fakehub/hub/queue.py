"""GitHub's merge queue: pull requests enqueued (GraphQL `enqueuePullRequest`) on a branch
whose rules require one are merged in order, each only once the required checks pass on
its merge group: the PR merged onto the base, or onto the group before it, pushed to a
`gh-readonly-queue/<base>/pr-<n>-<base sha>` branch and announced with `merge_group`
checks_requested. A failed required check removes the entry (and rebuilds those after it);
a passed one fast-forwards the base to the group and closes the PR as merged."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fakehub import gitrepo, rulesets
from fakehub.hub.errors import HubError
from fakehub.state import Identity, Issue, Repo, User, now

QUEUE_PREFIX = "gh-readonly-queue"


@dataclass
class QueueEntry:
    id: int
    number: int
    base: str
    head_sha: str  # the PR's head when enqueued
    by: User
    group_head: str | None = None  # the merge group's commit
    group_base: str | None = None  # what the group was built on
    group_ref: str | None = None  # the queue branch (without refs/heads/)


class QueueOps:
    """Part of Hub: merge queues, one per base branch of a repository."""

    def queue_rule(self, repo: Repo, base: str) -> dict[str, Any] | None:
        for active in rulesets.active_rules(repo, base):
            if active.type == "merge_queue":
                return active.parameters
        return None

    def queue(self, repo: Repo, base: str) -> list[QueueEntry]:
        return self.queues.setdefault((repo.id, base), [])

    def entry_for(self, repo: Repo, number: int) -> QueueEntry | None:
        for (repo_id, _), entries in self.queues.items():
            for entry in entries:
                if repo_id == repo.id and entry.number == number:
                    return entry
        return None

    def enqueue(self, repo: Repo, issue: Issue, actor: Identity,
                expected_head: str | None) -> QueueEntry:
        """`enqueuePullRequest`: the PR must meet the branch's rules (but the queue's own)."""
        pr = issue.pull
        assert pr is not None
        if issue.state != "open" or pr.merged:
            raise HubError(422, "Pull request is not open")
        if self.queue_rule(repo, pr.base_ref) is None:
            raise HubError(422, "Pull request's base branch does not require a merge queue")
        if expected_head and expected_head != pr.head_sha:
            raise HubError(422, "Pull request head has changed")  # [unconfirmed wording]
        if self.entry_for(repo, issue.number) is not None:
            raise HubError(422, "Pull request is already in the merge queue")
        refusals = [r for r in self.merge_refusals(repo, issue, actor)
                    if r != rulesets.THROUGH_QUEUE]
        refusals += [r for r in [self.classic_refusal(repo, issue, actor)] if r]
        if refusals:
            raise HubError(422, f"Pull request is not mergeable: {' '.join(refusals)}")
        entry = QueueEntry(id=self.store.next_id(), number=issue.number, base=pr.base_ref,
                           head_sha=pr.head_sha, by=actor.user)
        self.queue(repo, pr.base_ref).append(entry)
        self._emit_repo(repo, "pull_request", {
            "action": "enqueued", "number": issue.number,
            "pull_request": self.shapes.pull(issue)}, actor.user)
        self.build_groups(repo, pr.base_ref)
        return entry

    def build_groups(self, repo: Repo, base: str) -> None:
        """Give each entry without a group one: its PR merged onto the group before it."""
        params = self.queue_rule(repo, base) or {}
        method = str(params.get("merge_method") or "MERGE").lower()
        below = gitrepo.ref_sha(repo.path, base)
        for entry in list(self.queue(repo, base)):
            if entry.group_head is None:
                issue = self.pull(repo, entry.number)
                new = self._merge_commit(repo, issue, Identity("user", entry.by), below,
                                         method, None, None) if below else None
                if new is None:  # it does not merge onto what is before it
                    self.dequeue(repo, entry, "MERGE_CONFLICT", "invalidated")
                    continue
                ref = f"{QUEUE_PREFIX}/{base}/pr-{entry.number}-{below}"
                gitrepo.update_ref(repo.path, f"refs/heads/{ref}", new)
                entry.group_head, entry.group_base, entry.group_ref = new, below, ref
                self._emit_repo(repo, "merge_group", {
                    "action": "checks_requested", "merge_group": self._group(repo, entry)},
                    entry.by)
                if self.ci is not None and repo.ci_command:
                    self.spawn(self.ci.run(repo, new, ref))
            below = entry.group_head
        self.advance_queue(repo, base)

    def _group(self, repo: Repo, entry: QueueEntry) -> dict[str, Any]:
        head = gitrepo.commit_info(repo.path, entry.group_head)
        return {"head_sha": entry.group_head, "head_ref": f"refs/heads/{entry.group_ref}",
                "base_sha": entry.group_base, "base_ref": f"refs/heads/{entry.base}",
                "head_commit": self.shapes.simple_commit(head)}

    def group_state(self, repo: Repo, entry: QueueEntry) -> str:
        """success | pending | failure of the required checks on the entry's group."""
        runs = self.store.check_runs_for(repo, entry.group_head)
        statuses = self.store.statuses_for(repo, entry.group_head)
        states = [rulesets.check_state(check["context"], check.get("integration_id"), runs,
                                       statuses)
                  for active in rulesets.active_rules(repo, entry.base)
                  if active.type == "required_status_checks"
                  for check in active.parameters.get("required_status_checks", [])]
        if "failure" in states:
            return "failure"
        return "pending" if any(s != "success" for s in states) else "success"

    def advance_queue(self, repo: Repo, base: str) -> None:
        """Merge the queue's first entries whose groups passed; drop a failed one."""
        entries = self.queue(repo, base)
        while entries and entries[0].group_head is not None:
            entry = entries[0]
            state = self.group_state(repo, entry)
            if state == "pending":
                return
            if state == "failure":
                self.dequeue(repo, entry, "CI_FAILURE", "invalidated")
                self.build_groups(repo, base)
                return
            tip = gitrepo.ref_sha(repo.path, base)
            if tip != entry.group_base and tip != entry.group_head:
                # The base moved under the queue: every group is rebuilt.
                for later in entries:
                    self._drop_group(repo, later, "invalidated")
                self.build_groups(repo, base)
                return
            issue = self.pull(repo, entry.number)
            entries.pop(0)
            gitrepo.update_ref(repo.path, f"refs/heads/{base}", entry.group_head, tip)
            pr = issue.pull
            stamp = now()
            pr.merged, pr.merged_at, pr.merged_by = True, stamp, entry.by
            pr.merge_commit_sha = entry.group_head
            issue.state, issue.closed_at, issue.updated_at = "closed", stamp, stamp
            self.ref_updated(repo, f"refs/heads/{base}", tip, entry.group_head, entry.by)
            self._emit_repo(repo, "pull_request", {
                "action": "closed", "number": issue.number,
                "pull_request": self.shapes.pull(issue)}, entry.by)
            self._drop_group(repo, entry, "merged")

    def _drop_group(self, repo: Repo, entry: QueueEntry, reason: str) -> None:
        if entry.group_head is None:
            return
        self._emit_repo(repo, "merge_group", {
            "action": "destroyed", "reason": reason, "merge_group": self._group(repo, entry)},
            entry.by)
        gitrepo.delete_ref(repo.path, f"refs/heads/{entry.group_ref}")
        entry.group_head = entry.group_base = entry.group_ref = None

    def dequeue(self, repo: Repo, entry: QueueEntry, why: str, group_reason: str) -> None:
        """The entry leaves the queue (a failed check, a conflict); those after it are
        built again on what is before them."""
        entries = self.queue(repo, entry.base)
        at = entries.index(entry)
        entries.remove(entry)
        self._drop_group(repo, entry, group_reason)
        for later in entries[at:]:
            self._drop_group(repo, later, "invalidated")
        issue = self.pull(repo, entry.number)
        self._emit_repo(repo, "pull_request", {
            "action": "dequeued", "number": issue.number, "reason": why,
            "pull_request": self.shapes.pull(issue)}, entry.by)

    def checks_changed(self, repo: Repo, sha: str) -> None:
        """A check or status on `sha`: a merge group's may have decided its entry."""
        for (repo_id, base), entries in list(self.queues.items()):
            if repo_id == repo.id and any(e.group_head == sha for e in entries):
                self.advance_queue(repo, base)
