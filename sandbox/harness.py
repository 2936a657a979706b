"""Agent harnesses: how to start an agent with a prompt, and how to read what it printed.

`Harness.command(prompt, turn=...)` gives the argv and extra environment for
`Provider.start`; `Harness.parse(log_text)` turns the agent's log into `AgentFacts`.
Parsing is best effort and never raises: a field it cannot find stays None and a
warning says why. Everything in AgentFacts is the agent's own account; the summary in
particular is a claim, shown as "Agent says (unverified)" and never used for decisions.

The model credential is not part of `command`'s output: the engine adds
`{harness.credential_env: <secret>}` to the env of the agent's `start` only, never to
install or verify commands.
"""

from __future__ import annotations

import abc
import json
from typing import Any

from pydantic import BaseModel, Field

from sandbox.envspec import EnvSpec
from sandbox.provider import HANGAR_DIR

AGENT_SCRIPT_PATH = f"{HANGAR_DIR}/agent.sh"
SCRIPT_SUMMARY_LINES = 20
SUMMARY_MAX_CHARS = 8000


class AgentFacts(BaseModel):
    summary: str | None = None
    session_id: str | None = None
    turns: int | None = None
    cost_usd: float | None = None
    usage: dict[str, Any] = Field(default_factory=dict)
    rate_limit: dict[str, Any] | None = None
    warnings: list[str] = Field(default_factory=list)


class Harness(abc.ABC):
    name: str
    # The environment variable that carries the model credential to the agent, if any.
    credential_env: str | None = None

    @abc.abstractmethod
    def command(
        self, prompt: str, *, turn: int, session_id: str | None = None
    ) -> tuple[list[str], dict[str, str]]:
        """(argv, extra env) for the agent's process. turn counts from 1; a later turn may
        resume the session of an earlier one."""

    @abc.abstractmethod
    def parse(self, log_text: str) -> AgentFacts:
        """What the agent reported about itself. Never raises."""

    def files(self) -> dict[str, bytes]:
        """Files to copy into the sandbox before `start` (absolute paths)."""
        return {}


class ScriptHarness(Harness):
    """Runs a shell script: tests, the demo, and teams that drive their own tools."""

    name = "script"

    def __init__(self, script: str) -> None:
        if not script.strip():
            raise ValueError("the script harness needs a script (agent_script in the spec)")
        self.script = script

    def command(
        self, prompt: str, *, turn: int, session_id: str | None = None
    ) -> tuple[list[str], dict[str, str]]:
        return ["bash", AGENT_SCRIPT_PATH], {"HANGAR_PROMPT": prompt, "HANGAR_TURN": str(turn)}

    def files(self) -> dict[str, bytes]:
        return {AGENT_SCRIPT_PATH: self.script.encode()}

    def parse(self, log_text: str) -> AgentFacts:
        lines = log_text.rstrip("\n").splitlines()
        tail = "\n".join(lines[-SCRIPT_SUMMARY_LINES:]).strip()
        return AgentFacts(summary=tail[-SUMMARY_MAX_CHARS:] or None)


class _JsonLines:
    """Reads a JSONL log line by line, collecting warnings instead of raising."""

    def __init__(self, log_text: str, facts: AgentFacts) -> None:
        self.facts = facts
        self.unknown: dict[str, int] = {}
        self.skipped = 0
        lines = [line.strip() for line in log_text.splitlines()]
        self.lines = [line for line in lines if line]

    def events(self):
        last = len(self.lines) - 1
        for index, line in enumerate(self.lines):
            if not line.startswith("{"):
                self.skipped += 1  # stderr noise mixed into the log
                continue
            try:
                event = json.loads(line)
            except ValueError:
                if index == last:
                    self.facts.warnings.append(
                        "the last line of the agent's output is cut off (the process was "
                        "stopped or crashed mid-write); it was ignored"
                    )
                else:
                    self.skipped += 1
                continue
            if isinstance(event, dict):
                yield event

    def unknown_type(self, kind: Any) -> None:
        key = str(kind)
        self.unknown[key] = self.unknown.get(key, 0) + 1

    def finish(self) -> None:
        if self.skipped:
            self.facts.warnings.append(
                f"{self.skipped} line(s) of the agent's output were not JSON events; ignored"
            )
        if self.unknown:
            kinds = ", ".join(sorted(self.unknown))
            self.facts.warnings.append(f"ignored events of unknown type: {kinds}")


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _text_of(message: Any) -> str | None:
    """The text blocks of an Anthropic-style message, joined."""
    if not isinstance(message, dict):
        return None
    content = message.get("content")
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return None
    texts = [
        block.get("text", "")
        for block in content
        if isinstance(block, dict) and block.get("type") == "text"
    ]
    joined = "\n".join(t for t in texts if isinstance(t, str) and t)
    return joined or None


