"""Check runs, check suites and commit statuses."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from fakehub import gitrepo, rulesets
from fakehub.hub.errors import HubError
from fakehub.state import (
    CheckRun,
    CheckSuite,
    Identity,
    Repo,
    Status,
    User,
    iso,
    now,
)

# Check-suite conclusions, most important first (GitHub reports the highest).
SUITE_PRIORITY = [
    "action_required",
    "cancelled",
    "timed_out",
    "failure",
    "startup_failure",
    "stale",
    "neutral",
    "skipped",
    "success",
]


class CheckOps:
    """Part of Hub: checks and statuses."""

    # -- checks ---------------------------------------------------------------------

    def _suite_for(self, repo: Repo, app_id: int, sha: str) -> CheckSuite:
        for suite in self.store.check_suites.values():
            if suite.repo_id == repo.id and suite.app_id == app_id and suite.head_sha == sha:
                return suite
        branch = next(
            (name.removeprefix("refs/heads/")
             for name, tip in gitrepo.list_refs(repo.path, "refs/heads/").items() if tip == sha),
            None,
        )
        stamp = now()
        suite = CheckSuite(
            id=self.store.next_id(),
            repo_id=repo.id,
            head_sha=sha,
            head_branch=branch,
            app_id=app_id,
            created_at=stamp,
            updated_at=stamp,
            after=sha,
        )
        self.store.check_suites[suite.id] = suite
        return suite

    def create_check_run(
        self, repo: Repo, app_id: int, fields: dict[str, Any], actor: User
    ) -> CheckRun:
        sha = gitrepo.resolve(repo.path, fields["head_sha"])
        if sha is None:
            raise HubError(422, "Validation Failed", [
                {"resource": "CheckRun", "code": "invalid", "field": "head_sha"}])
        suite = self._suite_for(repo, app_id, sha)
        stamp = now()
        run = CheckRun(
            id=self.store.next_id(),
            repo_id=repo.id,
            suite_id=suite.id,
            app_id=app_id,
            head_sha=sha,
            name=fields["name"],
            status="queued",
            conclusion=None,
            started_at=stamp,
            completed_at=None,
            output={},
        )
        self.store.check_runs[run.id] = run
        self._apply_check_fields(run, fields)
        shaped = self.shapes.check_run(run, webhook=True)
        self._emit_repo(repo, "check_run", {"action": "created", "check_run": shaped}, actor)
        if run.status == "completed":
            self._check_run_completed(repo, run, actor)
        else:
            self._roll_up(repo, suite, actor)
        return run

    def update_check_run(
        self, repo: Repo, run: CheckRun, app_id: int, fields: dict[str, Any], actor: User
    ) -> CheckRun:
        if run.app_id != app_id:
            raise HubError(403, f"Invalid app_id `{app_id}` - check run can only be modified by "
                                "the GitHub App that created it.")
        was_completed = run.status == "completed"
        self._apply_check_fields(run, fields)
        if run.status == "completed" and not was_completed:
            self._check_run_completed(repo, run, actor)
        else:
            self._roll_up(repo, self.store.check_suites[run.suite_id], actor)
        return run

    def _apply_check_fields(self, run: CheckRun, fields: dict[str, Any]) -> None:
        for key in ("name", "details_url", "external_id"):
            if key in fields:
                setattr(run, key, fields[key])
        if fields.get("started_at"):
            run.started_at = _parse_time(fields["started_at"])
        if "status" in fields:
            run.status = fields["status"]
        if fields.get("conclusion"):
            run.conclusion = fields["conclusion"]
            run.status = "completed"
        if run.status == "completed":
            run.completed_at = (
                _parse_time(fields["completed_at"]) if fields.get("completed_at") else now()
            )
        if fields.get("output"):
            output = dict(fields["output"])
            run.annotations.extend(output.pop("annotations", []) or [])
            output.pop("images", None)
            run.output.update(output)
        if "actions" in fields:
            run.actions = list(fields["actions"] or [])

    def request_check_action(
        self, repo: Repo, run: CheckRun, identifier: str | None, actor: User
    ) -> None:
        """A person pressed a check run's button (identifier) or "Re-run" (None).

        Like GitHub, only the App that owns the run hears about it.
        """
        payload: dict[str, Any] = {"check_run": self.shapes.check_run(run, webhook=True)}
        if identifier is None:
            payload = {"action": "rerequested", **payload}
        else:
            payload = {"action": "requested_action", **payload,
                       "requested_action": {"identifier": identifier}}
        self._emit_repo(repo, "check_run", payload, actor, only_app_id=run.app_id)
        if identifier is None and self.ci is not None and run.app_id == self.ci.app.id:
            self._rerun_ci_for(repo, run.head_sha)

    def rerequest_suite(self, repo: Repo, suite: CheckSuite, actor: User) -> None:
        """A person presses "Re-run all checks": only the suite's App hears of it."""
        suite.updated_at = now()
        self._emit_repo(repo, "check_suite",
                        {"action": "rerequested",
                         "check_suite": self.shapes.check_suite(suite, webhook=True)},
                        actor, only_app_id=suite.app_id)
        if self.ci is not None and suite.app_id == self.ci.app.id:
            self._rerun_ci_for(repo, suite.head_sha)

    def _rerun_ci_for(self, repo: Repo, sha: str) -> None:
        """fakehub's CI answers "Re-run" on its own runs by running the head again."""
        for issue in self.store.pulls(repo):
            if issue.state == "open" and issue.pull and issue.pull.head_sha == sha:
                if repo.ci_command:
                    self.ci.schedule(repo, issue, again=True)
                return

    def _check_run_completed(self, repo: Repo, run: CheckRun, actor: User) -> None:
        self._emit_repo(repo, "check_run",
                        {"action": "completed",
                         "check_run": self.shapes.check_run(run, webhook=True)},
                        actor)
        self._roll_up(repo, self.store.check_suites[run.suite_id], actor)
        self.checks_changed(repo, run.head_sha)  # a merge group's check decides its entry

    def _roll_up(self, repo: Repo, suite: CheckSuite, actor: User) -> None:
        runs = [r for r in self.store.check_runs.values() if r.suite_id == suite.id]
        suite.updated_at = now()
        if not runs or any(r.status != "completed" for r in runs):
            suite.status = "in_progress" if any(r.status == "in_progress" for r in runs) \
                else "queued"
            suite.conclusion = None
            return
        was_completed = suite.status == "completed"
        conclusions = {r.conclusion for r in runs}
        suite.status = "completed"
        suite.conclusion = next((c for c in SUITE_PRIORITY if c in conclusions), "success")
        if not was_completed:
            self._emit_repo(
                repo,
                "check_suite",
                {"action": "completed",
                 "check_suite": self.shapes.check_suite(suite, webhook=True)},
                actor,
            )

    def create_status(
        self,
        repo: Repo,
        sha: str,
        fields: dict[str, Any],
        actor: Identity,
    ) -> Status:
        resolved = gitrepo.resolve(repo.path, sha)
        if resolved is None:
            raise HubError(422, f"No commit found for SHA: {sha}")
        if fields.get("state") not in ("error", "failure", "pending", "success"):
            raise HubError(422, "Validation Failed", [
                {"resource": "Status", "code": "custom", "field": "state",
                 "message": "state is not included in the list"}])
        stamp = now()
        status = Status(
            id=self.store.next_id(),
            repo_id=repo.id,
            sha=resolved,
            context=fields.get("context") or "default",
            state=fields["state"],
            description=fields.get("description"),
            target_url=fields.get("target_url"),
            creator=actor.user,
            created_at=stamp,
            updated_at=stamp,
        )
        self.store.statuses.append(status)
        self._emit_status(repo, status, actor.user)
        self.checks_changed(repo, sha)
        return status

    def _emit_status(self, repo: Repo, status: Status, actor: User) -> None:
        info = gitrepo.commit_info(repo.path, status.sha)
        commit = self.shapes.commit(repo, info)
        commit.pop("files", None)
        commit.pop("stats", None)
        commit["commit"]["verification"].pop("verified_at")  # not in the webhook's shape
        branches = [
            {"name": name.removeprefix("refs/heads/"),
             "commit": {"sha": tip, "url": f"{self.api_url}/repos/{repo.full_name}/commits/{tip}"},
             "protected": bool(rulesets.active_rules(repo, name.removeprefix("refs/heads/")))}
            for name, tip in gitrepo.list_refs(repo.path, "refs/heads/").items()
            if tip == status.sha
        ]
        self._emit_repo(
            repo,
            "status",
            {
                "id": status.id,
                "sha": status.sha,
                "name": repo.full_name,
                "target_url": status.target_url,
                "avatar_url": None,
                "context": status.context,
                "description": status.description,
                "state": status.state,
                "commit": commit,
                "branches": branches,
                "created_at": iso(status.created_at),
                "updated_at": iso(status.updated_at),
            },
            actor,
        )


def _parse_time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))
