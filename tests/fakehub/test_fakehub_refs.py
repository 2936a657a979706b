"""fakehub reads refs from git's files and keeps what a commit id fixes: every answer is
git's own, checked here against git itself, and nothing is kept that a push can change."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from fakehub import gitrepo
from fakehub.gitrepo import Signature

WHO = Signature("Setup", "setup@example.com")


def rev_parse(repo: Path, *args: str) -> str | None:
    proc = subprocess.run(["git", "-C", str(repo), "rev-parse", "--verify", "--quiet", *args],
                          capture_output=True, text=True)
    return proc.stdout.strip() or None if proc.returncode == 0 else None


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = tmp_path / "r.git"
    gitrepo.init_bare(path, "main")
    first = gitrepo.commit_files(path, None, {"a.txt": "a\n"}, "first", WHO)
    second = gitrepo.commit_files(path, first, {"b.txt": "b\n"}, "second", WHO)
    gitrepo.update_ref(path, "refs/heads/main", second)
    gitrepo.update_ref(path, "refs/heads/old", first)
    gitrepo.update_ref(path, "refs/heads/nested/deeper/branch", first)
    # A tag named as a branch is: git's lookup order takes the tag first.
    gitrepo.update_ref(path, "refs/tags/old", second)
    gitrepo.git(path, "tag", "-a", "-m", "annotated", "v1", first,
                env={**gitrepo._env(WHO), "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z"})
    return path


NAMES = ["main", "old", "nested/deeper/branch", "v1", "refs/heads/old", "refs/tags/v1",
         "HEAD", "main~1", "main^{tree}", "main@{0}", "@", "nested", "refs/heads",
         "config", "missing", "../r.git/refs/heads/main", "main.lock", ".hidden",
         "refs/heads/./main", "a" * 40]


def check_all(repo: Path) -> None:
    for name in NAMES:
        assert gitrepo.resolve(repo, name) == rev_parse(repo, f"{name}^{{commit}}"), name
        full = name if name.startswith("refs/") else f"refs/heads/{name}"
        assert gitrepo.ref_sha(repo, name) == rev_parse(repo, full), name
        listed = gitrepo.list_refs(repo, full).get(full)
        assert gitrepo.exact_ref(repo, full) == listed, name


def test_refs_read_from_files_are_what_git_says_loose_packed_and_moved(repo: Path):
    check_all(repo)
    check_all(repo)  # the same again, now from what was kept
    gitrepo.git(repo, "pack-refs", "--all")
    assert not (repo / "refs/heads/main").exists()
    check_all(repo)
    # A ref moved after packing is loose again, over its packed line.
    third = gitrepo.commit_files(repo, gitrepo.ref_sha(repo, "main"), {"c": "c"}, "3", WHO)
    gitrepo.update_ref(repo, "refs/heads/main", third)
    assert gitrepo.resolve(repo, "main") == third
    check_all(repo)
    gitrepo.delete_ref(repo, "refs/heads/main")
    assert gitrepo.resolve(repo, "main") is None and gitrepo.ref_sha(repo, "main") is None
    check_all(repo)


def test_an_answer_at_an_id_git_does_not_have_yet_is_not_kept(tmp_path: Path):
    other = tmp_path / "other.git"
    gitrepo.init_bare(other, "main")
    sha = gitrepo.commit_files(other, None, {"CODEOWNERS": "* @acme/core\n"}, "c", WHO)
    repo = tmp_path / "r.git"
    gitrepo.init_bare(repo, "main")
    assert gitrepo.resolve(repo, sha) is None
    assert gitrepo.read_blob(repo, sha, "CODEOWNERS") is None
    assert gitrepo.read_blob(repo, sha, "docs/CODEOWNERS") is None
    subprocess.run(["git", "-C", str(other), "push", "--quiet", str(repo),
                    f"{sha}:refs/heads/main"],
                   check=True, capture_output=True)
    assert gitrepo.resolve(repo, sha) == sha
    assert gitrepo.read_blob(repo, sha, "CODEOWNERS") == (
        b"* @acme/core\n", rev_parse(repo, f"{sha}:CODEOWNERS"))
    # Now that the commit is there, a file it lacks is missing for good.
    assert gitrepo.read_blob(repo, sha, "docs/CODEOWNERS") is None
    assert gitrepo.commit_info(repo, sha).message == "c"


def test_kept_commits_are_each_callers_own(repo: Path):
    main = gitrepo.ref_sha(repo, "main")
    gitrepo.commit_info(repo, main).parents.append("changed by a caller")
    gitrepo.commits_between(repo, None, main)[-1].parents.clear()
    assert gitrepo.commit_info(repo, main).parents == [gitrepo.ref_sha(repo, "old")]
    assert gitrepo.commits_between(repo, None, main)[-1].parents == [
        gitrepo.ref_sha(repo, "old")]


def test_a_commit_of_many_files_is_a_few_git_processes(repo: Path, monkeypatch):
    calls: list[tuple[str, ...]] = []
    real = gitrepo.git

    def counted(path, *args, **kw):
        calls.append(args)
        return real(path, *args, **kw)

    monkeypatch.setattr(gitrepo, "git", counted)
    files: dict[str, str | bytes | None] = {f"dir/f{i}.txt": f"{i}\n" for i in range(30)}
    files["a.txt"] = None  # deleted
    files["run.sh"] = b"#!/bin/sh\n"
    files["tool"] = "x"
    sha = gitrepo.commit_files(repo, gitrepo.ref_sha(repo, "main"), files, "many", WHO,
                               executable={"tool"})
    assert len(calls) <= 5
    listing = gitrepo.out(repo, "ls-tree", "-r", sha)
    assert "a.txt" not in listing and "dir/f29.txt" in listing
    modes = {line.split("\t")[1]: line.split()[0] for line in listing.splitlines()}
    assert modes["run.sh"] == modes["tool"] == "100755" and modes["b.txt"] == "100644"
    assert gitrepo.read_blob(repo, sha, "dir/f7.txt")[0] == b"7\n"


@pytest.mark.parametrize("path", [".git/config", "a//b", "../x", "dir/.git/hooks/x"])
def test_a_path_git_refuses_fails_the_commit(repo: Path, path: str):
    with pytest.raises(gitrepo.GitError):
        gitrepo.commit_files(repo, gitrepo.ref_sha(repo, "main"), {path: "x"}, "bad", WHO)
