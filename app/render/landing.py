"""Landing's sentences: why a pull request is not landing yet, why an approval does not
count, what protects the base branch, and check run `hangar / land`.

Keys are the values of landing's codes (`app.landing.LandReason`, `NotCounted`,
`GateFact`): landing decides, this module words.
"""

from __future__ import annotations

from typing import Any

from app.redact import redact
from app.render.reasons import Sentences, Why, word
from app.render.text import code_span, person, short


def _approvals_wanted(missing: int, head: str | None, other_than: str | None = None) -> str:
    return (f"waiting for {missing} approval(s) of `{short(head)}` from someone with write "
            "access" + (f" other than @{other_than}" if other_than else ""))


def _sensitive(paths: list[str] | None = None, gap: Why | None = None) -> str:
    what = (f"sensitive files changed ({', '.join(code_span(p) for p in paths[:5])})"
            if paths else f"{reason(gap)}, so hangar treats it as touching sensitive paths")
    return f"{what}: an approver must comment `/hangar land --ack-sensitive`"


def _conflict(base: str, files: list[str]) -> str:
    named = ", ".join(code_span(f) for f in files[:20]) or "files git did not name"
    more = f" and {len(files) - 20} more" if len(files) > 20 else ""
    return (f"the branch conflicts with {base} in {named}{more}; hangar does not resolve "
            f"conflicts silently: comment `/hangar resolve` (or press \"Resolve conflicts\" "
            f"on hangar / land) for a turn that merges {base} and resolves them, then is "
            "verified again; or resolve them by hand")


# Why auto-land does not apply (`app.landing.AutoLandOut`).
AUTO_OUT: Sentences = {
    "auto_sensitive": lambda paths: (
        f"it changes sensitive paths ({', '.join(code_span(p) for p in paths[:5])}), which "
        "auto-land never lands"),
    "auto_outside_paths": lambda paths, only: (
        f"{', '.join(code_span(p) for p in paths[:5])} "
        + ("is" if len(paths) == 1 else "are")
        + f" outside auto_land.when.only_paths ({', '.join(code_span(o) for o in only)})"),
    "auto_too_large": lambda lines, limit: (
        f"it changes {lines} lines, more than auto_land.when.max_diff_lines ({limit})"),
    "auto_files_unknown": lambda: "GitHub did not list all of its changed files",
    "auto_not_verified": lambda: "hangar / verify has not passed on this head",
    "auto_checks": lambda: "not every check on this head has passed",
    "auto_more_approvals": lambda count: (
        f"land.required_approvals is {count}, and auto-land stands for one approval"),
}


def _auto_land_refused(why: Why, head: str | None, other_than: str | None = None) -> str:
    return (f"auto-land does not apply: {word(AUTO_OUT, why)}; "
            + _approvals_wanted(1, head, other_than))


def _frozen(by: str) -> str:
    return (f"approved, and waiting: landing is switched off {by}; it lands once that is "
            "lifted")


def _check_late(check: str, running: bool, head: str, minutes: float) -> str:
    what = "is still running" if running else "never reported"
    return (f"check {check} {what} on `{short(head)}` within {minutes:g} minutes "
            "(land.ci_timeout_minutes); check that it still runs under this name, then "
            "`/hangar land`")


def _method_refused(method: str, said: str, allowed: list[str]) -> str:
    return (f"GitHub refused a {method} merge: {said}. The repository allows "
            + (", ".join(allowed) or "no merge method hangar can use")
            + "; set `land.method` in .github/hangar.yml to one of them")


def _people(logins: list[str]) -> str:
    return " or ".join(o if o.startswith("@") or "@" in o else f"@{o}" for o in logins)


def _gate_approvals(missing: int, required: int, rule: str, not_pusher: str | None) -> str:
    return (f"{missing} more approval(s) from someone with write access ({rule} asks for "
            f"{required}" + (f"; not from @{not_pusher}, who pushed last" if not_pusher else "")
            + ")")


def _gate_code_owner(owners: list[str], patterns: list[str], paths: list[str]) -> str:
    where = ", ".join(code_span(p) for p in patterns[:3])
    return f"1 more approval from a code owner of {where} ({_people(owners)})"


