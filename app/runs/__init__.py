"""Jobs and runs: a `/hangar` command's job, the agent turns it runs in sandboxes, their
push, pull request and verification, and the one status comment that says where they are.

A run's life is queued → running → (exited | lost | timed_out | cancelled), then the
result pipeline publish → collect → verify → done; each step reads its row fresh and
records only what it changed, so a step cut short by a crash is taken again.

Which file holds what:
- steps.py: the run's step (dispatch by state), a failed step's backoff, collect (the
  pull request opened or updated, the `hangar / agent` check run), a turn started again;
- ending.py: how a run ended, as a reason code from its facts (pure rules);
- queue.py: who runs next (per model credential), and a credential's pause at its usage
  threshold; pause.py: the pause's pure rule; costs.py: a turn's own cost and tokens;
- agent.py: the agent's turn: its sandbox, prompt, model route and session; watching it;
- review_thread.py: the review threads a turn answers (file, lines, hunk, who said what);
- thread.py: a first turn's issue thread (every post, who may write, untrusted text
  fenced, bounded) and its attached images, downloaded by hangar into the sandbox;
- publishing.py: hangar pushes the branch itself; what GitHub refuses is held, not lost;
- verify.py: the verify command on the exact head, in a clean sandbox;
- sandbox.py: what the steps share: a run's sandbox checked out, commands that must
  succeed, check runs;
- jobs.py: the job's step, its status comment, and reaping orphan sandboxes at start;
- commands.py: run, cancel, verify, retry, status, resume;
- plugin.py: `register(engine)`: the run and job rows, commands, start-up work, a hook;
- context.py: `RunsContext`: what the steps and helpers use of the engine, and nothing
  more (the commands take the whole StepContext).

This file is the concern's face: code outside the folder imports from here only (the
import-graph test holds it to that). It names `register` (plugin.py: what jobs and runs
ask of the engine) and what the rest of hangar and its tests read.
"""

from app.runs.agent import agent_stopped, model_facts, start_agent
from app.runs.ending import Ending, Restart, account
from app.runs.jobs import advance_job, ask_status_edit, reap_orphans
from app.runs.pause import FANOUT_WARN_PCT, PauseWhy, highest
from app.runs.plugin import register
from app.runs.publishing import push_refusal, refused_by_hangar
from app.runs.queue import (
    Wait,
    credential_key,
    model_pause,
    model_pauses,
    model_readings,
    queue_positions,
    usage_report,
)
from app.runs.review_thread import REVIEW_THREAD_MARKER, is_hangar_reply
from app.runs.sandbox import must_each
from app.runs.steps import collect
from app.runs.verify import VerifyTrouble, verify

__all__ = [
    "FANOUT_WARN_PCT",
    "REVIEW_THREAD_MARKER",
    "Ending",
    "PauseWhy",
    "Restart",
    "VerifyTrouble",
    "Wait",
    "account",
    "advance_job",
    "agent_stopped",
    "ask_status_edit",
    "collect",
    "credential_key",
    "highest",
    "is_hangar_reply",
    "model_facts",
    "model_pause",
    "model_pauses",
    "model_readings",
    "must_each",
    "push_refusal",
    "queue_positions",
    "reap_orphans",
    "refused_by_hangar",
    "register",
    "start_agent",
    "usage_report",
    "verify",
]