class ClaudeHarness(Harness):
    """Claude Code in print mode with the stream-json event log.

    Events read: `system`/`init` (session_id), `assistant` (text, counted as a fallback
    for turns), `rate_limit_event` (`rate_limit_info`: status, resetsAt, rateLimitType...),
    and the final `result` (result, num_turns, total_cost_usd, usage, is_error, subtype).
    """

    name = "claude"

    def __init__(self, credential_env: str = "ANTHROPIC_API_KEY", model: str | None = None):
        self.credential_env = credential_env
        self.model = model

    def command(
        self, prompt: str, *, turn: int, session_id: str | None = None
    ) -> tuple[list[str], dict[str, str]]:
        argv = ["claude", "-p", "--output-format", "stream-json", "--verbose"]
        # The sandbox is the boundary: the agent may edit and run without asking.
        argv.append("--dangerously-skip-permissions")
        if self.model:
            argv += ["--model", self.model]
        if session_id and turn > 1:
            argv += ["--resume", session_id]
        # "--" so that a prompt starting with "-" is not read as an option.
        return [*argv, "--", prompt], {"IS_SANDBOX": "1"}

    def parse(self, log_text: str) -> AgentFacts:
        facts = AgentFacts()
        reader = _JsonLines(log_text, facts)
        last_text: str | None = None
        assistant_messages = 0
        result_seen = False
        for event in reader.events():
            kind = event.get("type")
            if isinstance(event.get("session_id"), str) and not facts.session_id:
                facts.session_id = event["session_id"]
            if kind == "system":
                if event.get("subtype") == "init" and isinstance(event.get("session_id"), str):
                    facts.session_id = event["session_id"]
            elif kind == "assistant":
                assistant_messages += 1
                last_text = _text_of(event.get("message")) or last_text
            elif kind == "user" or kind == "stream_event":
                pass
            elif kind == "rate_limit_event":
                info = event.get("rate_limit_info")
                facts.rate_limit = dict(info) if isinstance(info, dict) else {}
                status = facts.rate_limit.get("status")
                if status not in (None, "allowed"):
                    facts.warnings.append(f"model rate limit: {status}")
            elif kind == "result":
                result_seen = True
                if isinstance(event.get("session_id"), str):
                    facts.session_id = event["session_id"]
                if isinstance(event.get("result"), str):
                    facts.summary = event["result"][-SUMMARY_MAX_CHARS:]
                facts.turns = _int(event.get("num_turns"))
                facts.cost_usd = _number(event.get("total_cost_usd"))
                if isinstance(event.get("usage"), dict):
                    facts.usage = event["usage"]
                subtype = event.get("subtype")
                if event.get("is_error") or (subtype and subtype != "success"):
                    facts.warnings.append(f"the agent ended with an error ({subtype or 'error'})")
            else:
                reader.unknown_type(kind)
        reader.finish()
        if not result_seen:
            facts.warnings.append(
                "no final result event: the agent was stopped or crashed before it finished"
            )
            facts.summary = last_text[-SUMMARY_MAX_CHARS:] if last_text else None
            facts.turns = assistant_messages or None
        return facts


_RATE_LIMIT_WORDS = ("rate limit", "rate_limit", "usage limit", "429", "too many requests")


class CodexHarness(Harness):
    """Codex CLI `exec --json`: JSONL thread events.

    Events read: `thread.started` (thread_id), `turn.completed` (usage), `turn.failed` and
    `error` (message; rate-limit messages fill rate_limit), `item.completed` with an
    `agent_message` item (text: the last one is the summary). Codex reports no cost.
    """

    name = "codex"

    def __init__(self, credential_env: str = "OPENAI_API_KEY", model: str | None = None):
        self.credential_env = credential_env
        self.model = model

    def command(
        self, prompt: str, *, turn: int, session_id: str | None = None
    ) -> tuple[list[str], dict[str, str]]:
        argv = ["codex", "exec"]
        if session_id and turn > 1:
            argv += ["resume", session_id]
        # hangar's sandbox is the boundary; codex's own would need privileges it lacks.
        argv += ["--json", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox"]
        if self.model:
            argv += ["--model", self.model]
        return [*argv, "--", prompt], {}

    def parse(self, log_text: str) -> AgentFacts:
        facts = AgentFacts()
        reader = _JsonLines(log_text, facts)
        turns = 0
        completed = False
        for event in reader.events():
            kind = event.get("type")
            if kind == "thread.started":
                if isinstance(event.get("thread_id"), str):
                    facts.session_id = event["thread_id"]
            elif kind == "turn.started":
                turns += 1
            elif kind == "turn.completed":
                completed = True
                usage = event.get("usage")
                if isinstance(usage, dict):
                    facts.usage = usage
            elif kind in ("turn.failed", "error"):
                error = event.get("error") if kind == "turn.failed" else event
                message = error.get("message") if isinstance(error, dict) else None
                message = message if isinstance(message, str) else "unknown error"
                facts.warnings.append(f"codex reported an error: {message}")
                if any(word in message.lower() for word in _RATE_LIMIT_WORDS):
                    facts.rate_limit = {"status": "rejected", "message": message}
            elif kind == "item.completed":
                item = event.get("item")
                if isinstance(item, dict) and item.get("type") == "agent_message":
                    text = item.get("text")
                    if isinstance(text, str) and text:
                        facts.summary = text[-SUMMARY_MAX_CHARS:]
            elif kind in ("item.started", "item.updated", "item.plan.delta", "request_user_input"):
                pass
            else:
                reader.unknown_type(kind)
        reader.finish()
        facts.turns = turns or None
        if not completed:
            facts.warnings.append(
                "no turn.completed event: the agent was stopped, failed or crashed"
            )
        return facts


def harness_for(spec: EnvSpec, *, script: str | None = None) -> Harness:
    """The harness an environment asks for. `script` (from a job) replaces agent_script."""
    if spec.harness == "script":
        chosen = script if script is not None else spec.agent_script
        if not chosen:
            raise ValueError(
                f"environment {spec.name}: harness script needs agent_script in the spec "
                "or a script given with the job"
            )
        return ScriptHarness(chosen)
    if spec.harness == "claude":
        return ClaudeHarness(credential_env=spec.model_credential_env or "ANTHROPIC_API_KEY")
    return CodexHarness(credential_env=spec.model_credential_env or "OPENAI_API_KEY")