METHOD_OUT: Sentences = {
    "repo_settings": lambda method: f"{method}: the repository's settings turn it off",
    "allowed_merge_methods": lambda method, rule: (
        f"{method}: {rule}'s allowed_merge_methods leaves it out"),
    "required_linear_history": lambda method, rule: (
        f"{method}: {rule} requires linear history"),
    "required_signatures": lambda method, rule: (
        f"{method}: {rule} requires signed commits, and GitHub signs only the squash (and "
        "merge) commits it makes, not the pull request's own or rebased commits"),
}


def _gate_no_method(reasons: list[dict]) -> str:
    said = "; ".join(word(METHOD_OUT, Why(r["why"], **{k: v for k, v in r.items()
                                                        if k != "why"})) for r in reasons)
    return (f"no merge method meets this branch's rules ({said}): allow one in the repository "
            "settings and the ruleset, then `/hangar land`")


# What GitHub's rules still ask before a merge (`app.landing.gate` codes).
GATE_NEEDS: Sentences = {
    "gate_approvals": _gate_approvals,
    "gate_changes_requested": lambda users: (
        f"{_people(users)} requested changes: their approval, or a dismissal of that review, "
        "is needed"),
    "gate_code_owner": _gate_code_owner,
    "gate_threads": lambda count, rule: (
        f"{count} unresolved conversation(s) on the pull request: resolve them ({rule} asks "
        "for every conversation to be resolved)"),
    "gate_deployments": lambda environments, rule: (
        "a successful deployment of this head to "
        + ", ".join(code_span(e) for e in environments) + f" ({rule})"),
}

# What hangar cannot satisfy on a branch, whatever a person does on the pull request.
GATE_CANNOT: Sentences = {
    "gate_no_method": _gate_no_method,
    "gate_update_restricted": lambda rule: (
        f"{rule} lets only its bypass actors update this branch, and hangar's App is not one "
        "(nor should it be): merge by hand, or lift the rule for this branch"),
    "gate_locked": lambda rule: (
        f"the branch is locked ({rule}: lock_branch): nothing merges into it until it is "
        "unlocked"),
    "gate_push_restricted": lambda rule: (
        f"{rule} restricts who may push to this branch and hangar's App is not among them: "
        "add it to the restrictions' apps, or merge by hand"),
    "gate_check_from_other_app": lambda check, app_id, rule: (
        f"{rule} requires {check} from App {app_id}, which is not hangar's App; only hangar "
        "reports it: set the check's integration_id to hangar's App id"),
}


def gate_needs(whys: list[Why]) -> str:
    return "; ".join(word(GATE_NEEDS if str(w.code) in GATE_NEEDS else GATE_CANNOT, w)
                     for w in whys)


def _merge_refused_waits(said: str) -> str:
    return (f"GitHub refused the merge: {said}. hangar asks again when that changes (a new "
            "review, a check, a push)")


