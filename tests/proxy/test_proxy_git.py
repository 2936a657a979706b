"""Real git clients, through the proxy, to fakehub's real git hosting.

Each case asserts what `git` prints, because that is all an agent in a sandbox sees.
"""

import os

import pytest
from proxy_harness import ProxyThread

BRANCH = "hangar/12-ab3f"


def pushed(world, branch):
    return world.hub.ref_sha(world.repo, branch)


def test_clone_and_push_own_branch(world):
    sb = world.sandbox("sb-own", branch=BRANCH)
    assert (sb.repo_dir / "README.md").exists()
    # The remote is the plain GitHub-style URL: the proxy is configured, not visible.
    assert sb.git("config", "remote.origin.url").stdout.strip() == world.hub.git_url(world.repo)
    new = sb.commit()
    result = sb.git("push", "origin", f"HEAD:{BRANCH}")
    assert f" * [new branch]      HEAD -> {BRANCH}" in result.stderr
    assert pushed(world, BRANCH) == new
    [record] = world.registry.pushes("sb-own")
    assert (record.ref, record.new) == (f"refs/heads/{BRANCH}", new)
    assert record.old == "0" * 40 and record.bytes > 0

    # A second push, then a fetch, work too.
    newer = sb.commit()
    sb.git("push", "origin", f"HEAD:{BRANCH}")
    assert pushed(world, BRANCH) == newer
    sb.git("fetch", "-q", "origin")
    assert sb.git("rev-parse", f"origin/{BRANCH}").stdout.strip() == newer


def test_a_fetch_only_token_clones_and_pushes_nothing(world):
    token = world.registry.issue("sb-build", repo=world.repo, branch=None,
                                 installation_id=world.installation_id)
    sb = world.sandbox("sb-build", token=token)
    assert (sb.repo_dir / "README.md").exists()
    sb.commit()
    for ref in ("hangar/build-probe", "main"):
        result = sb.git("push", "--force", "origin", f"HEAD:refs/heads/{ref}", check=False)
        assert result.returncode != 0
        assert "(hangar: this sandbox may fetch but not push" in result.stderr
        assert pushed(world, ref) != sb.git("rev-parse", "HEAD").stdout.strip()


def test_push_to_main_is_refused(world):
    sb = world.sandbox("sb-main", branch=BRANCH)
    main_before = pushed(world, "main")
    sb.commit()
    result = sb.git("push", "origin", "HEAD:main", check=False)
    assert result.returncode != 0
    assert (
        f" ! [remote rejected] HEAD -> main (hangar: this sandbox may push only to {BRANCH})"
        in result.stderr
    )
    assert pushed(world, "main") == main_before


def test_push_to_another_branch_is_refused(world):
    sb = world.sandbox("sb-other", branch="hangar/20-aaaa")
    sb.commit()
    result = sb.git("push", "origin", "HEAD:refs/heads/other", check=False)
    assert result.returncode != 0
    assert (
        " ! [remote rejected] HEAD -> other "
        "(hangar: this sandbox may push only to hangar/20-aaaa)" in result.stderr
    )
    assert pushed(world, "other") is None


def test_delete_own_branch_is_refused(world):
    sb = world.sandbox("sb-delete", branch="hangar/21-bbbb")
    new = sb.commit()
    sb.git("push", "origin", "HEAD:hangar/21-bbbb")
    result = sb.git("push", "origin", ":hangar/21-bbbb", check=False)
    assert result.returncode != 0
    assert (
        " ! [remote rejected] hangar/21-bbbb "
        "(hangar: this sandbox may not delete hangar/21-bbbb)" in result.stderr
    )
    assert pushed(world, "hangar/21-bbbb") == new


def test_push_tags_is_refused(world):
    sb = world.sandbox("sb-tags", branch="hangar/22-cccc")
    sb.commit()
    sb.git("tag", "v1")
    result = sb.git("push", "origin", "--tags", check=False)
    assert result.returncode != 0
    assert (
        " ! [remote rejected] v1 -> v1 (hangar: this sandbox may not push tags; "
        "this sandbox may push only to hangar/22-cccc)" in result.stderr
    )
    assert pushed(world, "refs/tags/v1") is None


