"""A small CI: runs a repository's test command on each new PR head, as its own App.

The runs belong to a separate "CI" App, so the App under test cannot edit them, exactly
as with a real CI provider. The command runs in a throwaway checkout with an
environment that holds no tokens.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import tempfile
from pathlib import Path

from fakehub.state import App, Issue, Repo

log = logging.getLogger("fakehub.ci")

CI_APP_NAME = "fakehub-ci"
OUTPUT_TAIL_CHARS = 60_000  # leaves room under GitHub's 65535-character limit
SAFE_ENV_KEYS = ("PATH", "LANG", "LC_ALL", "TZ", "PYTHONPATH", "VIRTUAL_ENV")


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
        workdir = Path(tempfile.mkdtemp(prefix="fakehub-ci-"))
        try:
            checkout = workdir / "repo"
            await _git("clone", "--quiet", "--no-checkout", str(repo.path), str(checkout))
            await _git("-C", str(checkout), "checkout", "--quiet", "--detach", sha)
            env = {k: os.environ[k] for k in SAFE_ENV_KEYS if k in os.environ}
            env["HOME"] = str(workdir)
            env["CI"] = "true"
            proc = await asyncio.create_subprocess_shell(
                command,
                cwd=checkout,
                env=env,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
                start_new_session=True,
            )
            try:
                out, _ = await asyncio.wait_for(proc.communicate(), timeout)
            except TimeoutError:
                _kill_group(proc)
                await proc.wait()
                return -1, "(timed out)", True
            except asyncio.CancelledError:  # fakehub is stopping: leave no stray process
                _kill_group(proc)
                raise
            return proc.returncode or 0, out.decode(errors="replace"), False
        finally:
            await asyncio.to_thread(shutil.rmtree, workdir, True)


def _kill_group(proc: asyncio.subprocess.Process) -> None:
    import signal

    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


async def _git(*args: str) -> None:
    proc = await asyncio.create_subprocess_exec(
        "git", *args, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE
    )
    _, err = await proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)}: {err.decode(errors='replace').strip()}")