# Why a land request stands where it stands (its `reason`), by `LandReason` code.
LAND_REASONS: Sentences = {
    "gate_waits": lambda needs: f"waiting for {gate_needs(needs)}",
    "gate_cannot": lambda cannot: (
        f"GitHub would refuse this merge whatever is done on the pull request: "
        f"{gate_needs(cannot)}"),
    "merge_refused_waits": _merge_refused_waits,
    "reopened": lambda: "the pull request was reopened",
    "rerun": lambda: "someone re-ran hangar / land",
    "gate_changed": lambda: "the branch's rules changed",
    "in_queue": lambda position, base: (
        f"in {base}'s merge queue (position {position}); GitHub merges it once the checks "
        "on its merge group pass"),
    "queue_removed": lambda base, why: (
        f"GitHub's merge queue of {base} removed it without merging"
        + (f" ({why.lower().replace('_', ' ')})" if why else "")
        + ": a required check on its merge group may have failed; `/hangar land` adds it "
        "again"),
    "repo_removed": lambda: (
        "the repository was removed from hangar's installation; hangar may no longer touch "
        "it"),
    "installation_ended": lambda: (
        "hangar's GitHub App was suspended or uninstalled on the repository's account; "
        "hangar may no longer touch it"),
    "draft": lambda head: (
        f"the pull request is a draft (land.draft_pr) until hangar / verify passes on "
        f"`{short(head)}`; hangar marks it ready for review then"),
    "large": lambda lines, limit: (
        f"it changes {lines} lines, more than land.max_diff_lines ({limit}): an approver "
        "must also comment `/hangar land --ack-large`"),
    "frozen_operator": lambda: _frozen("for all repositories by hangar's operator "
                                       "(HANGAR_LAND=off)"),
    "frozen_repo": lambda: _frozen("for this repository (land.enabled: false in "
                                   ".github/hangar.yml)"),
    "expired": lambda minutes, head: (
        f"approved, but not landed within {minutes:g} minutes of the approval "
        f"(land.approval_ttl_minutes), so the request expired; the pull request stays open, "
        f"and a new approval of `{short(head)}` starts it again"),
    "auto_land": lambda head, rule: (
        f"auto-land approved `{short(head)}` by the repository's rule ({rule})"),
    "auto_land_refused": _auto_land_refused,
    "rebase_failed": lambda base, said: (
        f"hangar could not rebase the branch onto {base}: {said}. Rebase it by hand, or set "
        "`land.update: merge`, then `/hangar land`"),
    "resolving": lambda base: (
        f"a turn is merging {base} into the branch and resolving the conflicts; its head is "
        "verified again, and it needs its own approval"),

    "approvals_wanted": _approvals_wanted,
    "sensitive": _sensitive,
    "lane_taken": lambda pr: f"waiting for #{pr} to finish landing",
    "waiting_for_checks": lambda checks: f"waiting for {', '.join(checks)}",
    "checks_failed": lambda head, checks: (
        f"required check(s) failed on `{short(head)}`: {', '.join(checks)}"),
    "check_late": _check_late,
    "update_pending": lambda: "waiting for GitHub to update the branch",
    "update_refused_workflows": lambda base: (
        f"GitHub refused to update the branch from {base}: {base} changed a workflow file "
        "(`.github/workflows/`), and a GitHub App may write those only with the `workflows` "
        f"permission. Update the branch by hand (merge {base} into it), or grant hangar's App "
        "`workflows: write`, then `/hangar land`"),
    "update_refused": lambda said: (
        f"GitHub refused to update the branch: {said}. Update it by hand, then `/hangar land`"),
    "conflict": _conflict,
    "bypass_actor": lambda ruleset: (
        f"hangar's App is a bypass actor of ruleset {ruleset!r}, so GitHub would not hold this "
        "merge to the ruleset; hangar does not merge around it. Remove the App from the bypass "
        "list, then `/hangar land`"),
    "closing_commit": lambda sha, said, method: (
        f"commit `{short(sha)}` says {code_span(said)}, which would close that issue when "
        f"merged with method {method}; hangar does not let agent text close issues. Set "
        "`land.method: squash` (hangar writes that message), or reword the commit, then "
        "`/hangar land`"),
    "base_moved": lambda base: f"{base} moved since the checks ran; updating again",
    "head_moved": lambda: "the head moved; updating again",
    "method_refused": _method_refused,
    "merge_queue": lambda base: (
        f"{base} takes changes only through GitHub's merge queue, and hangar does not add "
        "pull requests to it: a person with write access can press \"Merge when ready\" on "
        "the pull request, or the merge queue rule can be lifted for this branch"),
    "merge_workflows": lambda: (
        "GitHub refused the merge: it would change a workflow file (`.github/workflows/`), "
        "which a GitHub App may do only with the `workflows` permission. Grant hangar's App "
        "`workflows: write`, or merge by hand"),
    "merge_refused": lambda said: (
        f"GitHub refused the merge: {said}. hangar does not get around the ruleset; fix what "
        "it names and approve again"),
    "landed": lambda sha: f"merged as `{short(sha)}`",
    "new_approval": lambda: "a new approval arrived",
    "new_head": lambda: "the branch has a new head",
    "head_moved_to": lambda head: f"the head moved to `{short(head)}`",
    "checks_again": lambda: "checks completed again",
    "base_changed": lambda old, new: (
        f"the base branch changed from {code_span(old)} to {code_span(new)}; approvals given "
        "before it no longer count"),
    "pr_closed": lambda: "the pull request was closed",
    "asked_to_land": lambda login: f"{person(login)} asked to land",
    "withdrawn": lambda login: (
        f"@{login} withdrew the request; approvals do not land it until someone comments "
        "`/hangar land`"),
    # The error's own words (an exception's, naming hangar's parts) are the operator's:
    # they are in hangar's log and the job's timeline.
    "gave_up": lambda error=None: (
        "hangar stopped trying after repeated errors of its own (the job's timeline names "
        "them); comment `/hangar land` to try again"),
    # Why the PR's file list is incomplete (so every file counts as sensitive).
    "files_not_all_listed": lambda listed, changed: (
        f"GitHub listed {listed} of the {changed} changed files"),
    "too_many_files": lambda limit: (
        f"the pull request changes {limit} files or more, more than GitHub lists"),
}

