"""Secret scanning push protection: a push adding a token is refused in GitHub's words."""

from __future__ import annotations

from pathlib import Path

from fakehub_helpers import clone, commit_file, git

from fakehub.pushprotection import find_secrets

TOKEN = "ghp_" + "A1b2C3d4E5" * 3 + "F6g7H8"  # the shape of a classic PAT, not a real one


def test_find_secrets_names_the_commit_path_and_line():
    patch = (f"commit {'a' * 40}\n\ndiff --git a/x.py b/x.py\n--- /dev/null\n+++ b/x.py\n"
             f"@@ -0,0 +1,3 @@\n+one\n+TOKEN = '{TOKEN}'\n+three\n")
    [finding] = find_secrets(patch)
    assert (finding.kind, finding.commit, finding.path, finding.line) == (
        "GitHub Personal Access Token", "a" * 40, "x.py", 2)
    assert TOKEN not in finding.key


def test_removed_lines_and_lookalikes_are_not_secrets():
    patch = (f"commit {'b' * 40}\n+++ b/y.py\n@@ -1,2 +1,1 @@\n-old = '{TOKEN}'\n"
             "+ghp_short\n")
    assert find_secrets(patch) == []


def test_a_push_with_a_secret_is_refused_until_the_secret_is_allowed(world, tmp_path: Path):
    world.hub.set_push_protection(world.repo)
    work = clone(world.hub.git_url(world.repo, world.owner.token), tmp_path / "w")
    commit_file(work, "settings.py", f"TOKEN = '{TOKEN}'\n", "Add settings")
    refused = git(work, "push", "origin", "HEAD:refs/heads/feature", check=False)
    assert refused.returncode != 0
    said = refused.stderr
    assert "GH013: Repository rule violations found for refs/heads/feature." in said
    assert "GITHUB PUSH PROTECTION" in said and "Push cannot contain secrets" in said
    assert "GitHub Personal Access Token" in said and "path: settings.py:1" in said
    assert "/security/secret-scanning/unblock-secret/" in said
    assert TOKEN not in said
    assert world.hub.ref_sha(world.repo, "refs/heads/feature") is None

    world.hub.allow_secret(world.repo, TOKEN)
    allowed = git(work, "push", "origin", "HEAD:refs/heads/feature", check=False)
    assert allowed.returncode == 0, allowed.stderr


def test_without_push_protection_the_same_push_goes(world, tmp_path: Path):
    work = clone(world.hub.git_url(world.repo, world.owner.token), tmp_path / "w")
    commit_file(work, "settings.py", f"TOKEN = '{TOKEN}'\n", "Add settings")
    assert git(work, "push", "origin", "HEAD:refs/heads/feature", check=False).returncode == 0
