"""fakehub's CI runs a PR's command (code an agent may have written) in a sandbox: it
reads its checkout, and no host file, App key or network."""

from __future__ import annotations

import shutil
import socket
import time

import pytest

pytestmark = [
    pytest.mark.bwrap,
    pytest.mark.skipif(not shutil.which("bwrap"), reason="bubblewrap is not installed"),
]


def _wait_ci(hub, repo: str, sha: str, timeout: float = 60.0) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        runs = [r for r in hub.check_runs(repo, sha) if r["name"] == "ci / test"]
        if runs and runs[-1]["status"] == "completed":
            return runs[-1]
        time.sleep(0.05)
    raise AssertionError("CI did not complete")


def test_ci_code_reads_its_checkout_and_no_host_file(fakehub, tmp_path):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]
    secret = tmp_path / "host-secret.txt"
    secret.write_text("host only\n")
    app = fakehub.create_app("hangar-under-test", webhook_url=None, events=[])
    fakehub.create_user("dev")
    fakehub.create_repo("dev", "widgets", {"widgets.py": "def answer():\n    return 41\n"})
    fakehub.install(app.id, "dev")
    command = (f"cat widgets.py; cat {secret}; cat {app.private_key_path}; "
               "ls ~ /root 2>&1; python3 -c \"import socket; "
               f"socket.create_connection(('127.0.0.1', {port}), timeout=2)\"; echo end")
    fakehub.set_ci("dev/widgets", command)
    sha = fakehub.push_files("dev/widgets", "change", {"widgets.py": "def answer():\n"
                                                       "    return 42\n"}, "answer", as_user="dev")
    fakehub.open_pr("dev/widgets", "change", "Answer 42", as_user="dev")
    run = _wait_ci(fakehub, "dev/widgets", sha)
    text = run["output"]["text"]
    assert "return 42" in text and "end" in text, text  # the checkout is there
    assert "host only" not in text, text
    assert "PRIVATE KEY" not in text, text
    assert str(secret) in text and "No such file" in text, text
    assert "ConnectionRefusedError" in text, text  # a service on the host's loopback
    listener.close()
