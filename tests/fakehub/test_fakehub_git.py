"""Git smart HTTP details: big streamed pushes, gzipped requests, URL forms, modes."""

from __future__ import annotations

import os
from pathlib import Path

from fakehub_helpers import app_jwt, call, clone, git

from fakehub import gitrepo
from fakehub.gitrepo import Signature


def test_big_push_streams_through_chunked_transfer(world, tmp_path: Path):
    work = clone(world.hub.git_url(world.repo, world.dev.token), tmp_path / "w")
    # Random bytes do not compress: the pack is as big as the file, far above git's
    # 1 MiB post buffer, so git sends it with chunked transfer encoding.
    (work / "blob.bin").write_bytes(os.urandom(12 * 1024 * 1024))
    git(work, "add", "blob.bin")
    git(work, "commit", "--quiet", "-m", "big")
    git(work, "push", "--quiet", "origin", "HEAD:refs/heads/big")
    sha = git(work, "rev-parse", "HEAD").stdout.strip()
    assert world.hub.ref_sha(world.repo, "big") == sha
    again = clone(world.hub.git_url(world.repo, world.dev.token), tmp_path / "again")
    git(again, "fetch", "--quiet", "origin", "big")
    assert (git(again, "cat-file", "-s", f"{sha}:blob.bin").stdout.strip()
            == str(12 * 1024 * 1024))


def test_clone_with_many_wants_survives_a_gzipped_request(world, tmp_path: Path):
    bare = world.hub.repo_path(world.repo)
    tip = gitrepo.ref_sha(bare, "main")
    who = Signature("Setup", "setup@example.com")
    for i in range(60):  # 60 distinct wants make a request body git sends gzipped
        sha = gitrepo.commit_files(bare, tip, {f"f{i}.txt": str(i)}, f"c{i}", who)
        gitrepo.update_ref(bare, f"refs/heads/b{i}", sha)
    work = clone(world.hub.git_url(world.repo, world.dev.token), tmp_path / "w")
    branches = git(work, "branch", "-r").stdout
    assert "origin/b59" in branches
    git(work, "fetch", "--quiet", "origin", "+refs/heads/*:refs/remotes/origin/*")


def test_git_urls_without_dot_git_work(world, tmp_path: Path):
    url = world.hub.git_url(world.repo, world.dev.token).removesuffix(".git")
    proc = git(tmp_path, "ls-remote", url)
    assert "refs/heads/main" in proc.stdout


def test_missing_credentials_get_a_basic_challenge(world, tmp_path: Path):
    import urllib.error
    import urllib.request

    world.hub.create_repo("acme", "vault", {"a": "a"}, private=True)
    url = f"{world.hub.base_url}/acme/vault.git/info/refs?service=git-upload-pack"
    try:
        urllib.request.urlopen(url, timeout=10)
        raise AssertionError("expected 401")
    except urllib.error.HTTPError as err:
        assert err.code == 401
        assert err.headers["WWW-Authenticate"] == 'Basic realm="GitHub"'
    push = f"{world.hub.base_url}/acme/widgets.git/info/refs?service=git-receive-pack"
    try:
        urllib.request.urlopen(push, timeout=10)
        raise AssertionError("expected 401")
    except urllib.error.HTTPError as err:
        assert err.code == 401


def test_repo_from_a_directory_keeps_executable_bits(fakehub, tmp_path: Path):
    src = tmp_path / "src"
    (src / "bin").mkdir(parents=True)
    (src / "bin" / "run").write_text("#!/bin/sh\necho hi\n")
    (src / "bin" / "run").chmod(0o755)
    (src / "README.md").write_text("hi\n")
    fakehub.create_repo("acme", "tools", src)
    listing = gitrepo.out(fakehub.repo_path("acme/tools"), "ls-tree", "-r", "main")
    modes = {line.split("\t")[1]: line.split()[0] for line in listing.splitlines()}
    assert modes == {"README.md": "100644", "bin/run": "100755"}