def test_push_of_own_branch_and_main_together_is_refused_whole(world):
    sb = world.sandbox("sb-two", branch="hangar/23-dddd")
    sb.commit()
    main_before = pushed(world, "main")
    result = sb.git("push", "origin", "HEAD:hangar/23-dddd", "HEAD:main", check=False)
    assert result.returncode != 0
    reason = "(hangar: push one branch per push; this sandbox may push only to hangar/23-dddd)"
    assert f" ! [remote rejected] HEAD -> hangar/23-dddd {reason}" in result.stderr
    assert f" ! [remote rejected] HEAD -> main {reason}" in result.stderr
    assert pushed(world, "hangar/23-dddd") is None
    assert pushed(world, "main") == main_before


def test_force_push_allowed_by_default(world):
    sb = world.sandbox("sb-force-ok", branch="hangar/24-eeee")
    sb.commit()
    sb.git("push", "origin", "HEAD:hangar/24-eeee")
    sb.git("commit", "-q", "--amend", "-m", "rewritten")
    rewritten = sb.git("rev-parse", "HEAD").stdout.strip()
    result = sb.git("push", "--force", "origin", "HEAD:hangar/24-eeee")
    assert "(forced update)" in result.stderr
    assert pushed(world, "hangar/24-eeee") == rewritten


def test_force_push_refused_when_force_is_off(world):
    sb = world.sandbox("sb-no-force", branch="hangar/25-ffff", allow_force=False)
    first = sb.commit()
    sb.git("push", "origin", "HEAD:hangar/25-ffff")  # creating the branch is fine
    second = sb.commit()
    sb.git("push", "origin", "HEAD:hangar/25-ffff")  # so is a fast-forward
    assert pushed(world, "hangar/25-ffff") == second

    sb.git("reset", "-q", "--hard", first)
    sb.commit("other.txt")
    result = sb.git("push", "--force", "origin", "HEAD:hangar/25-ffff", check=False)
    assert result.returncode != 0
    assert (
        " ! [remote rejected] HEAD -> hangar/25-ffff (hangar: force-push is off for this "
        "sandbox; the new tip of hangar/25-ffff must contain its current tip (fetch, rebase "
        "onto it and push again))" in result.stderr
    )
    assert pushed(world, "hangar/25-ffff") == second


def test_a_leased_token_replaces_exactly_its_tip_once_and_nothing_else(world):
    """The land worker's rebase: its token may replace the branch's tip it was given (a
    non-fast-forward push with --force-with-lease), and nothing else."""
    branch = "hangar/40-lease"
    agent = world.sandbox("sb-agent-l", branch=branch)
    agent.commit()
    agent.git("push", "origin", f"HEAD:{branch}")
    old = pushed(world, branch)
    token = world.registry.issue("sb-land-l", repo=world.repo, branch=branch,
                                 installation_id=world.installation_id, allow_force=False,
                                 lease=old)
    worker = world.sandbox("sb-land-l", branch=branch, token=token)
    worker.git("checkout", "-q", "-B", "work", f"origin/{branch}")
    worker.git("commit", "-q", "--amend", "-m", "rebased")
    rebased = worker.git("rev-parse", "HEAD").stdout.strip()
    result = worker.git("push", f"--force-with-lease=refs/heads/{branch}:{old}", "origin",
                        f"HEAD:refs/heads/{branch}")
    assert "(forced update)" in result.stderr
    assert pushed(world, branch) == rebased
    # the lease is spent: the tip is no longer the one it names
    worker.git("commit", "-q", "--amend", "-m", "again")
    result = worker.git("push", "--force", "origin", f"HEAD:refs/heads/{branch}", check=False)
    assert result.returncode != 0
    assert (f"(hangar: this sandbox may only replace {branch} at {old[:12]}, and it has "
            f"moved to {rebased[:12]} upstream)") in result.stderr
    assert pushed(world, branch) == rebased
    result = worker.git("push", "--force", "origin", "HEAD:main", check=False)
    assert result.returncode != 0 and f"may push only to {branch}" in result.stderr


