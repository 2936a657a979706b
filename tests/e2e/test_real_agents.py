"""The real Claude Code and Codex CLIs, in hangar's sandboxes, against the scripted model.

The agent reaches its model only through hangar's gateway: the sandbox holds a
per-sandbox token, hangar adds the real key. Two turns: the issue's request makes a PR;
a follow-up on the PR resumes the first turn's session and adds a commit.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from fakehub.model import Fault, ModelServer, ModelThread, Step, StreamFault, fix_calc_script
from tests.e2e.conftest import wait_until
from tests.test_render_secrets import leaked

# The real CLIs through the gateway: 10-40 s a case.
pytestmark = pytest.mark.slow

AGENT_BIN = Path("/usr/local/lib/hangar-agent-clis")
REAL_KEY = "sk-real-key-that-never-enters-the-sandbox-0123456789"
CREDENTIALS = {"claude": "ANTHROPIC_API_KEY", "codex": "OPENAI_API_KEY"}
KEY_PROBE = (
    f"k=$(echo {REAL_KEY[::-1]} | rev); "
    # The shell lists the processes before grep starts, so grep's own argv is not read.
    "set -- /proc/[0-9]*/environ /proc/[0-9]*/cmdline; "
    'found=$(grep -rlsF "$k" "$@" /workspace /tmp /etc 2>/dev/null); '
    # The quotes keep the answers out of the command's own text, which the model sees.
    'if [ -n "$found" ]; then echo KEY-"FOUND" in $found; else echo KEY-"ABSENT"; fi'
)


def need_cli(cli: str) -> str:
    path = AGENT_BIN / cli
    if not path.exists():
        pytest.skip(f"the pinned {cli} CLI is not installed in {AGENT_BIN} "
                    "(scripts/setup.sh installs it from tests/agents_cli with npm)")
    return str(path)


@pytest.fixture
def model(monkeypatch):
    script = fix_calc_script(api_key=REAL_KEY)
    # First, the agent looks for the real key everywhere it can: its environment, every
    # process's environment and command line, its files. The command holds the key
    # reversed, so that it does not find itself.
    script.scenes[-1].steps.insert(0, Step(run=KEY_PROBE))
    for name in CREDENTIALS.values():
        monkeypatch.setenv(name, REAL_KEY)
    with ModelThread(ModelServer(script)) as served:
        yield served


def start(world, model, cli: str, *, base_url: str | None = None,
          provider: str = "local") -> None:
    credential = CREDENTIALS[cli]
    env = {"harness": cli, "agent_command": need_cli(cli), "model_credential_env": credential}
    if provider == "docker":
        # hangar builds the image: hangar-base:1 plus the pinned CLI, on its PATH.
        env.update(agent_command=None, image=None,
                   image_recipe={"base": "hangar-base:1", "agent_clis": [cli]})
    world.start_hangar(
        env=env, provider=provider,
        settings={"model_endpoints": {credential: {"base_url": base_url or model.url}}},
        max_minutes=5)


def wait_showing_status(world, issue: int, predicate, what: str, timeout: float = 180):
    """wait_until, with the status comment in the failure: it says what went wrong."""
    try:
        return wait_until(predicate, timeout, what)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; the status comment says:\n{world.status(issue)}") from None


def second_head(world, pr: dict, first_head: str):
    now = world.hub.get_pr(world.repo, pr["number"])
    if now["head"]["sha"] == first_head:
        return None
    check = world.checks(now["head"]["sha"]).get("hangar / verify")
    return now if check and check["status"] == "completed" else None


@pytest.mark.parametrize("provider", [
    pytest.param("local", marks=pytest.mark.bwrap),
    # Docker's `none` network and the gate's relay: the model only through hangar.
    pytest.param("docker", marks=[pytest.mark.docker, pytest.mark.slow]),
])
@pytest.mark.parametrize("cli", ["claude", "codex"])
def test_two_turns_land_with_the_real_cli_through_the_gateway(world, model, cli, provider,
                                                              request):
    if provider == "docker":
        request.getfixturevalue("docker_engine")
    start(world, model, cli, provider=provider)
    issue, _ = world.ask("/hangar fix the failing test")
    pr = wait_showing_status(world, issue, lambda: world.verified(issue),
                             f"{cli}'s first turn")
    head = pr["head"]["sha"]
    assert world.checks(head)["hangar / verify"]["conclusion"] == "success"
    assert world.checks(head)["hangar / agent"]["conclusion"] == "success"
    # The CLI's own event stream gave the turn's steps; the check run keeps the last ones.
    steps = world.checks(head)["hangar / agent"]["output"]["text"]
    assert "<summary>The agent's latest steps (unverified)</summary>" in steps
    assert "ran python3 -m unittest -q" in steps, steps
    world.hub.comment(world.repo, pr["number"], "/hangar document add()",
                      as_user=world.maintainer)
    pr2 = wait_showing_status(world, issue, lambda: second_head(world, pr, head),
                              f"{cli}'s follow-up")
    # The scripted model only edits in the follow-up if the first turn's conversation
    # came with it: the session was restored and resumed.
    assert "2 commit(s)" in pr2["body"]
    assert world.checks(pr2["head"]["sha"])["hangar / verify"]["conclusion"] == "success"
    requests = [r for r in model.model.requests if r["body"] and r["body"].get("tools")]
    assert requests, "the CLI never reached the model"
    for request in requests:
        auth = request["headers"].get("x-api-key") or request["headers"].get("Authorization")
        assert REAL_KEY in auth  # hangar added the real key on its side
        body = str(request["body"])
        assert REAL_KEY not in body
    results = json.dumps([r["body"] for r in requests])
    outputs = [i.get("output") for r in requests for i in r["body"].get("input") or []
               if isinstance(i, dict) and i.get("type") == "function_call_output"]
    assert "KEY-ABSENT" in results and "KEY-FOUND" not in results, outputs[:2]
    status = world.status(issue)
    assert "could not work" not in status


@pytest.mark.parametrize("cli", ["claude", "codex"])
@pytest.mark.parametrize("case", ["rate-limit", "unreachable", "refused-key"])
def test_model_failures_are_said_plainly(world, model, cli, case, monkeypatch,
                                         unreachable_port):
    base_url = None
    if case == "rate-limit":
        model.model.script.fault = Fault(429, "This request would exceed your rate limit.",
                                         retry_after_s=5)  # codex may wait it out
    elif case == "unreachable":
        base_url = f"http://127.0.0.1:{unreachable_port}"
    else:
        monkeypatch.setenv(CREDENTIALS[cli], "sk-a-key-the-endpoint-refuses")
    start(world, model, cli, base_url=base_url)
    issue, _ = world.ask("/hangar fix the failing test")
    words = {"rate-limit": "answered 429 (rate limit); usage resets at",
             "unreachable": "the model endpoint could not be reached",
             "refused-key": "the model endpoint refused hangar's credential (401)"}[case]
    status = wait_showing_status(world, issue,
                                 lambda: words in world.status(issue) and world.status(issue),
                                 f"the status comment to say {words!r}", 90)
    assert "rephrase the request" not in status


# A subscription shared by a team: Claude's plan token (by its name, an OAuth token) and
# a ChatGPT plan's usage headers for Codex.
PLANS = {"claude": "ANTHROPIC_OAUTH_TOKEN", "codex": "OPENAI_API_KEY"}
RAW_7D = 0.913  # what the model's answers say of the 7-day window
HELD = ("⏸️ waiting for the model: the model's 7-day usage is 91%; hangar pauses new agents "
        "at 90%; resets ")


@pytest.mark.bwrap
@pytest.mark.parametrize("cli", ["claude", "codex"])
def test_a_shared_subscription_pauses_at_its_threshold_and_a_person_resumes(
        world, model, cli, monkeypatch):
    from tests.e2e.test_api import TOKEN, call

    credential = PLANS[cli]
    monkeypatch.setenv(credential, REAL_KEY)
    model.model.script.subscription = {"5h": 0.34, "7d": RAW_7D}
    world.api_token = TOKEN
    world.start_hangar(
        env={"harness": cli, "agent_command": need_cli(cli), "model_credential_env": credential},
        settings={"model_endpoints": {credential: {"base_url": model.url}}}, max_minutes=5)
    issue, _ = world.ask("/hangar fix the failing test")
    pr = wait_showing_status(world, issue, lambda: world.verified(issue), f"{cli}'s first turn")
    head = pr["head"]["sha"]
    # The run that received 91% says so: its check run carries the reading.
    summary = world.checks(head)["hangar / agent"]["output"]["summary"]
    assert "the model's usage as this turn ended: 7-day 91% (resets " in summary, summary

    # The next run on that credential is held, and says what for, in its own line.
    world.hub.comment(world.repo, pr["number"], "/hangar document add()",
                      as_user=world.maintainer)
    status = wait_showing_status(world, issue, lambda: HELD in world.status(issue)
                                 and world.status(issue), "the held run's line", 90)
    assert ", or `/hangar resume`" in status.split(HELD)[1].splitlines()[0]
    # What hangar shows is within one point of what the model's answers said (A16).
    _, usage = call(world, "GET", "/api/usage")
    shown = {w["window"]: w for w in usage["credentials"][credential]["windows"]}
    assert abs(shown["7d"]["utilization"] * 100 - RAW_7D * 100) < 1
    figure = re.search(r"the model's 7-day usage is (\d+)%", status).group(1)
    assert abs(int(figure) - RAW_7D * 100) < 1  # the held line's
    assert usage["credentials"][credential]["paused"]["window"] == "7d"

    # Someone who may only read is refused, with the reason; the run stays held.
    world.hub.comment(world.repo, pr["number"], "/hangar resume", as_user=world.reader)
    wait_until(lambda: any("only from people with write access" in r
                           for r in world.replies(pr["number"])), 60, "the refusal")
    assert HELD in world.status(issue)

    # A writer resumes it: the follow-up starts, resumes its session and lands a commit.
    world.hub.comment(world.repo, pr["number"], "/hangar resume", as_user=world.maintainer)
    pr2 = wait_showing_status(world, issue, lambda: second_head(world, pr, head),
                              f"{cli}'s follow-up after the resume")
    assert "2 commit(s)" in pr2["body"]
    assert any("resumed the agents hangar had paused" in r for r in world.replies(pr["number"]))

    # The follow-up's cost and tokens are its own, not the resumed session's totals.
    _, jobs = call(world, "GET", "/api/jobs")
    _, job = call(world, "GET", f"/api/jobs/{jobs[0]['id']}")
    turns = {r["turn"]: r["agent"] for r in job["runs"] if r["kind"] != "verify"}
    first, second = turns[1], turns[2]
    assert second["session_id"] == first["session_id"]
    assert second["cost_from"] == "gateway"
    assert second["cost_usd"] == pytest.approx(second["model"]["cost_usd"], abs=1e-6)
    assert second["input_tokens"] == second["model"]["input_tokens"]
    assert second["input_tokens"] == (second["session_tokens"]["input"]
                                      - first["session_tokens"]["input"])
    if cli == "claude":  # Claude Code prices its session too: the turn is what it added
        assert second["cost_usd"] == pytest.approx(
            second["session_cost_usd"] - first["session_cost_usd"], abs=1e-4)
    assert sum(t["cost_usd"] for t in turns.values()) == pytest.approx(
        usage_after(world, credential)["cost_usd"], abs=1e-5)


def usage_after(world, credential: str) -> dict:
    from tests.e2e.test_api import call

    _, usage = call(world, "GET", "/api/usage")
    return usage["credentials"][credential]


@pytest.mark.parametrize("cli", ["claude", "codex"])
@pytest.mark.parametrize("case", ["overloaded", "cut-stream"])
def test_a_model_that_fails_under_the_agent_is_named_not_the_request(world, model, cli, case):
    """A model that answers 529, or cuts every answer off: the gateway saw it, and the
    status comment and the check run say it, with the next step; never "made no commits
    … rephrase". (An error event in the middle of a stream, Claude Code gets past by
    asking again without streaming: the gateway's tests hold how it is recorded.)"""
    if case == "overloaded":
        model.model.script.fault = Fault(529, "Overloaded", retry_after_s=1)
    else:
        model.model.script.stream_fault = StreamFault("cut", after_events=2)
    start(world, model, cli)
    issue, _ = world.ask("/hangar fix the failing test")
    words = {"overloaded": "the model endpoint answered 529 (overloaded)",
             "cut-stream": "the model's answer was cut off before it ended"}[case]
    status = wait_showing_status(world, issue,
                                 lambda: words in world.status(issue) and world.status(issue),
                                 f"the status comment to say {words!r}", 180)
    assert "rephrase" not in status and "made no commits" not in status
    assert "`/hangar retry`" in status
    main = world.hub.ref_sha(world.repo, "main")
    check = wait_until(lambda: (c := world.checks(main).get("hangar / agent"))
                       and c["status"] == "completed" and c, 60, "the agent's check run")
    assert check["conclusion"] == "failure"
    assert check["output"]["title"].startswith(words[:1].upper() + words[1:])
    assert "model traffic through hangar" in check["output"]["summary"]


