"""The git hooks fakehub installs in each bare repository: they ask the hub (over its
HTTP front door, fakehub/git_http.py) whether a push may go, and report what moved."""

from __future__ import annotations

import sys
from pathlib import Path

HOOK_SCRIPT = '''#!{python} -S
# Installed by fakehub: asks the hub whether a push may go, and reports what moved.
# Every push runs it twice, so it imports little (no site, no subprocess, no urllib: they
# cost three times the rest of it in CPU) and speaks HTTP/1.1 to the hub itself.
import json, os, socket, sys
ZERO = "0" * 40


def git(*args):
    """(exit code, stdout) of one git command, in this repository."""
    read, write = os.pipe()
    pid = os.posix_spawnp("git", ["git", *args], os.environ,
                          file_actions=[(os.POSIX_SPAWN_DUP2, write, 1),
                                        (os.POSIX_SPAWN_CLOSE, read)])
    os.close(write)
    chunks = []
    while chunk := os.read(read, 1 << 16):
        chunks.append(chunk)
    os.close(read)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), b"".join(chunks)


def post(url, body, secret):
    """The hub's JSON answer to a POST of `body` (a plain http:// URL)."""
    rest = url.removeprefix("http://")
    if rest == url:
        sys.exit(f"fakehub hook: cannot reach {{url}}: the hub speaks plain HTTP")
    address, _, path = rest.partition("/")
    host, _, port = address.rpartition(":")
    with socket.create_connection((host.strip("[]"), int(port)), timeout=60) as conn:
        conn.sendall((f"POST /{{path}} HTTP/1.1\\r\\nHost: {{address}}\\r\\n"
                      "Content-Type: application/json\\r\\n"
                      f"X-Fakehub-Hook-Secret: {{secret}}\\r\\n"
                      f"Content-Length: {{len(body)}}\\r\\nConnection: close\\r\\n\\r\\n"
                      ).encode() + body)
        chunks = []
        while chunk := conn.recv(1 << 16):
            chunks.append(chunk)
    head, _, payload = b"".join(chunks).partition(b"\\r\\n\\r\\n")
    lines = head.decode("latin-1").split("\\r\\n")
    status = int(lines[0].split()[1])
    headers = {{k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in lines[1:])}}
    if headers.get("transfer-encoding", "").lower() == "chunked":
        body, payload = payload, b""
        while body:
            size, _, body = body.partition(b"\\r\\n")
            length = int(size.split(b";")[0], 16)
            if not length:
                break
            payload, body = payload + body[:length], body[length + 2:]
    if status != 200 and not payload.startswith(b"{{"):
        sys.exit(f"fakehub hook: the hub answered {{status}}")
    return json.loads(payload)


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
        ff = git("merge-base", "--is-ancestor", old, new)[0] == 0
    command = {{"old": old, "new": new, "ref": ref, "fast_forward": ff, "files": files}}
    if mode == "pre-receive" and new != ZERO:
        # Only this process sees the pushed objects (git keeps them in quarantine).
        spec = ["diff", "--name-only", old, new] if old != ZERO else [
            "log", "--format=", "--name-only", new, "--not", "--all"]
        listed = git(*spec)[1].decode(errors="surrogateescape")
        files.extend(sorted({{f for f in listed.splitlines() if f}}))
    if mode == "pre-receive" and new != ZERO and os.environ.get("FAKEHUB_SCAN_SECRETS"):
        # What this push adds, for secret scanning's push protection (capped like GitHub's).
        log = git("log", "-p", "--no-color", "--format=commit %H", new, "--not", "--all")[1]
        command["patch"] = log[:4 << 20].decode("utf-8", "replace")
    commands.append(command)
body = json.dumps({{"repo": os.environ["FAKEHUB_REPO"], "actor": os.environ["FAKEHUB_ACTOR"],
                   "commands": commands}}).encode()
answer = post(url + "/" + mode, body, os.environ.get("FAKEHUB_HOOK_SECRET", ""))
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