# Why an approval does not count, by `NotCounted` code.
NOT_COUNTED: Sentences = {
    "not_an_approval": lambda user: "it is not an approval",
    "bot": lambda user: f"@{user} is a bot; only people can approve hangar's work",
    "requester": lambda user: (
        f"@{user} asked for this work, and the policy forbids self-approval "
        "(land.forbid_self_approval); someone else with write access must approve"),
    "asker": lambda user: (
        f"@{user} asked for a turn on this pull request, and the policy forbids approving work "
        "you asked for (land.forbid_self_approval); someone else with write access must "
        "approve"),
    "maker": lambda user: (
        f"@{user} pushed to this branch or made a commit on it, and nobody approves their own "
        "changes; someone else with write access must approve"),
    "makers_unknown": lambda limit: (
        f"the pull request has {limit} or more commits, more than GitHub lists, so hangar "
        "cannot tell who made them all; squash the branch's history, then approve again"),
    "no_write_access": lambda user: f"@{user} does not have write access to this repository",
    "other_commit": lambda user, approved, head: (
        f"@{user} approved `{(approved or 'unknown')[:7]}`, but the head is now `{short(head)}`;"
        " approvals are bound to the exact commit"),
    "dismissed": lambda user: f"@{user}'s approval was dismissed on GitHub",
    "pusher_unknown": lambda head: (
        f"GitHub has not yet said who pushed `{short(head)}`, and nobody approves their own "
        "push; the approval counts once GitHub's push event names someone else"),
    "base_changed": lambda user, base: (
        f"@{user} approved it going into {code_span(base)}, and its base branch has changed "
        "since; approve again to land it into the new base"),
    "expired": lambda user: (
        f"@{user}'s approval was given before the request expired "
        "(land.approval_ttl_minutes); approve again to land it"),
}

# What protects a branch, line by line with the fix for what is missing, by `GateFact`.
GATE_FACTS: Sentences = {
    "pull_request_required": lambda: "pull request required",
    "no_pull_request_rule": lambda: (
        "no pull_request rule: add one to a branch ruleset so nothing lands unreviewed"),
    "approvals_required": lambda count: f"{count} approving review(s) required",
    "no_approvals_required": lambda: (
        "no approvals required: set required_approving_review_count to 1 or more"),
    "stale_dismissed": lambda: "stale approvals dismissed on push",
    "stale_survive": lambda: (
        "approvals survive new pushes: turn on dismiss_stale_reviews_on_push"),
    "last_push_approved": lambda: "the most recent push needs someone else's approval",
    "last_push_self": lambda: (
        "whoever pushed last may approve their own push: turn on require_last_push_approval "
        "(\"Require approval of the most recent reviewable push\") in the ruleset's "
        "pull_request rule"),
    "required_checks": lambda checks: f"required checks: {', '.join(checks)}",
    "no_required_checks": lambda: (
        "no required status checks: add required_status_checks (e.g. hangar / verify)"),
    "force_push_blocked": lambda: "force pushes blocked",
    "force_push_allowed": lambda: "force pushes allowed: add non_fast_forward",
    "deletion_blocked": lambda: "deletion blocked",
    "deletion_allowed": lambda: "the branch can be deleted: add the deletion rule",
    "not_bypass": lambda: "hangar is not a bypass actor",
    "bypass": lambda ruleset: (
        f"hangar's App is a bypass actor of ruleset {ruleset!r}: remove it from the bypass "
        "list, or the ruleset is no gate for hangar"),
}