# The agent's command in the next test: the real CLI first (its error text is what the
# status comment and the check run show), then the gateway's own answer to the same
# request, committed, so that the test reads exactly what the sandbox was told.
TELLING_WRAPPER = """#!/bin/sh
"{cli}" "$@"
code=$?
python3 - > gateway-answer.txt 2>&1 <<'PY'
import os, urllib.error, urllib.request
request = urllib.request.Request(
    os.environ["ANTHROPIC_BASE_URL"] + "/v1/messages", data=b'{"model": "x"}', method="POST",
    headers={"x-api-key": os.environ["ANTHROPIC_API_KEY"], "content-type": "application/json"})
try:
    print(urllib.request.urlopen(request, timeout=60).read().decode())
except urllib.error.HTTPError as exc:
    print(exc.code, exc.read().decode())
PY
git add gateway-answer.txt && git commit -qm "What the gateway answered"
exit $code
"""


def test_an_endpoint_password_reaches_no_comment_check_run_store_or_sandbox(
        world, model, unreachable_port):
    """A model endpoint configured as a company proxy with userinfo credentials, down:
    the password is in no status comment, no check run, not in hangar's database, and
    not in the gateway's answer inside the sandbox."""
    password = "Pr0xy-Passw0rd-4-hangar"
    wrapper = TELLING_WRAPPER.replace("{cli}", need_cli("claude"))
    world.hub.push_files(world.repo, "main", {"tell.sh": wrapper}, "the agent's wrapper",
                         as_user=world.maintainer, bypass_rules=True)
    world.start_hangar(
        env={"harness": "claude", "agent_command": "/workspace/repo/tell.sh",
             "model_credential_env": "ANTHROPIC_API_KEY"},
        settings={"model_endpoints": {"ANTHROPIC_API_KEY": {
            "base_url": f"http://llm-user:{password}@127.0.0.1:{unreachable_port}/llm"}}},
        max_minutes=5)
    issue, _ = world.ask("/hangar fix the failing test")
    words = "the model endpoint could not be reached"
    wait_showing_status(world, issue, lambda: words in world.status(issue), words, 120)
    pr = wait_showing_status(world, issue, lambda: world.pr_for(issue), "the agent's PR", 120)
    told = world.hub.read_file(world.repo, "gateway-answer.txt", pr["head"]["ref"]).decode()
    assert "502" in told and f"127.0.0.1:{unreachable_port}/llm" in told, told
    shown = [c["body"] for c in world.hub.issue_comments(world.repo, issue)]
    shown += [json.dumps(c) for sha in (pr["head"]["sha"], pr["base"]["sha"])
              for c in world.hub.check_runs(world.repo, sha)]
    shown.append(pr["body"])
    data = world.settings.data_dir
    stored = [p.read_bytes().decode("latin-1") for p in data.glob("hangar.db*")]
    for text in [told, *shown, *stored]:
        assert leaked(text, password) is None, text[:2000]


