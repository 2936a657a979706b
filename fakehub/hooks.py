"""The git hooks fakehub installs in each bare repository: they ask the hub (over its
HTTP front door, fakehub/git_http.py) whether a push may go, and report what moved."""

from __future__ import annotations

import sys
from pathlib import Path

HOOK_SCRIPT = '''#!{python}
# Installed by fakehub: asks the hub whether a push may go, and reports what moved.
import json, os, subprocess, sys, urllib.request
ZERO = "0" * 40
mode = os.path.basename(sys.argv[0])
url = os.environ.get("FAKEHUB_HOOK_URL")
if not url:
    sys.exit(0)  # not a push through fakehub's HTTP front door
commands = []
for line in sys.stdin.read().splitlines():
    if not line.strip():
        continue
    old, new, ref = line.split(" ", 2)
    ff = True
    files = []
    if mode == "pre-receive" and old != ZERO and new != ZERO:
        ff = subprocess.run(["git", "merge-base", "--is-ancestor", old, new]).returncode == 0
    command = {{"old": old, "new": new, "ref": ref, "fast_forward": ff, "files": files}}
    if mode == "pre-receive" and new != ZERO:
        # Only this process sees the pushed objects (git keeps them in quarantine).
        spec = ["diff", "--name-only", old, new] if old != ZERO else [
            "log", "--format=", "--name-only", new, "--not", "--all"]
        listed = subprocess.run(["git", *spec], capture_output=True, text=True).stdout
        files.extend(sorted({{f for f in listed.splitlines() if f}}))
    if mode == "pre-receive" and new != ZERO and os.environ.get("FAKEHUB_SCAN_SECRETS"):
        # What this push adds, for secret scanning's push protection (capped like GitHub's).
        log = subprocess.run(["git", "log", "-p", "--no-color", "--format=commit %H", new,
                              "--not", "--all"], capture_output=True)
        command["patch"] = log.stdout[:4 << 20].decode("utf-8", "replace")
    commands.append(command)
body = json.dumps({{"repo": os.environ["FAKEHUB_REPO"], "actor": os.environ["FAKEHUB_ACTOR"],
                   "commands": commands}}).encode()
request = urllib.request.Request(
    url + "/" + mode, data=body,
    headers={{"Content-Type": "application/json",
             "X-Fakehub-Hook-Secret": os.environ.get("FAKEHUB_HOOK_SECRET", "")}})
with urllib.request.urlopen(request, timeout=60) as response:
    answer = json.load(response)
for line in answer.get("messages", []):
    sys.stderr.write(line + "\\n")
sys.exit(0 if answer.get("ok", True) else 1)
'''


def install_hooks(repo_path: Path) -> None:
    hooks = repo_path / "hooks"
    hooks.mkdir(exist_ok=True)
    script = HOOK_SCRIPT.format(python=sys.executable)
    for name in ("pre-receive", "post-receive"):
        path = hooks / name
        path.write_text(script)
        path.chmod(0o755)
