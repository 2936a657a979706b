"""The pack reader against packs made by real git, the way `git push` makes them."""

import os
import subprocess
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy import pktline
from proxy.packwalk import PackCommits, PackError, proves_fast_forward


def git(repo, *args, input=None):
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.com",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.com",
        "GIT_CONFIG_NOSYSTEM": "1",
        "HOME": str(repo),
    }
    return subprocess.run(
        ["git", "-C", str(repo), *args], input=input, capture_output=True, check=True, env=env
    ).stdout


def commit(repo, name, content, message="change"):
    (repo / name).write_bytes(content)
    git(repo, "add", name)
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD").decode().strip()


def push_pack(repo, new, *have):
    """The pack `git push` would send for `new` to a remote that has `have`."""
    revs = "\n".join([new, *(f"^{h}" for h in have)]) + "\n"
    return git(
        repo,
        "pack-objects",
        "--stdout",
        "--thin",
        "--revs",
        "--delta-base-offset",
        "-q",
        input=revs.encode(),
    )


def read(pack, chunk=4096, **kwargs):
    reader = PackCommits(**kwargs)
    for i in range(0, len(pack), chunk):
        reader.feed(pack[i : i + chunk])
    reader.finish()
    return reader.commits


@pytest.fixture
def repo(tmp_path):
    path = tmp_path / "repo"
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    return path


def test_fast_forward_is_proven_and_force_push_is_not(repo):
    base = commit(repo, "a.txt", b"one\n")
    old = commit(repo, "a.txt", b"two\n")
    new = commit(repo, "b.bin", os.urandom(200_000))
    commits = read(push_pack(repo, new, old))
    assert set(commits) == {new}
    assert commits[new] == (old,)
    assert proves_fast_forward(commits, old, new)

    # Rewrite: a new commit on top of `base`, pushed over `old`.
    git(repo, "reset", "-q", "--hard", base)
    rewritten = commit(repo, "c.txt", b"three\n")
    commits = read(push_pack(repo, rewritten, old), chunk=7)
    assert commits == {rewritten: (base,)}
    assert not proves_fast_forward(commits, old, rewritten)


def test_many_commits_and_merges(repo):
    old = commit(repo, "a.txt", b"0\n")
    for i in range(30):
        commit(repo, "a.txt", f"{i}\n".encode() * 50, message="m" * 2000 + str(i))
    git(repo, "checkout", "-q", "-b", "side", old)
    commit(repo, "s.txt", b"side\n")
    git(repo, "checkout", "-q", "main")
    git(repo, "merge", "-q", "--no-edit", "side")
    new = git(repo, "rev-parse", "HEAD").decode().strip()
    commits = read(push_pack(repo, new, old), chunk=1000)
    expected = {
        line.split()[0]: tuple(line.split()[1:])
        for line in git(repo, "rev-list", "--parents", new, f"^{old}").decode().splitlines()
    }
    assert commits == expected
    assert proves_fast_forward(commits, old, new)
    assert not proves_fast_forward(commits, "f" * 40, new)


def test_deltified_commits_are_resolved(repo):
    old = commit(repo, "a.txt", b"0\n")
    message = os.urandom(3000).hex()
    for i in range(6):
        commit(repo, f"f{i}.txt", b"x\n", message=f"{message}\n\n{i}")
    new = git(repo, "rev-parse", "HEAD").decode().strip()
    pack = git(
        repo,
        "pack-objects",
        "--stdout",
        "--revs",
        "--delta-base-offset",
        "-q",
        "--window=50",
        input=f"{new}\n^{old}\n".encode(),
    )
    stats = git(repo, "index-pack", "--stdin", "--fix-thin", "-v", input=pack)
    assert stats is not None
    commits = read(pack)
    assert len(commits) == 6
    assert proves_fast_forward(commits, old, new)


def test_push_options_are_skipped(repo):
    old = commit(repo, "a.txt", b"0\n")
    new = commit(repo, "a.txt", b"1\n")
    options = pktline.encode("ci.skip") + b"0000"
    commits = read(options + push_pack(repo, new, old), chunk=3, push_options=True)
    assert commits[new] == (old,)


def test_empty_pack(repo):
    old = commit(repo, "a.txt", b"0\n")
    commits = read(push_pack(repo, old, old))
    assert commits == {}
    assert proves_fast_forward(commits, old, old)


@pytest.mark.parametrize("pack", [b"PACX" + b"\0" * 8, b"PACK\0\0\0\x09\0\0\0\1"])
def test_not_a_pack(pack):
    with pytest.raises(PackError):
        PackCommits().feed(pack)


def test_truncated_pack(repo):
    old = commit(repo, "a.txt", b"0\n")
    new = commit(repo, "a.txt", b"1\n")
    pack = push_pack(repo, new, old)
    reader = PackCommits()
    reader.feed(pack[:-30])
    with pytest.raises(PackError):
        reader.finish()


def test_a_forged_parent_line_does_not_prove_anything():
    """Commit ids are computed, so a commit claiming `old` as parent is that commit."""
    old, claimed_new = "a" * 40, "b" * 40
    body = f"tree {'c' * 40}\nparent {old}\n\nmsg\n".encode()
    obj = zlib.compress(body)
    header = bytes([(1 << 4) | (len(body) & 15) | 0x80, len(body) >> 4])
    pack = b"PACK" + (2).to_bytes(4, "big") + (1).to_bytes(4, "big") + header + obj + b"\0" * 20
    commits = read(pack)
    [(oid, parents)] = commits.items()
    assert parents == (old,) and oid != claimed_new
    assert not proves_fast_forward(commits, old, claimed_new)


@settings(max_examples=200)
@given(st.binary(max_size=300))
def test_random_bytes_raise_only_pack_errors(data):
    reader = PackCommits()
    try:
        reader.feed(b"PACK\0\0\0\2\0\0\0\3" + data)
        reader.finish()
    except PackError:
        pass