SKILL_PROBE = ('cat "${CODEX_HOME:-$HOME/.claude}/skills/hangar-environment/SKILL.md" '
               '|| echo SKILL-"MISSING"')


@pytest.mark.bwrap
@pytest.mark.parametrize("cli", ["claude", "codex"])
def test_the_cli_lists_hangars_environment_skill_and_the_sandbox_holds_it(world, model, cli):
    # The agent reads the skill's file first; its output reaches the model with the CLI's
    # next request, beside the skills the CLI lists.
    model.model.script.scenes[-1].steps.insert(0, Step(run=SKILL_PROBE))
    credential = CREDENTIALS[cli]
    world.start_hangar(
        env={"harness": cli, "agent_command": need_cli(cli), "model_credential_env": credential,
             "install": "true"},  # an install step: the sandbox's facts are written
        settings={"model_endpoints": {credential: {"base_url": model.url}}}, max_minutes=5)
    issue, _ = world.ask("/hangar fix the failing test")
    wait_showing_status(world, issue, lambda: world.verified(issue), f"{cli}'s turn")
    sent = json.dumps([r["body"] for r in model.model.requests if r["body"]])
    assert "SKILL-MISSING" not in sent
    # the file, with the frontmatter both CLIs read
    assert "---\\nname: hangar-environment\\ndescription: What this sandbox started " in sent
    assert "# Your environment (hangar)" in sent
    # and the CLI itself lists the skill to the model, by its name and description
    before = [json.dumps(r["body"]) for r in model.model.requests
              if r["body"] and "SKILL-" not in json.dumps(r["body"])]  # before the probe
    assert before and any("hangar-environment" in b for b in before), (
        "the CLI never listed the skill")