def reason(why: Why | None) -> str | None:
    """A land request's reason, an incomplete file list's, or None."""
    return None if why is None else word(LAND_REASONS, why)


def not_counted(why: Why | None) -> str | None:
    """Why an approval does not count, or None when it does."""
    return None if why is None else word(NOT_COUNTED, why)


def refusal(why: Why | str) -> str:
    return why if isinstance(why, str) else word(NOT_COUNTED, why)


def gate_lines(facts: list[tuple[bool, Why]]) -> list[tuple[bool, str]]:
    return [(ok, word(GATE_FACTS, why)) for ok, why in facts]


def review_not_counted(marker: str, why: Why | str) -> str:
    """The one reply on the PR for an approval that does not count (`why`: a code, or
    worded already, as approval_refusal may pass it on)."""
    return f"{marker}\nThis approval does not count for landing: {refusal(why)}."


def ack_refused(why: Why | str, flag: str = "--ack-sensitive") -> str:
    what = "the sensitive files" if flag == "--ack-sensitive" else "the change's size"
    return (f"Your acknowledgement of {what} does not count: {refusal(why)}. "
            f"Another person with write access must comment `/hangar land {flag}`.")


def nothing_to_cancel(pr_number: int, state: str) -> str:
    return f"#{pr_number} is already {state}; there is nothing to cancel."


def method_fallback_note(pr_number: int, method: str, other: str) -> str:
    return (f"land #{pr_number}: the repository does not allow {method} merges; "
            f"using {other}")


def merge_commit(pr_title: str, pr_number: int, requester: str,
                 approved: str | None = None) -> dict[str, str]:
    """The title and message of the merge commit hangar asks GitHub for."""
    return {"commit_title": f"{pr_title} (#{pr_number})",
            "commit_message": f"Landed by hangar for {person(requester)}."
            + (f" Approved by {approved}." if approved else "")}


def approvers(logins: list[str], rule: str | None = None) -> str:
    """Who approved, as people read it: "@rita and @sam", or the policy and its rule."""
    people = [f"@{login}" for login in logins if login != "policy"]
    if "policy" in logins:
        people.append(f"the policy (auto_land: {rule})" if rule else "the policy (auto_land)")
    return " and ".join(people)


def land_title(request: Any) -> str:
    titles = {
        "queued": "Waiting to land",
        "updating": "Bringing the branch up to date",
        "waiting_ci": "Waiting for required checks",
        "awaiting_approval": "Waiting for an approval of this exact commit",
        "merging": "Merging",
        "landed": "Landed",
        "conflict": "Conflicts with the base branch",
        "ci_failed": "Required checks failed",
        "rejected": "GitHub refused the merge",
        "cancelled": "Landing cancelled",
        "failed": "Landing failed",
        "expired": "The approval expired",
    }
    return titles.get(str(request.state), str(request.state))


def landed_words(request: Any) -> str:
    """"landed by hangar as `abc1234`, approved by @rita at `9f3c2ab`"."""
    text = f"landed by hangar as `{short(request.merge_sha)}`"
    if request.approved_by:
        text += (f", approved by {approvers(request.approved_by, request.auto_rule)}"
                 f" at `{short(request.approved_head)}`")
    return text


def land_line(request: Any) -> str:
    if request.merge_sha:
        return f"**Landing #{request.pr_number}:** {landed_words(request)}"
    text = f"**Landing #{request.pr_number}:** {land_title(request).lower()}"
    if request.reason:
        text += f" — {redact(request.reason)}"
    return text


