"""What the land worker's script did, read from its exit code and its lines: a rebase's
own failure is the branch's to fix by hand, but a clone or a push that never reached
GitHub (hangar's gate down, no token, a 5xx) is hangar's trouble, tried again, and never
pinned on the branch."""

from __future__ import annotations

import pytest

from app.landing import worker

GATE_DOWN = ("fatal: unable to access 'http://10.88.0.1:8431/git/sb-1/acme/widgets.git/': "
             "The requested URL returned error: 503\n")
GITHUB_RULE = ("remote: error: GH013: Repository rule violations found for "
               "refs/heads/hangar/1-ab.\nremote: - Cannot force-push to this branch\n"
               " ! [remote rejected] HEAD -> hangar/1-ab (push declined due to repository "
               "rule violations)\n")
GATE_RULE = (" ! [remote rejected] HEAD -> hangar/1-ab (hangar: this sandbox may only replace "
             "hangar/1-ab at 1a2b3c4)\n")


@pytest.mark.parametrize(("exit_code", "output"), [
    (10, GATE_DOWN),  # the clone
    (11, GATE_DOWN),  # the push, never reaching GitHub
    (11, GATE_RULE),  # the gate's own rule: hangar's lease, not the branch
])
def test_a_clone_or_push_that_never_reached_github_is_hangars_and_tried_again(
        exit_code: int, output: str):
    with pytest.raises(worker.Unreached):
        worker.read_outcome(exit_code, output)


def test_a_rebased_push_github_refuses_is_the_branchs_to_resolve():
    outcome = worker.read_outcome(11, GITHUB_RULE)
    assert isinstance(outcome, worker.Failed) and "push declined" in outcome.said


@pytest.mark.parametrize(("exit_code", "output", "kind"), [
    (0, "hangar-land: pushed " + "c" * 40 + "\n", worker.Rebased),
    (3, "hangar-land: moved\n", worker.HeadMoved),
    (4, "hangar-land: conflicts\ncalc.py\n", worker.Conflicts),
    (1, "error: could not apply 1a2b3c4... add()\n", worker.Failed),
])
def test_the_scripts_own_outcomes(exit_code: int, output: str, kind: type):
    assert isinstance(worker.read_outcome(exit_code, output), kind)