def test_token_of_another_sandbox_is_403(world):
    a = world.sandbox("sb-a", branch="hangar/26-a")
    world.registry.issue(
        "sb-b", repo=world.repo, branch="hangar/26-b", installation_id=world.installation_id
    )
    # Sandbox A's credentials, sandbox B's path.
    b_path = world.sandbox("sb-b-path", token=a.token, clone=False)
    (b_path.home / ".gitconfig").write_text(
        (b_path.home / ".gitconfig").read_text().replace("/git/sb-b-path/", "/git/sb-b/")
    )
    result = b_path.git("ls-remote", world.hub.git_url(world.repo), check=False)
    assert result.returncode != 0
    assert "remote: hangar: this token belongs to another sandbox, not sb-b" in result.stderr
    assert "The requested URL returned error: 403" in result.stderr

    # A's own path, but another repository.
    other = f"{world.proxy.url}/git/sb-a/octo/other.git"
    result = a.git("ls-remote", other, check=False)
    assert "remote: hangar: this sandbox may use only octo/widgets, not octo/other" in (
        result.stderr
    )
    assert "The requested URL returned error: 403" in result.stderr


def test_revoked_token_is_401(world):
    sb = world.sandbox("sb-revoked", branch="hangar/27-gggg")
    sb.commit()
    world.registry.revoke("sb-revoked")
    result = sb.git("push", "origin", "HEAD:hangar/27-gggg", check=False)
    assert result.returncode != 0
    assert "remote: hangar: the sandbox token is unknown or revoked" in result.stderr
    assert "fatal: Authentication failed for" in result.stderr
    assert pushed(world, "hangar/27-gggg") is None


def test_push_over_the_cap_is_refused(world):
    sb = world.sandbox("sb-big", branch="hangar/28-hhhh")
    # 3 MiB of random data against the 1 MiB cap: git sends its `0000` probe first,
    # then the pack in chunks.
    sb.commit("big.bin", os.urandom(3 * 2**20))
    result = sb.git("push", "origin", "HEAD:hangar/28-hhhh", check=False)
    assert result.returncode != 0
    assert (
        " ! [remote rejected] HEAD -> hangar/28-hhhh (hangar: this push is larger than 1 MiB, "
        "the limit for sandbox pushes; keep large files out of the repository)" in result.stderr
    )
    assert pushed(world, "hangar/28-hhhh") is None


def test_push_over_a_larger_cap_is_refused_after_upstream_answered(world, tmp_path):
    """git http-backend sends its headers before it reads the pack; a push cut off at
    the cap after that must still get hangar's report, and upstream must store nothing."""
    with ProxyThread(world.registry, world.upstream, max_push_bytes=4 * 2**20) as proxy:
        sb = world.sandbox("sb-big-2", branch="hangar/31-jjjj", proxy=proxy)
        sb.commit("big.bin", os.urandom(6 * 2**20))
        result = sb.git("push", "origin", "HEAD:hangar/31-jjjj", check=False, timeout=60)
    assert result.returncode != 0
    assert (
        " ! [remote rejected] HEAD -> hangar/31-jjjj (hangar: this push is larger than 4 MiB"
        in result.stderr
    )
    assert pushed(world, "hangar/31-jjjj") is None


def test_push_under_the_cap_with_a_probe_goes_through(world):
    sb = world.sandbox("sb-medium", branch="hangar/29-iiii")
    # Over git's 1 MiB post buffer when uncompressed-ish, so it probes and streams
    # chunked; random data compresses to ~the same size, so stay under the cap.
    new = sb.commit("medium.bin", os.urandom(900 * 2**10))
    result = sb.git("-c", "http.postBuffer=65536", "push", "origin", "HEAD:hangar/29-iiii")
    assert "HEAD -> hangar/29-iiii" in result.stderr
    assert pushed(world, "hangar/29-iiii") == new


@pytest.mark.parametrize("protocol", ["0", "2"])
def test_fetch_with_both_protocol_versions(world, protocol):
    sb = world.sandbox(f"sb-fetch-{protocol}", branch=f"hangar/30-{protocol}")
    sb.git("-c", f"protocol.version={protocol}", "fetch", "-q", "origin")
    result = sb.git("-c", f"protocol.version={protocol}", "ls-remote", "origin")
    assert "refs/heads/main" in result.stdout
