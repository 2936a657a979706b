"""Agent harnesses: how to start an agent with a prompt, and how to read what it printed.

`Harness.command(prompt, turn=...)` gives the argv and extra environment for
`Provider.start`; `Harness.parse(log_text)` turns the agent's log into `AgentFacts`.
Parsing is best effort and never raises: a field it cannot find stays None and a
warning says why. Everything in AgentFacts is the agent's own account; the summary in
particular is a claim, shown as "Agent says (unverified)" and never used for decisions.

The model credential never enters the sandbox. The agent reaches its model through
hangar's model gateway: `ModelRoute` is a per-sandbox base URL and a per-sandbox token,
good only while the run lives; hangar adds the real credential on its side. The harness
points the CLI at that route in a way a repository's own files cannot override (Claude
Code: `--settings`, which outranks `.claude/settings.json`; Codex: `-c` overrides,
which outrank any config.toml).
"""

from __future__ import annotations

import abc
import json
import re
import shlex
import time
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, Field

from proxy.usage import from_claude_event, from_codex_message
from sandbox.envspec import EnvSpec
from sandbox.provider import HANGAR_DIR, HOME_DIR

AGENT_SCRIPT_PATH = f"{HANGAR_DIR}/agent.sh"
CLAUDE_SETTINGS_PATH = f"{HANGAR_DIR}/claude-settings.json"
CODEX_HOME = f"{HOME_DIR}/.codex"
# Where each CLI keeps its sessions, under the sandbox's HOME: saved when a turn ends and
# restored in the next turn's sandbox, so that a follow-up resumes the conversation.
SESSION_DIRS = {"claude": f"{HOME_DIR}/.claude", "codex": CODEX_HOME}
# Where each pinned CLI reads the skills installed for its user, a folder per skill holding
# its SKILL.md (frontmatter `name`, `description`): Claude Code's ~/.claude/skills, Codex's
# $CODEX_HOME/skills. The script harness reads none.
SKILL_DIRS = {"claude": f"{HOME_DIR}/.claude/skills", "codex": f"{CODEX_HOME}/skills"}
# Claude Code's switches for a quiet, offline-but-for-the-model process.
CLAUDE_QUIET_ENV = {
    "DISABLE_TELEMETRY": "1",
    "DISABLE_AUTOUPDATER": "1",
    "DISABLE_ERROR_REPORTING": "1",
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "IS_SANDBOX": "1",
    # A refused or rate-limited model fails the turn soon; hangar waits for the reset.
    "CLAUDE_CODE_MAX_RETRIES": "2",
}
# The environment variable codex reads the gateway token from (the provider's env_key).
CODEX_TOKEN_ENV = "HANGAR_MODEL_TOKEN"
# A model the pinned codex knows, with plain function tools (its default uses "code mode").
CODEX_DEFAULT_MODEL = "gpt-5.5"


@dataclass(frozen=True)
class ModelRoute:
    """How the agent reaches its model: hangar's gateway URL and the sandbox's token.

    `subscription`: the credential is a subscription's (a Claude plan's OAuth token), so the
    CLI runs as a subscriber does: it sends what a plan's token needs and reports the
    plan's usage windows in its stream (Claude Code's `rate_limit_event`)."""

    base_url: str
    token: str
    subscription: bool = False
SCRIPT_SUMMARY_LINES = 20
SUMMARY_MAX_CHARS = 8000


