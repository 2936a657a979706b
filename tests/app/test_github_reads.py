"""What steps read of GitHub is kept, and dropped when an event says it changed: each
read below is counted on a recording GitHub, with no engine behind it."""

from __future__ import annotations

import pytest

from app.github.ops import RepoOps
from app.github.reads import GitHubReads
from app.repoconfig import CONFIG_PATH
from tests.recording_github import BASE_SHA, REPO, RecordingGitHub


@pytest.fixture
def reads(settings) -> GitHubReads:
    return GitHubReads(auth=None, settings=settings)


def asked(gh: RecordingGitHub, part: str) -> int:
    return sum(part in call.path for call in gh.calls)


async def test_a_permission_is_read_once_until_an_event_on_its_owner_drops_it(reads):
    gh = RecordingGitHub(permissions={"mona": "write", "hubot": "read"})
    other = RecordingGitHub(repo="other/thing", permissions={"mona": "admin"})
    ops, elsewhere = RepoOps(gh, REPO), RepoOps(other, "other/thing")
    assert [await reads.may_write(ops, "mona") for _ in range(3)] == [True] * 3
    assert await reads.may_write(ops, "hubot") is False
    assert await reads.permission(elsewhere, "mona") == "admin"
    assert (asked(gh, "/permission"), asked(other, "/permission")) == (2, 1)
    # A membership event on acme (owners compare without their case)
    assert reads.forget_permissions("ACME") == 2
    assert await reads.permission(ops, "mona") == "write"
    assert await reads.permission(elsewhere, "mona") == "admin"
    assert (asked(gh, "/permission"), asked(other, "/permission")) == (3, 1)


async def test_a_config_read_at_a_commit_answers_its_branch_too(reads):
    gh = RecordingGitHub(contents={CONFIG_PATH: "land:\n  method: squash\n"})
    ops = RepoOps(gh, REPO)
    assert await reads.config_text(ops, "main", BASE_SHA) == "land:\n  method: squash\n"
    assert await reads.config_text(ops, "main", BASE_SHA) == "land:\n  method: squash\n"
    assert await reads.config_text(ops, "main") == "land:\n  method: squash\n"
    assert [c.path for c in gh.calls] == [f"/repos/{REPO}/contents/{CONFIG_PATH}?ref={BASE_SHA}"]
    # Another file at the branch, absent: its 404 is kept as an answer too.
    assert await reads.config_text(ops, "main", path="CODEOWNERS") is None
    assert await reads.config_text(ops, "main", path="CODEOWNERS") is None
    assert asked(gh, "/contents/CODEOWNERS") == 1


async def test_a_branch_without_protection_is_kept_until_a_rule_event_on_its_repository(reads):
    gh, other = RecordingGitHub(), RecordingGitHub(repo="other/thing")
    ops, elsewhere = RepoOps(gh, REPO), RepoOps(other, "other/thing")
    assert await reads.branch_protection(ops, "main") is None
    assert await reads.branch_protection(ops, "main") is None
    assert await reads.branch_protection(elsewhere, "main") is None
    assert (asked(gh, "/protection"), asked(other, "/protection")) == (1, 1)
    reads.forget_protection("other/thing")
    assert await reads.branch_protection(ops, "main") is None
    assert await reads.branch_protection(elsewhere, "main") is None
    assert (asked(gh, "/protection"), asked(other, "/protection")) == (1, 2)
    reads.forget_protection(REPO)
    assert await reads.branch_protection(ops, "main") is None
    assert (asked(gh, "/protection"), asked(other, "/protection")) == (2, 2)


async def test_one_file_to_read_at_a_commit_is_left_to_its_own_read(reads):
    gh = RecordingGitHub()
    await reads.read_at(RepoOps(gh, REPO), BASE_SHA, [CONFIG_PATH], ref="main")
    await reads.read_at(RepoOps(gh, REPO), None, [CONFIG_PATH, "CODEOWNERS"])
    assert gh.calls == []
