"""`hangar demo`: the whole loop on this machine, against fakehub, with embedded defaults.

A sample repository with a failing test; a maintainer comments `/hangar fix the failing
test`; the script harness makes the fix in a sandbox; hangar pushes through its proxy,
opens the PR, verifies it in a clean sandbox; a reviewer approves and hangar lands it.
The timeline printed is what a person watching GitHub would see, read from fakehub.

With `--agent claude` or `--agent codex` the agent is the real pinned CLI (installed by
scripts/setup.sh), talking to a scripted model on loopback (fakehub/model.py) through
hangar's model gateway: a real CLI at work without a key.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import re
import socket
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

SAMPLE_REPO = {
    "README.md": "# calculator\n\nA tiny library with a bug for hangar's demo.\n",
    "calc.py": '"""A tiny calculator."""\n\n\ndef add(a, b):\n    return a - b\n',
    "test_calc.py": (
        "import unittest\n\nfrom calc import add\n\n\n"
        "class AddTest(unittest.TestCase):\n"
        "    def test_adds(self):\n"
        "        self.assertEqual(add(2, 3), 5)\n\n\n"
        'if __name__ == "__main__":\n    unittest.main()\n'
    ),
}

SAMPLE_AGENT = """\
#!/bin/sh
# The demo's agent: a script standing in for a model. It gets the prompt in
# HANGAR_PROMPT and the turn in HANGAR_TURN, edits the checkout and commits.
set -e
echo "turn $HANGAR_TURN: looking at the failing test"
sed -i 's/return a - b/return a + b/' calc.py
git commit -qam "Fix add(): it subtracted instead of adding"
echo "I fixed add() in calc.py. All tests pass now."
"""

# A line of the status comment's "Turns on the pull request" list.
# The label is shown as code (it may quote a check's name): its backticks are not part of it.
AUTOFIX_LINE = re.compile(r"- `*(?P<label>auto-fix turn (?P<turn>\d+) of \d+: .*?)`*: \S")

AUTOFIX_STOPPED = re.compile(r"\*\*Auto-fix on #\d+:\*\* (.*)")

DEFAULT_PROMPT = "fix the failing test"
DEFAULT_VERIFY = "python3 -m unittest -q"
# The credential hangar holds for the scripted model: a name of the demo's own, so that a
# real key in the environment is never read or replaced.
DEMO_CREDENTIALS = {"claude": "HANGAR_DEMO_ANTHROPIC_KEY", "codex": "HANGAR_DEMO_OPENAI_KEY"}
DEMO_KEY = "demo-key-for-the-scripted-model"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--repo", type=Path, help="use the files in this directory as the repo")
    parser.add_argument("--prompt", default=DEFAULT_PROMPT, help="what the maintainer asks for")
    parser.add_argument("--agent-script", type=Path,
                        help="the script the script harness runs in the sandbox")
    parser.add_argument("--verify", default=DEFAULT_VERIFY, help="the verify command")
    parser.add_argument("--ci", help="a CI command fakehub runs on every PR head (ci / test)")
    parser.add_argument("--provider", choices=["local", "docker"], default="local")
    parser.add_argument("--agent", choices=["script", "claude", "codex"], default="script",
                        help="the demo's script, or the real pinned Claude Code or Codex "
                             "CLI against a scripted model (no key needed)")
    parser.add_argument("--no-land", action="store_true",
                        help="stop once the PR is verified, without approving it")
    parser.add_argument("--keep", action="store_true", help="stay up and print the URLs")
    parser.add_argument("--json", action="store_true",
                        help="print a JSON summary as the last line")
    parser.add_argument("--timeout", type=float, default=300, help="give up after N seconds")
    parser.add_argument("--data-dir", type=Path, help="keep hangar's and fakehub's files here")


# Ports are picked below Linux's ephemeral range (32768-60999 by default): a port the
# kernel hands out for port 0 is free now, but between closing it and binding it again
# any process's next outgoing connection may take it.
PICKED_PORTS = range(20000, 32768)


def free_port(candidates: Iterable[int] | None = None) -> int:
    """The first loopback port of `candidates` (a random few of PICKED_PORTS) that binds."""
    for port in candidates if candidates is not None else random.sample(PICKED_PORTS, 100):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise OSError("no free loopback port among those tried")


def repo_files(directory: Path | None) -> dict[str, str | bytes]:
    if directory is None:
        return dict(SAMPLE_REPO)
    files: dict[str, str | bytes] = {}
    for path in sorted(directory.rglob("*")):
        if path.is_file() and ".git" not in path.relative_to(directory).parts:
            files[str(path.relative_to(directory))] = path.read_bytes()
    if not files:
        raise SystemExit(f"hangar demo: {directory} holds no files to use as the repository")
    return files


def write_envs(directory: Path, args: argparse.Namespace) -> Path:
    import yaml

    envs = directory / "envs"
    envs.mkdir(parents=True, exist_ok=True)
    script = args.agent_script.read_text() if args.agent_script else SAMPLE_AGENT
    spec: dict[str, Any] = {
        "name": "default",
        "provider": args.provider,
        "harness": "script",
        "agent_script": script,
        "verify": {"command": args.verify, "timeout_minutes": 5, "retries": 1},
        "max_minutes": 10,
    }
    if args.provider == "docker":
        spec.update(image="hangar-base:1", network="loopback")
    if args.agent != "script":
        spec.update(harness=args.agent, agent_script=None,
                    model_credential_env=DEMO_CREDENTIALS[args.agent])
        if args.provider == "docker":  # an image of the base plus the pinned CLI
            spec.update(image=None, image_recipe={"base": "hangar-base:1",
                                                  "agent_clis": [args.agent]})
        else:
            spec["agent_command"] = str(agent_cli(args.agent))
    (envs / "default.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    return envs


def agent_cli(name: str) -> Path:
    """The pinned CLI hangar runs, or a sentence saying how to install it."""
    from sandbox.envimage import AGENT_CLIS_DIR

    path = AGENT_CLIS_DIR / name
    if not path.exists():
        raise SystemExit(f"hangar demo: the pinned {name} CLI is not installed in "
                         f"{AGENT_CLIS_DIR}: run scripts/setup.sh --agents (it installs the "
                         "versions in tests/agents_cli with npm), or leave out --agent")
    return path


@contextlib.contextmanager
def scripted_model(api_key: str | None = None) -> Iterator[Any]:
    """fakehub's scripted model (the demo's fix, then a documented follow-up) on its own
    thread and loop, on loopback. Yields the ModelThread: `.url`, and `.model.requests`."""
    from fakehub.model import ModelServer, ModelThread, fix_calc_script

    with ModelThread(ModelServer(fix_calc_script(api_key=api_key))) as served:
        yield served


class Timeline:
    def __init__(self, quiet: bool):
        self.start = time.monotonic()
        self.entries: list[dict[str, Any]] = []
        self.quiet = quiet
        self.seen: set[str] = set()

    def once(self, key: str, what: str) -> None:
        if key in self.seen:
            return
        self.seen.add(key)
        at = round(time.monotonic() - self.start, 2)
        self.entries.append({"at": at, "what": what})
        if not self.quiet:
            print(f"  {at:7.2f}s  {what}", flush=True)


def run_demo(args: argparse.Namespace) -> int:
    workdir = args.data_dir or Path(tempfile.mkdtemp(prefix="hangar-demo-"))
    workdir.mkdir(parents=True, exist_ok=True)
    say = (lambda *_: None) if args.json else print
    port = free_port()
    result: dict[str, Any] = {"issue": None, "pr": None, "branch": None, "head_sha": None,
                              "verify": "not run", "landed": False, "merge_sha": None,
                              "autofix_turns": 0, "agent": args.agent, "ending": None,
                              "said": None, "gate_warnings": None}
    model_endpoints: dict[str, dict[str, str]] = {}
    with contextlib.ExitStack() as stack:
        if args.agent != "script":
            if args.agent_script:
                raise SystemExit("hangar demo: --agent-script is for the script agent; leave "
                                 f"it out with --agent {args.agent}")
            if args.provider == "local":
                agent_cli(args.agent)
            model = stack.enter_context(scripted_model(api_key=DEMO_KEY))
            credential = DEMO_CREDENTIALS[args.agent]
            os.environ[credential] = DEMO_KEY  # hangar's side only; never in the sandbox
            model_endpoints = {credential: {"base_url": model.url}}
            say(f"hangar demo: the real {args.agent} CLI, with a scripted model at {model.url}")
        ok = _run_world(args, workdir, port, say, result, model_endpoints)
        if args.agent != "script":
            result["model_requests"] = len(model.model.requests)
    if args.json:
        print(json.dumps(result))
    else:
        model = (f", {result['model_requests']} model request(s) through hangar's gateway"
                 if "model_requests" in result else "")
        if result["pr"] is None and result["said"]:
            print(f"hangar demo: FAILED — {result['said']} ({result['ending']})")
        else:
            print(f"hangar demo: {'ok' if ok else 'FAILED'} — PR #{result['pr']}, "
                  f"verify {result['verify']}, landed {result['landed']}{model}")
    return 0 if ok else 1


def _run_world(args: argparse.Namespace, workdir: Path, port: int, say: Any,
               result: dict[str, Any], model_endpoints: dict[str, dict[str, str]]) -> bool:
    from app import logs
    from app.service import ServiceThread
    from app.settings import Settings
    from fakehub.testing import running_fakehub

    with running_fakehub(workdir / "fakehub") as hub:
        app = hub.create_app(name="hangar", webhook_url=f"http://127.0.0.1:{port}/webhook")
        public_url = f"http://127.0.0.1:{port}"
        hub.set_callback_urls(app.id, f"{public_url}/login/github/callback")  # sign-in
        maintainer = hub.create_user("mona")
        reviewer = hub.create_user("hubot-reviewer")
        hub.create_user("demo")
        repo = "demo/calculator"
        hub.create_repo("demo", "calculator", repo_files(args.repo))
        hub.grant(repo, maintainer.login, "write")
        hub.grant(repo, reviewer.login, "write")
        if args.ci:
            hub.set_ci(repo, args.ci)
        hub.install(app.id, "demo", [repo])
        # The gate the README sells: a ruleset on the default branch that asks for one
        # approval of the last push and hangar / verify from hangar's App (and CI's check).
        hub.protect(repo, approvals=1, last_push=True,
                    checks=("hangar / verify", *(("ci / test",) if args.ci else ())),
                    integration_ids={"hangar / verify": app.id})
        settings = Settings(
            app_id=app.id, private_key_file=app.private_key_path,
            webhook_secret=app.webhook_secret, data_dir=workdir / "hangar",
            github_url=hub.api_url, port=port, envs_dir=write_envs(workdir, args),
            poll_interval_seconds=5, log_level="WARNING",
            # The local stand-in enforces GitHub's write limits itself: no need to space.
            github_write_spacing_seconds=0, model_endpoints=model_endpoints,
            # A demo is watched step by step: its status comment follows every stage.
            status_edit_interval_seconds=2,
            # People sign in to the job and fleet pages through fakehub's OAuth.
            public_url=public_url, client_id=app.client_id, client_secret=app.client_secret,
        )
        say(f"hangar demo: fakehub at {hub.base_url}, hangar at http://127.0.0.1:{port}")
        # hangar's own log setup, before anything else (the MCP library) sets up its own
        # at INFO: the demo's terminal shows the timeline, and only warnings besides.
        logs.configure(settings.log_level)
        with ServiceThread(settings) as service:
            timeline = Timeline(quiet=args.json)
            issue = hub.create_issue(repo, "add() gives the wrong answer",
                                     "`add(2, 3)` returns -1; test_calc.py fails.", as_user="mona")
            result["issue"] = issue
            comment = hub.comment(repo, issue, f"/hangar {args.prompt}", as_user="mona")
            timeline.once("comment", f"@mona commented `/hangar {args.prompt}` on #{issue}")
            ok = watch(hub, repo, issue, comment, timeline, result, args, reviewer.login,
                       ending=lambda: first_turn_ending(service, repo, issue))
            result["timeline"] = timeline.entries
            if args.keep:
                say(f"fakehub: {hub.base_url}  hangar: {public_url}  data: {workdir}\n"
                    f"The fleet page, signed in as @mona: {public_url}/login/github?login=mona"
                    "\nCtrl-C to stop.")
                try:
                    while True:
                        time.sleep(3600)
                except KeyboardInterrupt:
                    pass
    return ok


def first_turn_ending(service: Any, repo: str, issue: int) -> dict | None:
    """How the issue's first turn ended, from hangar's own rows: {"code", …} or None."""
    from app.models import Job, Run
    from app.web.keys import ENGINE

    engine = service.app[ENGINE]
    jobs = engine.store.find("job", Job, thread__repo=repo, thread__number=issue)
    for job in jobs:
        for run in engine.store.find("run", Run, job_id=job.id):
            if run.turn == 1 and run.finished and run.ending:
                return run.ending
    return None


def watch(hub: Any, repo: str, issue: int, comment: int, timeline: Timeline,
          result: dict[str, Any], args: argparse.Namespace, reviewer: str,
          ending: Any = lambda: None) -> bool:
    """Follow what a person would see on GitHub until the PR lands (or fails)."""
    from app.render import endings

    deadline = time.monotonic() + args.timeout
    approved_sha = None
    first_head = None
    while time.monotonic() < deadline:
        ended = ending()
        if ended is not None and result["ending"] is None:
            result["ending"] = ended["code"]
        if any(r["content"] == "eyes" for r in hub.reactions(repo, comment)):
            timeline.once("eyes", "hangar reacted 👀")
        for c in hub.issue_comments(repo, issue):
            if "<!-- hangar:status" in c["body"]:
                timeline.once("status", "hangar posted its status comment")
                for turn, label in autofix_turns(c["body"]):
                    result["autofix_turns"] = max(result["autofix_turns"], turn)
                    timeline.once(f"autofix-{turn}", f"hangar started {label}")
                stopped = AUTOFIX_STOPPED.search(c["body"])
                if stopped and ("used its" in stopped[1] or "same way" in stopped[1]):
                    timeline.once("autofix-stopped", f"hangar stopped auto-fixing: {stopped[1]}")
                    return False
                if "the agent is working" in c["body"]:
                    timeline.once("running", "the agent is running in a sandbox")
                if ended is not None and ended["code"] != "changes" and not prs_of(hub, repo):
                    cause = endings.ending_cause(endings.as_why(ended))
                    if cause in c["body"]:  # what a person reads on the issue by now
                        result["said"] = cause
                        timeline.once("failed", "hangar reports: " + _now_line(c["body"]))
                        return False
        prs = prs_of(hub, repo)
        if not prs:
            time.sleep(0.1)
            continue
        pr = prs[0]
        result.update(pr=pr["number"], branch=pr["head"]["ref"], head_sha=pr["head"]["sha"])
        timeline.once("pr", f"hangar opened PR #{pr['number']} from {pr['head']['ref']}")
        checks = {c["name"]: c for c in hub.check_runs(repo, pr["head"]["sha"])}
        verify = checks.get("hangar / verify")
        if verify and verify["status"] == "completed":
            passed = verify["conclusion"] == "success"
            result["verify"] = "passed" if passed else "failed"
            timeline.once(f"verify-{pr['head']['sha']}",
                          f"hangar / verify: {verify['conclusion']} on {pr['head']['sha'][:7]}")
            if not passed and not args.ci:
                return False
        if pr.get("merged"):
            land = checks.get("hangar / land")
            if land is None or land["status"] != "completed":
                time.sleep(0.1)  # hangar / land says how it landed just after the merge
                continue
            said = (land.get("output") or {}).get("summary") or ""
            result.update(landed=True, merge_sha=pr.get("merge_commit_sha"),
                          gate_warnings=said.count("⚠️"))
            timeline.once("landed", f"hangar landed PR #{pr['number']} "
                                    f"as {str(pr.get('merge_commit_sha'))[:7]}")
            return True
        if args.no_land and result["verify"] == "passed":
            return True
        first_head = first_head or pr["head"]["sha"]
        verified_here = bool(verify and verify["conclusion"] == "success")
        if verified_here and approved_sha != pr["head"]["sha"]:
            ci = checks.get("ci / test")
            # A head that is not the PR's first is an auto-fix turn's: the reviewer reads
            # the status comment say so before approving it.
            explained = pr["head"]["sha"] == first_head or result["autofix_turns"] > 0
            if not args.ci or (ci and ci["conclusion"] == "success" and explained):
                hub.review(repo, pr["number"], as_user=reviewer, event="APPROVE",
                           commit_id=pr["head"]["sha"])
                approved_sha = pr["head"]["sha"]
                timeline.once(f"approve-{approved_sha}",
                              f"@{reviewer} approved PR #{pr['number']} at {approved_sha[:7]}")
        time.sleep(0.1)
    timeline.once("timeout", f"gave up after {args.timeout:g}s")
    return False


def prs_of(hub: Any, repo: str) -> list[dict]:
    return [p for p in hub.list_prs(repo) if p["head"]["ref"].startswith("hangar/")]


def autofix_turns(status_body: str) -> list[tuple[int, str]]:
    """The auto-fix turns a status comment lists: (number, "auto-fix turn 1 of 2: …")."""
    found = []
    for line in status_body.replace("\u200b", "").splitlines():
        match = AUTOFIX_LINE.match(line)
        if match:
            found.append((int(match["turn"]), match["label"]))
    return found


def _now_line(body: str) -> str:
    for line in body.splitlines():
        if line.startswith("**Now:**"):
            return line.removeprefix("**Now:**").strip()
    return "see the status comment"


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="hangar demo")
    add_arguments(parser)
    sys.exit(run_demo(parser.parse_args()))