def test_faults_reach_git_requests_too(world, tmp_path: Path):
    work = clone(world.hub.git_url(world.repo, world.dev.token), tmp_path / "w")
    (work / "x.txt").write_text("x\n")
    git(work, "add", "x.txt")
    git(work, "commit", "--quiet", "-m", "x")
    world.hub.inject_fault("POST", r"/acme/widgets\.git/git-receive-pack$", status=502)
    failed = git(work, "push", "origin", "HEAD:refs/heads/x", check=False)
    assert failed.returncode != 0 and "502" in failed.stderr
    git(work, "push", "--quiet", "origin", "HEAD:refs/heads/x")
    assert world.hub.ref_sha(world.repo, "x") == git(work, "rev-parse", "HEAD").stdout.strip()


def test_installation_token_needs_contents_to_clone_private_code(world, tmp_path: Path):
    world.hub.create_repo("acme", "closed", {"a.txt": "a"}, private=True)
    world.hub.install(world.app.id, "acme", ["closed"])
    jwt_token = app_jwt(world.app.id, world.app.private_key_pem)
    narrowed = call(world.hub.api_url, "POST",
                    f"/app/installations/{world.installation_id}/access_tokens", jwt_token,
                    {"permissions": {"issues": "write"}}, scheme="Bearer").body["token"]
    refused = git(tmp_path, "ls-remote", world.hub.git_url("acme/closed", narrowed), check=False)
    assert refused.returncode != 0 and "denied" in refused.stderr
    full = world.hub.installation_token(world.installation_id)
    assert "refs/heads/main" in git(tmp_path, "ls-remote",
                                    world.hub.git_url("acme/closed", full)).stdout


def test_a_changes_file_list_matches_git_file_by_file(tmp_path: Path):
    """The listed files (blob ids and patches from one diff) agree with asking git about
    each file alone: modified, added, removed, renamed, binary, odd names."""
    repo = tmp_path / "r.git"
    gitrepo.init_bare(repo, "main")
    who = Signature("a", "a@example.com")
    base = gitrepo.commit_files(repo, None, {
        "keep.txt": "one\ntwo\n\nthree\n", "gone.txt": "bye\n", "moved.py": "x = 1\n" * 20,
        "img.bin": b"\x00\x01", "with space.txt": "a\n", 'quo"te.txt': "q\n",
        "blank.txt": "a\n\n"}, "base", who)
    head = gitrepo.commit_files(repo, base, {
        "keep.txt": "one\n2\n\nthree\n ", "gone.txt": None, "moved.py": None,
        "pkg/moved.py": "x = 1\n" * 19 + "x = 2\n", "img.bin": b"\x00\x02", "new.txt": "n\n",
        "with space.txt": "b\n", 'quo"te.txt': "Q\n", "ünï.txt": "u\n",
        "blank.txt": "b\n\n"}, "head", who)
    changes = {c.filename: c for c in gitrepo.diff_files(repo, base, head)}
    assert set(changes) == {"keep.txt", "gone.txt", "pkg/moved.py", "img.bin", "new.txt",
                            "with space.txt", 'quo"te.txt', "ünï.txt", "blank.txt"}
    assert changes["pkg/moved.py"].status == "renamed"
    assert changes["pkg/moved.py"].previous_filename == "moved.py"
    assert changes["gone.txt"].status == "removed" and changes["gone.txt"].sha is None
    for name, change in changes.items():
        assert change.patch == gitrepo.file_patch(repo, base, head, name) or (
            # asked alone, git cannot see the rename
            name == "pkg/moved.py"), name
        if change.sha:
            assert change.sha == gitrepo.out(repo, "rev-parse", f"{head}:{name}")
    # A patch ends where git's does: a last context line that is blank keeps its space.
    assert changes["blank.txt"].patch == "@@ -1,2 +1,2 @@\n-a\n+b\n "
