import sqlite3
import threading

import pytest

from proxy import Grant, TokenRegistry, sandbox_git_files


@pytest.fixture
def registry(tmp_path):
    return TokenRegistry(tmp_path / "hangar.db")


def test_issue_and_check(registry, tmp_path):
    token = registry.issue("sb-1", repo="octo/widgets", branch="hangar/1-ab", installation_id=7)
    assert token.startswith("hgs_") and len(token) >= 4 + 32
    assert registry.check("sb-1", token) == Grant("sb-1", "octo/widgets", "hangar/1-ab", 7, True)
    # Only a hash is stored.
    dump = "\n".join(sqlite3.connect(tmp_path / "hangar.db").iterdump())
    assert token not in dump and token[4:] not in dump
    assert sqlite3.connect(tmp_path / "hangar.db").execute("PRAGMA journal_mode").fetchone() == (
        "wal",
    )


def test_a_lease_is_kept_with_its_token_and_goes_with_the_next(registry):
    token = registry.issue("sb-1", repo="o/r", branch="b", installation_id=7,
                           allow_force=False, lease="a" * 40)
    assert registry.check("sb-1", token) == Grant("sb-1", "o/r", "b", 7, False, "a" * 40)
    again = registry.issue("sb-1", repo="o/r", branch="b", installation_id=7)
    assert registry.check("sb-1", again).lease is None
    with pytest.raises(ValueError):  # a lease on a token that may force anyway means nothing
        registry.issue("sb-2", repo="o/r", branch="b", installation_id=7, lease="a" * 40)


def test_check_refuses_other_tokens_and_sandboxes(registry):
    a = registry.issue("sb-a", repo="o/r", branch="b-a", installation_id=None)
    b = registry.issue("sb-b", repo="o/r", branch="b-b", installation_id=None, allow_force=False)
    assert a != b
    assert registry.check("sb-a", b) is None
    assert registry.check("sb-b", a) is None
    assert registry.check("sb-x", a) is None
    assert registry.check("sb-a", a + "x") is None
    assert registry.check("sb-a", "") is None
    assert registry.check("sb-b", b).allow_force is False
    assert registry.owner_of(a) == "sb-a"
    assert registry.owner_of("hgs_nope") is None


def test_reissue_replaces_the_old_token(registry):
    first = registry.issue("sb-1", repo="o/r", branch="b", installation_id=1)
    second = registry.issue("sb-1", repo="o/r", branch="b", installation_id=1)
    assert registry.check("sb-1", first) is None
    assert registry.check("sb-1", second) is not None


def test_revoke_and_revoke_branch(registry):
    a = registry.issue("sb-a", repo="o/r", branch="hangar/1", installation_id=1)
    b = registry.issue("sb-b", repo="o/r", branch="hangar/1", installation_id=1)
    c = registry.issue("sb-c", repo="o/r", branch="hangar/2", installation_id=1)
    registry.revoke("sb-a")
    assert registry.check("sb-a", a) is None
    assert registry.owner_of(a) is None
    assert registry.revoke_branch("o/r", "hangar/1") == 1
    assert registry.check("sb-b", b) is None
    assert registry.check("sb-c", c) is not None
    registry.revoke("sb-a")  # idempotent


@pytest.mark.parametrize(
    ("repo", "branch"), [("widgets", "b"), ("o/r/x", "b"), ("/r", "b"), ("o/r", "refs/heads/b")]
)
def test_issue_refuses_bad_scope(registry, repo, branch):
    with pytest.raises(ValueError):
        registry.issue("sb", repo=repo, branch=branch, installation_id=None)


def test_record_push_and_pushes(registry):
    registry.record_push(
        "sb-1", repo="o/r", ref="refs/heads/b", old="0" * 40, new="a" * 40, size=123, at=5.0
    )
    registry.record_push("sb-1", repo="o/r", ref="refs/heads/b", old="a" * 40, new="b" * 40, size=7)
    registry.record_push("sb-2", repo="o/r", ref="refs/heads/c", old="0" * 40, new="c" * 40, size=1)
    pushes = registry.pushes("sb-1")
    assert [(p.old[:1], p.new[:1], p.bytes) for p in pushes] == [("0", "a", 123), ("a", "b", 7)]
    assert pushes[0].at == 5.0 and pushes[1].at > 5.0
    assert registry.pushes("nobody") == []


def test_safe_next_to_other_writers_and_threads(registry, tmp_path):
    other = sqlite3.connect(tmp_path / "hangar.db")
    other.execute("CREATE TABLE IF NOT EXISTS theirs (x)")
    other.execute("INSERT INTO theirs VALUES (1)")
    other.commit()
    errors = []

    def work(i):
        try:
            t = registry.issue(f"sb-{i}", repo="o/r", branch=f"b{i}", installation_id=None)
            assert registry.check(f"sb-{i}", t) is not None
            registry.record_push(
                f"sb-{i}", repo="o/r", ref=f"refs/heads/b{i}", old="0" * 40, new="a" * 40, size=i
            )
        except Exception as exc:  # collected for the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert sum(len(registry.pushes(f"sb-{i}")) for i in range(16)) == 16
    assert other.execute("SELECT x FROM theirs").fetchall() == [(1,)]


def test_sandbox_git_files_for_github():
    files = sandbox_git_files(
        "http://hangar-proxy:8787/", "sb-1", "hgs_abc", "https://github.com/octo/widgets.git"
    )
    assert files == {
        "/workspace/home/.gitconfig": (
            b'[url "http://hangar-proxy:8787/git/sb-1/"]\n'
            b"\tinsteadOf = https://github.com/\n"
            b"[credential]\n"
            b"\thelper = store --file /workspace/home/.git-credentials\n"
        ),
        "/workspace/home/.git-credentials": b"http://x-hangar:hgs_abc@hangar-proxy:8787\n",
    }


def test_sandbox_git_files_for_a_host_under_a_path():
    files = sandbox_git_files(
        "https://hangar.example/", "sb-2", "hgs_x", "http://127.0.0.1:9000/ghe/o/r", home="/h/"
    )
    assert b"\tinsteadOf = http://127.0.0.1:9000/ghe/\n" in files["/h/.gitconfig"]
    assert b'[url "https://hangar.example/git/sb-2/"]' in files["/h/.gitconfig"]
    assert files["/h/.git-credentials"] == b"https://x-hangar:hgs_x@hangar.example\n"


@pytest.mark.parametrize("url", ["github.com/o/r.git", "https://github.com/r.git"])
def test_sandbox_git_files_refuses_odd_urls(url):
    with pytest.raises(ValueError):
        sandbox_git_files("http://h", "sb", "hgs_x", url)