class AgentFacts(BaseModel):
    summary: str | None = None
    session_id: str | None = None
    turns: int | None = None
    # This turn's own cost, as the CLI reports it (Claude Code: its last result's
    # model_usage_since_last_result), else None: hangar works it out from the session's
    # totals and the gateway's metering (app/runs/costs.py).
    cost_usd: float | None = None
    usage: dict[str, Any] = Field(default_factory=dict)
    # The whole session's so far, a resumed session's earlier turns included: Claude
    # Code's total_cost_usd and modelUsage, Codex's turn.completed usage.
    session_cost_usd: float | None = None
    session_tokens: dict[str, int] | None = None  # {"input": n, "output": m}
    rate_limit: dict[str, Any] | None = None
    # The model's usage windows the CLI reported (proxy.usage.Reading as dicts, their
    # time the log's end): Claude Code's rate_limit_event, Codex's usage-limit error.
    rate_limits: list[dict[str, Any]] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)
    # Why the agent could not do its work, in the CLI's own terms: "rate_limit" (with
    # http_status 429), "auth" (401/403), "unreachable", "api_error", "resume_failed".
    failure: str | None = None
    http_status: int | None = None
    error_message: str | None = None


class AgentStep(BaseModel):
    """One thing the agent did, as its own event stream says: `verb` is hangar's word
    ("ran", "edited", "read", ...), `subject` the agent's (a command, a path): data.
    `exit_code` where the stream gives one; `failed` where it says the tool failed."""

    verb: str
    subject: str = ""
    exit_code: int | None = None
    failed: bool = False
    running: bool = False


STEP_SUBJECT_CHARS = 200


def _step(verb: str, subject: Any, **facts: Any) -> AgentStep:
    text = " ".join(subject.split()) if isinstance(subject, str) else ""
    return AgentStep(verb=verb, subject=text[:STEP_SUBJECT_CHARS], **facts)


class Harness(abc.ABC):
    name: str

    # Where the CLI keeps its sessions in the sandbox (saved and restored between turns).
    session_dir: str | None = None

    @abc.abstractmethod
    def command(
        self, prompt: str, *, turn: int, session_id: str | None = None,
        model: ModelRoute | None = None,
    ) -> tuple[list[str], dict[str, str]]:
        """(argv, extra env) for the agent's process. turn counts from 1; a later turn may
        resume the session of an earlier one."""

    @abc.abstractmethod
    def parse(self, log_text: str, *, at: float | None = None) -> AgentFacts:
        """What the agent reported about itself. Never raises. `at`: when the log ended
        (the time of the usage readings it holds; now by default)."""

    def files(self, model: ModelRoute | None = None) -> dict[str, bytes]:
        """Files to copy into the sandbox before `start` (absolute paths)."""
        return {}

    def steps(self, log_text: str) -> list[AgentStep]:
        """The agent's steps so far, oldest first, from (the tail of) its log while it
        runs. Never raises; a line it cannot read is skipped."""
        return []