def land_check_summary(request: Any, gate: list[tuple[bool, str]]) -> str:
    """Check run `hangar / land`'s summary: the state and why, and what protects the base."""
    return redact("\n".join([
        f"**{request.state.value}**" + (f": {request.reason}" if request.reason else ""),
        *([f"Merged as `{request.merge_sha}`: {landed_words(request)}."]
          if request.merge_sha else []),
        "", "What protects the base branch:",
        *[f"- {'✅' if ok else '⚠️'} {line}" for ok, line in gate],
        *([""] + [f"- ⚠️ {p}" for p in request.problems] if request.problems else []),
    ]))


def land_notes(request: Any) -> list[str]:
    """What landing says about a PR in its job's status comment."""
    return [land_line(request), *(f"⚠️ {redact(p)}" for p in request.problems)]


def group_reused_output(command: str, head: str, base: str, base_sha: str) -> dict[str, str]:
    """`hangar / verify` on a merge group that holds exactly a verified head."""
    return {"title": "Verified: the merge group holds the verified head",
            "summary": (f"This merge group holds exactly `{short(head)}` on `{short(base_sha)}` "
                        f"of {base}, the commit hangar verified in a clean sandbox: "
                        f"`{command}` passed. The group's tree is that head's.")}


def source_not_taken(kind: str, name: str, who: Any, app_id: int) -> str:
    """A report under a required check's name from a source its rule does not take."""
    return (f"{kind} {code_span(name)} from {code_span(str(who))}: the rule takes only App "
            f"{app_id}'s check run")


def impostors_note(impostors: list[str]) -> str:
    return ("⚠️ **Not counted:** only hangar's own App reports under hangar's check names; "
            "set aside: " + redact("; ".join(impostors)))


def resolve_prompt(base: str, files: list[str], guidance: str | None) -> str:
    """The resolve turn's request to the agent: merge the base, resolve, test, commit."""
    where = (" in " + ", ".join(code_span(f) for f in files[:20])) if files else ""
    text = (f"This pull request's branch conflicts with `{base}`{where}. Merge "
            f"`origin/{base}` into the current branch (`git fetch origin {base}` then "
            f"`git merge origin/{base}`), resolve every conflict so that both sides' changes "
            "keep working, run the tests, and commit the merge. Do not rebase or rewrite the "
            "branch's history.")
    if guidance:
        text += f"\n\nThe person who asked for this adds:\n{guidance}"
    return text


def resolve_label(login: str, base: str) -> str:
    """The resolve turn's name in the status comment's list of turns."""
    return f"resolve conflicts with {base}: asked by @{login}"


def resolve_waits() -> str:
    return ("A turn is still running on this pull request; hangar starts the turn that "
            "resolves the conflicts as soon as it ends.")


RESOLVE_ACTION = "resolve"


def land_actions() -> list[dict[str, str]]:
    """The buttons of `hangar / land` on a head that conflicts with its base (GitHub:
    label at most 20 characters, description 40, identifier 20)."""
    return [{"label": "Resolve conflicts", "identifier": RESOLVE_ACTION,
             "description": "A turn merges the base and resolves"}]


def overlap_note(pr: int, other: int, files: list[str], conflicts: list[str] | None) -> str:
    """A status comment's warning that another open hangar PR changes the same files."""
    shared = ", ".join(code_span(f) for f in files[:10]) + (
        f" and {len(files) - 10} more" if len(files) > 10 else "")
    text = f"⚠️ **Overlap:** #{pr} and #{other} both change {shared}"
    if conflicts is None:
        return text + "; git could not be asked whether they conflict"
    if conflicts:
        where = ", ".join(code_span(f) for f in conflicts[:10])
        return text + f"; #{pr} will conflict with #{other} in {where} if #{other} lands first"
    return text + f"; git merges them cleanly if #{other} lands first"


def auto_land_suggestion(repo: str, paths: str, landed: int) -> str:
    """The fleet page's suggestion from a repository's approval history."""
    return (f"{repo}: changes only to `{paths}` landed unchanged {landed} of {landed} times. "
            f"`land: {{auto_land: {{enabled: true, when: {{only_paths: [\"{paths}\"]}}}}}}` "
            "in its .github/hangar.yml would land such changes without a person (never on "
            "sensitive paths); hangar turns nothing on by itself.")
