"""Which failed pushes are GitHub saying no, and which are worth trying again."""

from __future__ import annotations

import pytest

from app.runs import push_refusal
from app.runs.publishing import diverged, refused_by_hangar

PUSH_PROTECTION = """\
remote: error: GH013: Repository rule violations found for refs/heads/hangar/1-ab12.
remote:
remote: - GITHUB PUSH PROTECTION
remote:   —————————————————————————————————————————
remote:     Resolve the following violations before pushing again
remote:
remote:     - Push cannot contain secrets
To http://127.0.0.1:8787/git/acme/widgets.git
 ! [remote rejected] HEAD -> hangar/1-ab12 (push declined due to repository rule violations)
error: failed to push some refs to 'http://127.0.0.1:8787/git/acme/widgets.git'
"""
LARGE_FILE = """\
remote: error: File big.bin is 120.00 MB; this exceeds GitHub's file size limit of 100.00 MB
remote: error: GH001: Large files detected. You may want to try Git Large File Storage.
 ! [remote rejected] HEAD -> hangar/1-ab12 (pre-receive hook declined)
"""
PROXY_502 = """\
To http://127.0.0.1:8787/git/acme/widgets.git
 ! [remote rejected] HEAD -> hangar/1-ab12 (hangar: GitHub answered HTTP 502; try again)
error: failed to push some refs
"""
PROXY_CUT = " ! [remote rejected] HEAD -> x (hangar: the push was cut off; push again)\n"
CURL_502 = ("error: RPC failed; HTTP 502 curl 22 The requested URL returned error: 502\n"
            "fatal: the remote end hung up unexpectedly\n")
RESET = "fatal: unable to access 'http://127.0.0.1/': Connection reset by peer\n"
FORBIDDEN = "fatal: unable to access 'http://x/': The requested URL returned error: 403\n"
NON_FF = " ! [rejected]        HEAD -> hangar/1-ab12 (fetch first)\n"


@pytest.mark.parametrize(("output", "refused", "says"), [
    (PUSH_PROTECTION, True, "GH013: Repository rule violations"),
    (LARGE_FILE, True, "GH001: Large files detected"),
    (NON_FF, True, "(fetch first)"),
    (FORBIDDEN, True, "403"),
    (PROXY_502, False, None),
    (PROXY_CUT, False, None),
    (CURL_502, False, None),
    (RESET, False, None),
    ("", False, None),
])
def test_push_refusal(output: str, refused: bool, says: str | None) -> None:
    words = push_refusal(output)
    assert (words is not None) == refused
    if says:
        assert says in words
        assert "remote:" not in words  # GitHub's words, without git's prefix


def test_push_protection_keeps_githubs_own_lines_and_the_rejected_ref() -> None:
    words = push_refusal(PUSH_PROTECTION)
    assert "Push cannot contain secrets" in words
    assert "push declined due to repository rule violations" in words
    assert "failed to push some refs" not in words


GATE_FORCE = (" ! [remote rejected] HEAD -> hangar/1-ab12 (hangar: force-push is off for this "
              "sandbox and hangar/1-ab12 is at 1a2b3c4 upstream; push on top of it)\n"
              "error: failed to push some refs to 'http://127.0.0.1:8787/git/acme/widgets.git'\n")
GATE_SIZE = ("remote: hangar: this push is larger than 200 MiB, the limit for sandbox pushes; "
             "keep large files out of the repository\n"
             " ! [remote rejected] HEAD -> hangar/1-ab12 (hangar: this push is larger than "
             "200 MiB, the limit for sandbox pushes; keep large files out of the repository)\n")


@pytest.mark.parametrize(("output", "hangars"), [
    (GATE_FORCE, True),
    (GATE_SIZE, True),
    (PUSH_PROTECTION, False),
    (LARGE_FILE, False),
    (NON_FF, False),
    (FORBIDDEN, False),
])
def test_a_refusal_by_hangars_own_gate_is_told_from_githubs(output: str, hangars: bool):
    """The sandbox gate's own refusals (its words start "hangar: ") are a rule of hangar's,
    which a retry meets again; GitHub's are GitHub's."""
    words = push_refusal(output)
    assert words is not None and refused_by_hangar(words) == hangars


REWRITTEN = " ! [rejected]        HEAD -> hangar/1-ab12 (non-fast-forward)\n"


@pytest.mark.parametrize(("output", "moved"), [
    (NON_FF, True),  # someone pushed to the branch meanwhile
    (REWRITTEN, True),  # the agent rewrote the branch's history
    (PUSH_PROTECTION, False),
    (GATE_FORCE, False),
])
def test_a_branch_that_moved_on_github_is_told_from_a_rule(output: str, moved: bool):
    """git declines a push that would drop commits the branch on GitHub has: no rule
    refused it, and a retry or a rule change does not help; hangar never force-pushes."""
    assert diverged(push_refusal(output)) == moved