class ScriptHarness(Harness):
    """Runs a shell script: tests, the demo, and teams that drive their own tools."""

    name = "script"

    def __init__(self, script: str) -> None:
        if not script.strip():
            raise ValueError("the script harness needs a script (agent_script in the spec)")
        self.script = script

    def command(
        self, prompt: str, *, turn: int, session_id: str | None = None,
        model: ModelRoute | None = None,
    ) -> tuple[list[str], dict[str, str]]:
        return ["bash", AGENT_SCRIPT_PATH], {"HANGAR_PROMPT": prompt, "HANGAR_TURN": str(turn)}

    def files(self, model: ModelRoute | None = None) -> dict[str, bytes]:
        return {AGENT_SCRIPT_PATH: self.script.encode()}

    def steps(self, log_text: str) -> list[AgentStep]:
        # A script has no event stream: each line it printed is a step.
        return [_step("printed", line) for line in log_text.splitlines() if line.strip()]

    def parse(self, log_text: str, *, at: float | None = None) -> AgentFacts:
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
        # What the CLI printed besides its events (stderr): errors before any JSON.
        self.text_lines = [line for line in self.lines if not line.startswith("{")]

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
    session_dir = SESSION_DIRS["claude"]

    def __init__(self, command: str = "claude", model: str | None = None):
        self.program = command
        self.model = model

    def command(
        self, prompt: str, *, turn: int, session_id: str | None = None,
        model: ModelRoute | None = None,
    ) -> tuple[list[str], dict[str, str]]:
        argv = [self.program, "-p", "--output-format", "stream-json", "--verbose"]
        # The sandbox is the boundary: the agent may edit and run without asking.
        argv.append("--dangerously-skip-permissions")
        env = dict(CLAUDE_QUIET_ENV)
        if model is not None:
            # --settings outranks the repository's .claude/settings.json, whose env could
            # otherwise point ANTHROPIC_BASE_URL elsewhere.
            argv += ["--settings", CLAUDE_SETTINGS_PATH]
            env.update(self._model_env(model))
        if self.model:
            argv += ["--model", self.model]
        if session_id and turn > 1:
            argv += ["--resume", session_id]
        # "--" so that a prompt starting with "-" is not read as an option.
        return [*argv, "--", prompt], env

    @staticmethod
    def _model_env(model: ModelRoute) -> dict[str, str]:
        # A plan's token is an OAuth token to Claude Code, an API key's an API key.
        key = "CLAUDE_CODE_OAUTH_TOKEN" if model.subscription else "ANTHROPIC_API_KEY"
        return {"ANTHROPIC_BASE_URL": model.base_url, key: model.token}

    def files(self, model: ModelRoute | None = None) -> dict[str, bytes]:
        if model is None:
            return {}
        settings = {"env": {**self._model_env(model), **CLAUDE_QUIET_ENV}}
        return {CLAUDE_SETTINGS_PATH: json.dumps(settings, indent=1).encode()}

    def steps(self, log_text: str) -> list[AgentStep]:
        """`assistant` messages' `tool_use` blocks; the `user` message's `tool_result` with
        `is_error` marks its step failed."""
        steps: list[AgentStep] = []
        by_id: dict[str, int] = {}
        for event in _JsonLines(log_text, AgentFacts()).events():
            message = event.get("message")
            content = message.get("content") if isinstance(message, dict) else None
            if not isinstance(content, list):
                continue
            for block in content:
                if not isinstance(block, dict):
                    continue
                if event.get("type") == "assistant" and block.get("type") == "tool_use":
                    if isinstance(block.get("id"), str):
                        by_id[block["id"]] = len(steps)
                    steps.append(_claude_step(block.get("name"), block.get("input")))
                elif (event.get("type") == "user" and block.get("type") == "tool_result"
                      and block.get("is_error") is True and block.get("tool_use_id") in by_id):
                    steps[by_id[block["tool_use_id"]]].failed = True
        return steps

    def parse(self, log_text: str, *, at: float | None = None) -> AgentFacts:
        facts = AgentFacts()
        reader = _JsonLines(log_text, facts)
        at = time.time() if at is None else at
        windows: dict[str, dict] = {}
        last_text: str | None = None
        assistant_messages = 0
        result_seen = False
        retries, retry_status = 0, None
        for event in reader.events():
            kind = event.get("type")
            if isinstance(event.get("session_id"), str) and not facts.session_id:
                facts.session_id = event["session_id"]
            if kind == "system":
                if event.get("subtype") == "init" and isinstance(event.get("session_id"), str):
                    facts.session_id = event["session_id"]
                elif event.get("subtype") == "api_retry":
                    retries += 1
                    retry_status = _int(event.get("error_status")) or retry_status
            elif kind == "assistant":
                assistant_messages += 1
                last_text = _text_of(event.get("message")) or last_text
            elif kind == "user" or kind == "stream_event":
                pass
            elif kind == "rate_limit_event":
                info = event.get("rate_limit_info")
                facts.rate_limit = dict(info) if isinstance(info, dict) else {}
                for reading in from_claude_event(info, at):  # the last of each window
                    windows[reading.window] = reading.as_dict()
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
                facts.session_cost_usd = _number(event.get("total_cost_usd"))
                facts.session_tokens = _claude_tokens(event.get("modelUsage"))
                facts.cost_usd = _claude_turn_cost(event.get("model_usage_since_last_result"))
                if isinstance(event.get("usage"), dict):
                    facts.usage = event["usage"]
                subtype = event.get("subtype")
                if event.get("is_error") or (subtype and subtype != "success"):
                    # A refused model still ends with subtype "success": is_error decides.
                    errors = event.get("errors")
                    message = "; ".join(e for e in errors if isinstance(e, str)) if isinstance(
                        errors, list) else ""
                    message = message or event.get("result") or subtype or "error"
                    status = _int(event.get("api_error_status"))
                    facts.http_status = status
                    facts.error_message = str(message)[:500]
                    facts.failure = classify_failure(status, facts.error_message)
                    facts.summary = None  # the error text is not the agent's account
                    facts.warnings.append(f"the agent ended with an error: {facts.error_message}")
            else:
                reader.unknown_type(kind)
        reader.finish()
        facts.rate_limits = list(windows.values())
        if retries:
            facts.warnings.append(f"the model request was retried {retries} time(s)"
                                  + (f" (HTTP {retry_status})" if retry_status else ""))
        for line in reader.text_lines:
            if line.startswith("No conversation found with session ID"):
                facts.failure, facts.error_message = "resume_failed", line[:500]
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
    session_dir = SESSION_DIRS["codex"]

    def __init__(self, command: str = "codex", model: str | None = None):
        self.program = command
        self.model = model or CODEX_DEFAULT_MODEL

    def command(
        self, prompt: str, *, turn: int, session_id: str | None = None,
        model: ModelRoute | None = None,
    ) -> tuple[list[str], dict[str, str]]:
        argv = [self.program, "exec"]
        if session_id and turn > 1:
            argv += ["resume", session_id]
        # hangar's sandbox is the boundary; codex's own would need privileges it lacks.
        argv += ["--json", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox"]
        env = {"CODEX_HOME": CODEX_HOME}
        if model is not None:
            # -c overrides outrank every config.toml, the repository's .codex/ included.
            for key, value in self._provider(model).items():
                argv += ["-c", f"{key}={_toml(value)}"]
            env[CODEX_TOKEN_ENV] = model.token
        if self.model:
            argv += ["--model", self.model]
        return [*argv, "--", prompt], env

    @staticmethod
    def _provider(model: ModelRoute) -> dict[str, Any]:
        base = "model_providers.hangar"
        return {
            "model_provider": "hangar",
            f"{base}.name": "hangar",
            f"{base}.base_url": model.base_url.rstrip("/") + "/v1",
            f"{base}.wire_api": "responses",
            f"{base}.env_key": CODEX_TOKEN_ENV,
            f"{base}.supports_websockets": False,
            f"{base}.request_max_retries": 2,
            f"{base}.stream_max_retries": 2,
            "analytics.enabled": False,
            "features.plugins": False,
            "check_for_update_on_startup": False,
        }

    def files(self, model: ModelRoute | None = None) -> dict[str, bytes]:
        if model is None:
            return {}
        lines = [f"{key} = {_toml(value)}" for key, value in self._provider(model).items()]
        return {f"{CODEX_HOME}/config.toml": ("\n".join(lines) + "\n").encode()}

    def steps(self, log_text: str) -> list[AgentStep]:
        """`command_execution` items (started: running; completed: with the exit code),
        `file_change` items (one step a path), MCP tool calls and web searches."""
        steps: list[AgentStep] = []
        started: dict[str, int] = {}
        for event in _JsonLines(log_text, AgentFacts()).events():
            item = event.get("item")
            if event.get("type") not in ("item.started", "item.completed") or not isinstance(
                    item, dict):
                continue
            done = event["type"] == "item.completed"
            found = _codex_steps(item, done)
            key = item.get("id") if isinstance(item.get("id"), str) else None
            if key in started:  # a started command ends: its step is replaced
                index = started.pop(key)
                if found:
                    steps[index] = found[0]
                continue
            if key and not done and found:
                started[key] = len(steps)
            steps += found
        return steps

    def parse(self, log_text: str, *, at: float | None = None) -> AgentFacts:
        facts = AgentFacts()
        reader = _JsonLines(log_text, facts)
        at = time.time() if at is None else at
        turns = 0
        completed = False
        reconnects: list[str] = []
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
                    # The session's so far: a resumed thread counts its earlier turns too.
                    facts.session_tokens = _tokens(usage.get("input_tokens"),
                                                   usage.get("output_tokens"))
            elif kind in ("turn.failed", "error"):
                error = event.get("error") if kind == "turn.failed" else event
                message = error.get("message") if isinstance(error, dict) else None
                message = message if isinstance(message, str) else "unknown error"
                if message.startswith("Reconnecting..."):
                    reconnects.append(message)  # transient: codex retries by itself
                    continue
                facts.rate_limits = [r.as_dict() for r in from_codex_message(message, at)
                                     ] or facts.rate_limits
                if kind == "turn.failed" or facts.error_message is None:
                    facts.error_message = message[:500]
                    facts.http_status = _status_in(message)
                    facts.failure = classify_failure(facts.http_status, message)
                facts.warnings.append(f"codex reported an error: {message}")
            elif kind == "item.completed":
                item = event.get("item")
                if not isinstance(item, dict):
                    continue
                if item.get("type") == "agent_message":
                    text = item.get("text")
                    if isinstance(text, str) and text:
                        facts.summary = text[-SUMMARY_MAX_CHARS:]
                elif item.get("type") == "error" and isinstance(item.get("message"), str):
                    facts.warnings.append(f"codex: {item['message']}")
            elif kind in ("item.started", "item.updated", "item.plan.delta", "request_user_input"):
                pass
            else:
                reader.unknown_type(kind)
        reader.finish()
        facts.turns = turns or None
        if reconnects:
            facts.warnings.append(f"codex reconnected {len(reconnects)} time(s): "
                                  f"{reconnects[-1].removeprefix('Reconnecting... ')}")
        if not completed:
            errors = [line for line in reader.text_lines if line.startswith("Error:")]
            if errors and facts.failure is None:
                # codex failed before its first JSON event (a resume, a bad option, ...)
                message = errors[-1].removeprefix("Error:").strip()
                facts.error_message = message[:500]
                facts.failure = ("resume_failed" if "resume" in message
                                 else classify_failure(_status_in(message), message))
            elif facts.failure is None and any("waiting for network" in r for r in reconnects):
                facts.failure = "unreachable"
                facts.error_message = reconnects[-1].removeprefix("Reconnecting... ")
            facts.warnings.append(
                "no turn.completed event: the agent was stopped, failed or crashed"
            )
        if facts.failure:
            facts.summary = None
        if facts.failure == "rate_limit":
            facts.rate_limit = {"status": "rejected", "message": facts.error_message}
        return facts


# Claude Code's tools, by the verb hangar says and the input field that names the subject.
_CLAUDE_TOOLS = {
    "Bash": ("ran", "command"), "Read": ("read", "file_path"), "Edit": ("edited", "file_path"),
    "MultiEdit": ("edited", "file_path"), "Write": ("wrote", "file_path"),
    "NotebookEdit": ("edited", "notebook_path"), "Grep": ("searched for", "pattern"),
    "Glob": ("looked for", "pattern"), "WebFetch": ("fetched", "url"),
    "WebSearch": ("searched the web for", "query"), "Task": ("started a subagent", "description"),
}


def _claude_step(name: Any, given: Any) -> AgentStep:
    name = name if isinstance(name, str) else "a tool"
    verb, field = _CLAUDE_TOOLS.get(name, ("used", ""))
    given = given if isinstance(given, dict) else {}
    return _step(verb, given.get(field) if field else name)


def _codex_steps(item: dict, done: bool) -> list[AgentStep]:
    kind = item.get("type")
    if kind == "command_execution":
        return [_step("ran", _unwrapped(item.get("command")), exit_code=_int(item.get("exit_code")),
                      running=not done)]
    if kind == "file_change" and done:
        changes = item.get("changes")
        verbs = {"add": "added", "delete": "deleted", "update": "edited"}
        return [_step(verbs.get(str(c.get("kind")), "changed"), c.get("path"))
                for c in (changes if isinstance(changes, list) else []) if isinstance(c, dict)]
    if kind == "mcp_tool_call" and done:
        return [_step("used", f"{item.get('server')}.{item.get('tool')}")]
    if kind == "web_search" and done:
        return [_step("searched the web for", item.get("query"))]
    return []


def _unwrapped(command: Any) -> Any:
    """codex runs each command as `/bin/bash -lc '<command>'`: the command is the script."""
    if not isinstance(command, str):
        return command
    try:
        words = shlex.split(command)
    except ValueError:
        return command
    if len(words) == 3 and words[0].endswith("sh") and words[1] in ("-lc", "-c"):
        return words[2]
    return command


def _tokens(inputs: Any, outputs: Any) -> dict[str, int] | None:
    inputs, outputs = _int(inputs), _int(outputs)
    if inputs is None and outputs is None:
        return None
    return {"input": inputs or 0, "output": outputs or 0}


def _claude_tokens(model_usage: Any) -> dict[str, int] | None:
    """Claude Code's modelUsage (per model, the session's so far): every prompt token,
    cached ones included, and the output."""
    if not isinstance(model_usage, dict) or not model_usage:
        return None
    inputs = outputs = 0
    for entry in model_usage.values():
        if not isinstance(entry, dict):
            return None
        inputs += sum(_int(entry.get(k)) or 0 for k in (
            "inputTokens", "cacheReadInputTokens", "cacheCreationInputTokens"))
        outputs += _int(entry.get("outputTokens")) or 0
    return {"input": inputs, "output": outputs}


def _claude_turn_cost(since_last: Any) -> float | None:
    """This turn's cost from Claude Code's model_usage_since_last_result, when it has one
    for every model it used."""
    if not isinstance(since_last, dict) or not since_last:
        return None
    costs = [_number(e.get("costUSD")) if isinstance(e, dict) else None
             for e in since_last.values()]
    return None if any(c is None for c in costs) else sum(costs)


def _status_in(message: str) -> int | None:
    """The HTTP status a codex error message names ('last status: 429 Too Many ...')."""
    found = re.search(r"status:? (\d{3})\b", message)
    return int(found.group(1)) if found else None


def classify_failure(status: int | None, message: str) -> str:
    """What kind of model failure an HTTP status and message describe (table-tested)."""
    text = message.lower()
    if status == 429 or any(word in text for word in _RATE_LIMIT_WORDS):
        return "rate_limit"
    if status in (401, 403) or "api key" in text or "unauthorized" in text:
        return "auth"
    if "no conversation found" in text or "no rollout found" in text:
        return "resume_failed"
    if status == 502 or any(word in text for word in _UNREACHABLE_WORDS):
        return "unreachable"
    return "api_error"


_UNREACHABLE_WORDS = ("connection refused", "econnrefused", "could not reach",
                      "connection failed", "enotfound", "timed out", "network")


def _toml(value: Any) -> str:
    """A TOML value: JSON's strings and booleans are TOML's too."""
    return json.dumps(value)


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
        return ClaudeHarness(command=agent_command(spec))
    return CodexHarness(command=agent_command(spec))


def agent_command(spec: EnvSpec) -> str:
    """The CLI to run: the spec's own, the one its image recipe copied in (by full path:
    every sandboxed process gets hangar's PATH, not the image's), or the name on PATH."""
    if spec.agent_command:
        return spec.agent_command
    if spec.image_recipe and spec.harness in spec.image_recipe.agent_clis:
        from sandbox.envimage import IN_IMAGE_DIR

        return f"{IN_IMAGE_DIR}/{spec.harness}"
    return spec.harness
