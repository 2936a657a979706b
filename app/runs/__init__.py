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
- commands.py: run, cancel, verify, retry, status, resume.

This file is the concern's face: code outside the folder imports from here only (the
import-graph test holds it to that). It names every name the single module app/runs.py
offered before the folder (but the ranking step, fan-out's now: app.fanout), so imports of
`app.runs` did not have to change.
"""

from app.runs.agent import (
    AGENT_LOG,
    AGENT_PREAMBLE,
    PROVIDER_CALL_TIMEOUT_S,
    SESSION_ARCHIVE,
    SESSION_MAX_BYTES,
    agent_stopped,
    build_prompt,
    checkout_for,
    model_facts,
    model_route,
    previous_session,
    previous_turn,
    restore_session,
    review_context,
    save_session,
    session_archive,
    start_agent,
    watch_agent,
)
from app.runs.commands import (
    ACTIONS,
)
from app.runs.ending import (
    Ending,
    Restart,
    account,
    retryable,
)
from app.runs.jobs import (
    advance_job,
    reap_orphans,
    refresh_status,
    wake_job,
)
from app.runs.pause import FANOUT_WARN_PCT, Pause, PauseWhy, highest
from app.runs.publishing import (
    publish,
    push_refusal,
)
from app.runs.queue import (
    Wait,
    credential_key,
    credential_pause,
    model_pause,
    model_pauses,
    model_readings,
    queue_positions,
    resume_model,
    slot_free,
    usage_report,
    usage_windows,
    wake_queued,
)
from app.runs.review_thread import REVIEW_THREAD_MARKER, is_hangar_reply
from app.runs.sandbox import (
    must_each,
    prepare_sandbox,
)
from app.runs.steps import (
    advance_run,
    agent_conclusion,
    collect,
    find_or_open_pr,
    note_failure,
    start_again,
)
from app.runs.verify import (
    VERIFY_CHECK,
    VerifyTrouble,
    trouble,
    verify,
    verify_actions,
    verify_conclusion,
    verify_in_clean_sandbox,
)

__all__ = [
    "ACTIONS",
    "AGENT_LOG",
    "AGENT_PREAMBLE",
    "FANOUT_WARN_PCT",
    "PROVIDER_CALL_TIMEOUT_S",
    "REVIEW_THREAD_MARKER",
    "SESSION_ARCHIVE",
    "SESSION_MAX_BYTES",
    "VERIFY_CHECK",
    "Ending",
    "Pause",
    "PauseWhy",
    "Restart",
    "VerifyTrouble",
    "Wait",
    "account",
    "advance_job",
    "advance_run",
    "agent_conclusion",
    "agent_stopped",
    "build_prompt",
    "checkout_for",
    "collect",
    "credential_key",
    "credential_pause",
    "find_or_open_pr",
    "highest",
    "is_hangar_reply",
    "model_facts",
    "model_pause",
    "model_pauses",
    "model_readings",
    "model_route",
    "must_each",
    "note_failure",
    "prepare_sandbox",
    "previous_session",
    "previous_turn",
    "publish",
    "push_refusal",
    "queue_positions",
    "reap_orphans",
    "refresh_status",
    "restore_session",
    "resume_model",
    "retryable",
    "review_context",
    "save_session",
    "session_archive",
    "slot_free",
    "start_again",
    "start_agent",
    "trouble",
    "usage_report",
    "usage_windows",
    "verify",
    "verify_actions",
    "verify_conclusion",
    "verify_in_clean_sandbox",
    "wake_job",
    "wake_queued",
    "watch_agent",
]
