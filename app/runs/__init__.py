"""Jobs and runs: a `/hangar` command's job, the agent turns it runs in sandboxes, their
push, pull request and verification, and the one status comment that says where they are.

A run's life is queued → running → (exited | lost | timed_out | cancelled), then the
result pipeline publish → collect → verify → done; each step reads its row fresh and
records only what it changed, so a step cut short by a crash is taken again.

Which file holds what:
- steps.py: the run's step (dispatch by state), a failed step's backoff, and collect
  (the pull request opened or updated, the `hangar / agent` check run);
- queue.py: who runs next (per model credential), and a credential's pause near its limit;
- agent.py: the agent's turn: its sandbox, prompt, model route and session; watching it;
- publishing.py: hangar pushes the branch itself; what GitHub refuses is held, not lost;
- verify.py: the verify command on the exact head, in a clean sandbox;
- sandbox.py: what the steps share: a run's sandbox checked out, commands that must
  succeed, check runs;
- jobs.py: the job's step, its status comment, and reaping orphan sandboxes at start;
- commands.py: run, cancel, verify, retry, status.

Code outside this folder uses the concern through the names below.
"""

from app.runs.agent import agent_stopped, start_agent, watch_agent
from app.runs.commands import ACTIONS
from app.runs.jobs import advance_job, reap_orphans, refresh_status, wake_job
from app.runs.publishing import push_refusal
from app.runs.queue import credential_key, queue_positions, wake_queued
from app.runs.sandbox import must_each, prepare_sandbox
from app.runs.steps import advance_run, collect, note_failure
from app.runs.verify import VerifyTrouble, verify

__all__ = [
    "ACTIONS",
    "VerifyTrouble",
    "advance_job",
    "advance_run",
    "agent_stopped",
    "collect",
    "credential_key",
    "must_each",
    "note_failure",
    "prepare_sandbox",
    "push_refusal",
    "queue_positions",
    "reap_orphans",
    "refresh_status",
    "start_agent",
    "verify",
    "wake_job",
    "wake_queued",
    "watch_agent",
]
