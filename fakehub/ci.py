"""A small CI: runs a repository's test command on each new PR head, as its own App.

The runs belong to a separate "CI" App, so the App under test cannot edit them, exactly
as with a real CI provider. The command is code an agent may have written: it runs in a
throwaway sandbox of the local provider (bubblewrap: its own user, pid and network
namespaces, no network at all, the host's /usr read-only, the checkout at
/workspace/repo the only writable place), never as a host process. It sees no App key,
no data directory of fakehub or hangar and no token. Without bubblewrap the check run
fails and says how to install it.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import tempfile
from pathlib import Path

from fakehub.state import App, Issue, Repo

log = logging.getLogger("fakehub.ci")

CI_APP_NAME = "fakehub-ci"
OUTPUT_TAIL_CHARS = 60_000  # leaves room under GitHub's 65535-character limit
CHECKOUT = "/workspace/repo"


def tail(text: str, limit: int = OUTPUT_TAIL_CHARS) -> str:
    return text if len(text) <= limit else "…" + text[-(limit - 1) :]


class CIRunner:
    def __init__(self, hub) -> None:
        self.hub = hub
        self._seen: set[tuple[int, str]] = set()

    @property
    def app(self) -> App:
        """The CI App, created on first use (no webhook URL: it only reports)."""
        for app in self.hub.store.apps.values():
            if app.slug == CI_APP_NAME:
                return app
        return self.hub.create_app(CI_APP_NAME, webhook_url=None, events=[])

    def schedule(self, repo: Repo, issue: Issue, *, again: bool = False) -> None:
        assert issue.pull is not None
        key = (repo.id, issue.pull.head_sha)
        if key in self._seen and not again:
            return
        self._seen.add(key)
        self.hub.spawn(self.run(repo, issue.pull.head_sha, issue.pull.head_ref))

    async def run(self, repo: Repo, sha: str, branch: str) -> None:
        app = self.app
        bot = app.bot
        run = self.hub.create_check_run(repo, app.id, {"name": repo.ci_name, "head_sha": sha}, bot)
        self.hub.update_check_run(repo, run, app.id, {"status": "in_progress"}, bot)
        command = repo.ci_command or "true"
        try:
            code, output, timed_out = await self._execute(repo, sha, command, repo.ci_timeout)
        except Exception as exc:  # a broken checkout still reports, as CI would
            log.exception("ci run failed to start")
            code, output, timed_out = 1, f"fakehub CI could not run: {exc}", False
        conclusion = "timed_out" if timed_out else "success" if code == 0 else "failure"
        summary = (
            f"`{command}` timed out after {repo.ci_timeout:g} s"
            if timed_out
            else f"`{command}` exited with code {code}"
        )
        self.hub.update_check_run(
            repo,
            run,
            app.id,
            {
                "status": "completed",
                "conclusion": conclusion,
                "output": {
                    "title": f"{repo.ci_name}: {conclusion}",
                    "summary": summary,
                    "text": "```\n" + tail(output) + "\n```",
                },
            },
            bot,
        )

    async def _execute(
        self, repo: Repo, sha: str, command: str, timeout: float
    ) -> tuple[int, str, bool]:
        from sandbox.envspec import EnvSpec
        from sandbox.provider import SandboxError
        from sandbox.providers.local import LocalProvider

        root = Path(tempfile.mkdtemp(prefix="fakehub-ci-"))
        provider = LocalProvider(root=root, hidden_paths=[self.hub.data_dir])
        try:
            try:
                sb = await provider.create(EnvSpec(name="fakehub-ci", network="none"), {})
            except SandboxError as exc:
                return 1, f"fakehub CI runs commands only in a sandbox: {exc}", False
            checkout = root / sb.id / "workspace" / "repo"
            await _git("clone", "--quiet", "--no-checkout", str(repo.path), str(checkout))
            await _git("-C", str(checkout), "checkout", "--quiet", "--detach", sha)
            result = await provider.run(sb, ["/bin/sh", "-c", command], cwd=CHECKOUT,
                                        timeout=timeout, env={"CI": "true"})
            if result.timed_out:
                return -1, "(timed out)", True
            return result.exit_code or 0, result.output, False
        finally:
            for sb in await provider.list({}):
                await provider.destroy(sb)
            await asyncio.to_thread(shutil.rmtree, root, True)


async def _git(*args: str) -> None:
    proc = await asyncio.create_subprocess_exec(
        "git", *args, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE
    )
    _, err = await proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)}: {err.decode(errors='replace').strip()}")
