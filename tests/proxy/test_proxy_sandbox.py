"""git inside a real local sandbox (bubblewrap, its own network namespace) through the proxy.

The sandbox reaches nothing but the proxy, holds no GitHub token, and still clones and
pushes its branch with plain `git clone` / `git push origin`.
"""

import shutil
import subprocess

import pytest

from proxy import Grant, sandbox_git_files

pytestmark = pytest.mark.bwrap

BRANCH = "hangar/40-sbox"
IDENTITY = {
    "GIT_AUTHOR_NAME": "agent",
    "GIT_AUTHOR_EMAIL": "agent@example.com",
    "GIT_COMMITTER_NAME": "agent",
    "GIT_COMMITTER_EMAIL": "agent@example.com",
}


def _bwrap_works() -> str | None:
    if not shutil.which("bwrap"):
        return "bubblewrap is not installed (apt-get install bubblewrap)"
    probe = subprocess.run(
        ["bwrap", "--unshare-user", "--unshare-net", "--ro-bind", "/", "/", "true"],
        capture_output=True,
        text=True,
    )
    if probe.returncode != 0:
        return f"bubblewrap cannot create namespaces here: {probe.stderr.strip()}"
    return None


@pytest.fixture
async def local_sandbox(world, tmp_path):
    reason = _bwrap_works()
    if reason:
        pytest.skip(reason)
    providers = pytest.importorskip("sandbox.providers")
    envspec = pytest.importorskip("sandbox.envspec")
    provider = providers.get_provider(
        "local", root=tmp_path / "sandboxes", proxy_port=world.proxy.port
    )
    sb = await provider.create(
        envspec.EnvSpec(name="proxy-test", provider="local"), {"hangar.test": "proxy"}
    )
    yield provider, sb
    await provider.destroy(sb)


async def test_git_in_a_sandbox_goes_through_the_proxy_with_only_its_token(world, local_sandbox):
    provider, sb = local_sandbox
    token = world.registry.issue(
        sb.id, repo=world.repo, branch=BRANCH, installation_id=world.installation_id
    )
    files = sandbox_git_files(
        f"http://127.0.0.1:{world.proxy.port}", sb.id, token, world.hub.git_url(world.repo)
    )
    gitconfig = "/workspace/home/.gitconfig"
    credentials = "/workspace/home/.git-credentials"
    await provider.copy_in(sb, {gitconfig: files[gitconfig]})
    await provider.copy_in(sb, {credentials: files[credentials]}, mode=0o600)

    async def run(*argv, cwd="/workspace"):
        result = await provider.run(sb, list(argv), cwd=cwd, env=IDENTITY, timeout=120)
        return result.exit_code, result.output

    code, out = await run("git", "clone", world.hub.git_url(world.repo), "/workspace/repo")
    assert code == 0, out
    code, out = await run(
        "sh",
        "-c",
        "echo work > work.txt && git add work.txt && git commit -qm work",
        cwd="/workspace/repo",
    )
    assert code == 0, out
    code, out = await run("git", "push", "origin", f"HEAD:{BRANCH}", cwd="/workspace/repo")
    assert code == 0, out
    assert f"HEAD -> {BRANCH}" in out
    code, head = await run("git", "rev-parse", "HEAD", cwd="/workspace/repo")
    assert world.hub.ref_sha(world.repo, BRANCH) == head.strip()

    code, out = await run("git", "push", "origin", "HEAD:main", cwd="/workspace/repo")
    assert code != 0
    assert (
        f" ! [remote rejected] HEAD -> main (hangar: this sandbox may push only to {BRANCH})" in out
    )

    # fakehub itself is out of reach: the proxy is the sandbox's only way out.
    direct = world.hub.git_url(world.repo).replace("127.0.0.1", "localhost")
    code, out = await run("git", "ls-remote", direct)
    assert code != 0
    assert "Failed to connect" in out or "Could not resolve" in out, out

    # No GitHub token anywhere: not in the environment, not in any file it can read.
    grant = Grant(sb.id, world.repo, BRANCH, world.installation_id)
    installation_token = (await world.upstream.credentials(grant))[1]
    code, env = await run("env")
    assert code == 0
    assert "ghs_" not in env and installation_token not in env
    assert "GITHUB" not in env.upper() and "GH_TOKEN" not in env.upper()
    code, found = await run("grep", "-rlI", "-e", "ghs_", "-e", installation_token, "/workspace")
    assert code == 1 and found == "", found
    code, found = await run("grep", "-rlI", "hgs_", "/workspace")
    assert found.split() == [credentials]
    # git's store helper may rewrite the line after use; it still holds only the hgs_ token.
    [line] = (await provider.copy_out(sb, credentials)).decode().splitlines()
    assert line.startswith(f"http://x-hangar:{token}@127.0.0.1")
