"""The REST API against a running hangar: tokens and scopes, the calls a person makes with
`/hangar`, the audit trail, the event stream and the OpenAPI description."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import urllib.error
import urllib.request

import jsonschema
import openapi_spec_validator
import pytest

from app.web import access
from app.web.api import ROUTES
from tests.e2e.conftest import ROOT, wait_until

pytestmark = pytest.mark.slow
TOKEN = "test-api-token-0123456789"


def call(world, method: str, path: str, body=None, token: str | None = TOKEN,
         raw: bytes | None = None):
    data = raw if raw is not None else json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(
        f"{world.hangar.url}{path}", method=method, data=data,
        headers={"Content-Type": "application/json",
                 **({"Authorization": f"Bearer {token}"} if token else {})})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        text = exc.read().decode()
        try:
            return exc.code, json.loads(text)
        except ValueError:
            return exc.code, text


def make_token(world, name: str, scopes: list[str]) -> str:
    status, made = call(world, "POST", "/api/tokens", {"name": name, "scopes": scopes})
    assert status == 201, made
    return made["token"]


@pytest.fixture
def served(world):
    world.api_token = TOKEN
    world.start_hangar()
    return world


def test_start_follow_and_list_a_job(served):
    world = served
    issue = world.hub.create_issue(world.repo, "add() is wrong", "", as_user=world.maintainer)
    status, started = call(world, "POST", "/api/jobs",
                           {"repo": world.repo, "issue": issue, "prompt": "fix the test"})
    assert status == 202
    pr = wait_until(lambda: world.verified(issue), 60, "a verified PR")
    status, view = call(world, "GET", f"/api/jobs/{started['job']}")
    assert status == 200 and view["job"]["requested_by"] == f"token:{access.OPERATOR}"
    # a token that acts for no login is named as a token, never as a mention of a user
    assert f"asked by the API token `{access.OPERATOR}`" in world.status(issue)
    assert "@token" not in world.status(issue) and "@api" not in world.status(issue)
    assert view["runs"][0]["pr_number"] == pr["number"] and view["prs"] == [pr["number"]]
    assert any("opened PR" in t["what"] for t in view["timeline"])
    status, jobs = call(world, "GET", f"/api/jobs?repo={world.repo}")
    assert [j["id"] for j in jobs] == [started["job"]]
    assert len(world.status_comments(issue)) == 1  # the same status comment as for a comment
    status, run = call(world, "GET", f"/api/runs/{view['runs'][0]['id']}")
    assert status == 200 and run["verification"]["passed"] is True and "env" not in run
    status, usage = call(world, "GET", "/api/usage")
    [(_credential, counts)] = usage["credentials"].items()
    assert counts["turns"] == 1 and counts["running"] == 0 and counts["max_concurrent"] == 3


def test_a_token_that_acts_for_a_login_asks_as_that_person(served):
    world = served
    status, made = call(world, "POST", "/api/tokens", {
        "name": "mona-bot", "scopes": ["read", "operate"], "login": world.maintainer})
    assert status == 201 and made["login"] == world.maintainer
    status, answer = call(world, "POST", "/api/tokens", {
        "name": "bad-login", "scopes": ["read"], "login": "-not a login-"})
    assert status == 409 and "GitHub login" in answer["error"]
    issue = world.hub.create_issue(world.repo, "add() is wrong", "", as_user=world.maintainer)
    status, started = call(world, "POST", "/api/jobs", {
        "repo": world.repo, "issue": issue, "prompt": "fix the test"}, made["token"])
    assert status == 202
    wait_until(lambda: world.verified(issue), 60, "a verified PR")
    view = call(world, "GET", f"/api/jobs/{started['job']}", token=made["token"])[1]
    # Her ask, as if she had commented: her own approval will not count for this work.
    assert view["job"]["requested_by"] == world.maintainer
    assert {r["requested_by"] for r in view["runs"]} == {world.maintainer}


@pytest.mark.parametrize(
    ("body", "token", "status", "reason"),
    [
        ({"repo": "acme/widgets", "issue": 1, "prompt": "x"}, None, 401, "Bearer"),
        ({"repo": "acme/widgets", "issue": 1, "prompt": "x"}, "wrong", 401, "Bearer"),
        ({"repo": "acme", "issue": 1, "prompt": "x"}, TOKEN, 422, "repo"),
        ({"repo": "acme/widgets", "issue": 0, "prompt": "x"}, TOKEN, 422, "issue"),
        ({"repo": "acme/widgets", "issue": 1, "prompt": ""}, TOKEN, 422, "prompt"),
        ({"repo": "acme/widgets", "issue": 1, "prompt": "x", "n": 2}, TOKEN, 422, "n"),
        ({"repo": "acme/elsewhere", "issue": 1, "prompt": "x"}, TOKEN, 404, "not installed"),
    ],
)
def test_bad_requests_get_a_reason(served, body, token, status, reason):
    got, text = call(served, "POST", "/api/jobs", body, token=token)
    assert got == status and reason in str(text)


def test_a_body_that_is_not_json_gets_422(served):
    status, answer = call(served, "POST", "/api/jobs", raw=b"{not json")
    assert status == 422 and "StartJob" in answer["error"]


def test_api_is_off_without_a_token(world):
    world.start_hangar()
    status, text = call(world, "GET", "/api/jobs")
    assert status == 503 and "HANGAR_API_TOKEN" in str(text)


# -- tokens and scopes -----------------------------------------------------------------

ALL = ["read", "operate", "land", "admin"]


def sample_path(path: str) -> str:
    return re.sub(r"\{(\w+)\}", lambda m: f"nope-{m.group(1)}", path)


def test_every_route_refuses_a_token_without_its_scope(served):
    """Each scope boundary: the token holding every scope but the route's gets 403 naming
    it, and the same call with that scope gets past the check."""
    world = served
    lacking = {s: make_token(world, f"all-but-{s}", [x for x in ALL[:3] if x != s])
               for s in ("read", "operate", "land")}
    lacking["admin"] = make_token(world, "all-but-admin", ALL[:3])
    only = {s: make_token(world, f"only-{s}", [s]) for s in ALL}
    checked = 0
    for r in ROUTES:
        if r.scope is None or r.path == "/api/events":
            continue
        status, answer = call(world, r.method, sample_path(r.path), {}, token=lacking[r.scope])
        assert status == 403, (r.method, r.path, status, answer)
        assert answer["scope"] == r.scope and repr(r.scope) in answer["error"]
        status, answer = call(world, r.method, sample_path(r.path), {}, token=only[r.scope])
        assert status != 403, (r.method, r.path, answer)
        checked += 1
    assert checked == len([r for r in ROUTES if r.scope]) - 1
    # A pick that also asks to land needs the land scope too.
    status, answer = call(world, "POST", sample_path("/api/jobs/{job_id}/pick"),
                          {"attempt": 2, "land": True}, token=only["operate"])
    assert status == 403 and answer["scope"] == "land", answer
    # A client can tell which scope to step up to from the header alone (RFC 6750).
    request = urllib.request.Request(f"{world.hangar.url}/api/land", method="POST", data=b"{}",
                                     headers={"Authorization": f"Bearer {lacking['land']}"})
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=30)
    assert refused.value.headers["WWW-Authenticate"] == (
        'Bearer realm="hangar", error="insufficient_scope", scope="land"')
    # The stream too (its answer is a stream, so only the refusal is read here).
    status, answer = call(world, "GET", "/api/events", token=lacking["read"])
    assert status == 403 and answer["scope"] == "read"


def test_tokens_from_the_cli_are_hashed_listed_revoked_and_audited(served):
    world = served
    env = {**os.environ, "HANGAR_DATA_DIR": str(world.settings.data_dir)}
    env.pop("HANGAR_CONFIG", None)

    def hangar(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "app.cli", "token", *args], env=env,
                              cwd=ROOT, capture_output=True, text=True, timeout=60)

    made = hangar("create", "reader", "--scope", "read")
    assert made.returncode == 0, made.stderr
    secret = made.stdout.strip()
    assert secret.startswith("hgt_") and "only time" in made.stderr
    # Stored hashed: the secret is nowhere in hangar's data. (Read by another process: a
    # read here would drop the SQLite locks that hangar's thread holds in this process.)
    assert subprocess.run(["grep", "-rqF", secret, str(world.settings.data_dir)]).returncode == 1
    assert hangar("create", "reader", "--scope", "read").returncode == 1  # one live per name
    bad = hangar("create", "x", "--scope", "approve")
    assert bad.returncode == 1 and "read, operate, land, admin" in bad.stderr

    assert call(world, "GET", "/api/jobs", token=secret)[0] == 200
    status, answer = call(world, "POST", "/api/jobs/job-x/cancel", {}, token=secret)
    assert status == 403 and "'operate'" in answer["error"]
    listed = hangar("list")
    assert "reader" in listed.stdout and "live" in listed.stdout and secret not in listed.stdout

    assert hangar("revoke", "reader").returncode == 0
    assert call(world, "GET", "/api/jobs", token=secret)[0] == 401
    status, trail = call(world, "GET", "/api/audit")
    actions = [(e["action"], e["target"], e["who"].split(":")[0]) for e in trail]
    assert ("token.create", "reader", "cli") in actions
    assert ("token.revoke", "reader", "cli") in actions


def test_tokens_through_the_api_and_the_audit_trail(served):
    world = served
    status, made = call(world, "POST", "/api/tokens", {"name": "bot", "scopes": ["read"]})
    assert status == 201 and made["token"].startswith("hgt_")
    assert call(world, "POST", "/api/tokens", {"name": "bot", "scopes": ["read"]})[0] == 409
    status, answer = call(world, "POST", "/api/tokens", {"name": "x", "scopes": ["approve"]})
    assert status == 422 and "scopes" in answer["error"]
    status, tokens = call(world, "GET", "/api/tokens")
    assert [t["name"] for t in tokens] == ["bot"] and "token_hash" not in tokens[0]
    # A token that can make tokens only with admin: read cannot.
    assert call(world, "GET", "/api/tokens", token=made["token"])[0] == 403
    assert call(world, "DELETE", "/api/tokens/bot")[0] == 200
    assert call(world, "GET", "/api/jobs", token=made["token"])[0] == 401
    status, trail = call(world, "GET", "/api/audit")
    assert [(e["who"], e["action"], e["target"]) for e in trail] == [
        ("token:operator", "token.create", "bot"),
        ("token:operator", "token.revoke", "bot"),
    ]
    status, later = call(world, "GET", f"/api/audit?after={trail[0]['seq']}")
    assert [e["action"] for e in later] == ["token.revoke"]


# -- the event stream ------------------------------------------------------------------


def test_the_event_stream_tells_of_a_job_without_polling(served):
    world = served
    reader = make_token(world, "watcher", ["read"])
    request = urllib.request.Request(f"{world.hangar.url}/api/events",
                                     headers={"Authorization": f"Bearer {reader}"})
    stream = urllib.request.urlopen(request, timeout=60)
    assert stream.headers["Content-Type"].startswith("text/event-stream")
    events: list[dict] = []

    def read() -> None:
        try:
            for line in stream:
                if line.startswith(b"data: "):
                    events.append(json.loads(line[6:]))
        except (OSError, ValueError, AttributeError):
            pass  # closed by the test under the reading thread

    threading.Thread(target=read, daemon=True).start()
    issue = world.hub.create_issue(world.repo, "add() is wrong", "", as_user=world.maintainer)
    status, started = call(world, "POST", "/api/jobs",
                           {"repo": world.repo, "issue": issue, "prompt": "fix the test"})
    assert status == 202
    wait_until(lambda: any(e["kind"] == "run" and e["job"] == started["job"]
                           and e["state"] == "exited" for e in events), 60, "the run's exit")
    seqs = [e["seq"] for e in events]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    stream.close()


# -- the description -------------------------------------------------------------------


def test_openapi_describes_exactly_the_routes_and_what_they_accept(served):
    world = served
    status, doc = call(world, "GET", "/api/openapi.json", token=None)
    assert status == 200 and doc["openapi"].startswith("3.1")
    openapi_spec_validator.validate(doc)  # a valid OpenAPI 3.1 document as a whole
    described = {(m.upper(), p) for p, ops in doc["paths"].items() for m in ops}
    served_routes = {(r.method, r.resource.canonical)
                     for r in world.hangar.app.router.routes()
                     if r.resource.canonical.startswith("/api/") and r.method != "HEAD"}
    assert described == served_routes
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            assert op["x-hangar-scope"] in (None, *ALL)
            assert op["x-hangar-scope"] is None or op["x-hangar-scope"] in op["description"]
            if "requestBody" not in op:
                continue
            schema = {**op["requestBody"]["content"]["application/json"]["schema"],
                      "components": doc["components"]}
            jsonschema.Draft202012Validator.check_schema(schema)
            validator = jsonschema.Draft202012Validator(schema)
            name = schema["$ref"].rsplit("/", 1)[1]
            for example in doc["components"]["schemas"][name]["examples"]:
                # What the description accepts, the route accepts (it may still 404 on
                # an id that does not exist, or make the example token).
                validator.validate(example)
                got, answer = call(world, method.upper(), sample_path(path), example)
                assert got != 422 and str(got) in op["responses"], (path, got, answer)
                # And what the description refuses, the route refuses with a reason.
                for wrong in ({**example, "unexpected": 1}, {}):
                    if not list(validator.iter_errors(wrong)):
                        continue
                    got, answer = call(world, method.upper(), sample_path(path), wrong)
                    assert got == 422 and answer["error"], (path, wrong, answer)
                    assert "422" in op["responses"]
            for param in op["parameters"]:
                if param["in"] == "query" and param["schema"].get("type") in ("integer",
                                                                              "number"):
                    got, answer = call(world, method.upper(),
                                       f"{sample_path(path)}?{param['name']}=many")
                    assert got in (404, 422), (path, param, answer)
                    if "{" not in path:
                        assert got == 422



# -- the calls that act, on the rows a comment would make ---------------------------------


def outcome(world, intent: str) -> dict:
    status, done = call(world, "GET", f"/api/intents/{intent}?wait_seconds=30")
    assert status == 200 and done["state"] == "done", done
    return done


def test_follow_up_verify_land_and_cancel_through_the_api(served):
    world = served
    operator = make_token(world, "operator-bot", ["read", "operate", "land"])
    issue = world.hub.create_issue(world.repo, "add() is wrong", "", as_user=world.maintainer)
    status, started = call(world, "POST", "/api/jobs", {"repo": world.repo, "issue": issue,
                                                         "prompt": "fix the test"}, operator)
    job = started["job"]
    pr = wait_until(lambda: world.verified(issue), 60, "a verified PR")["number"]

    status, asked = call(world, "POST", f"/api/jobs/{job}/turns", {"prompt": "tidy up"},
                         operator)
    assert status == 202 and asked["pr"] == pr
    assert outcome(world, asked["intent"])["outcome"].startswith("followup run-")
    view = wait_until(lambda: (v := call(world, "GET", f"/api/jobs/{job}", token=operator)[1])
                      and any(r["turn"] == 2 and r["stage"] == "done" for r in v["runs"])
                      and v, 60, "the second turn")
    assert any("followup turn 1" in t["what"] for t in view["timeline"])

    status, asked = call(world, "POST", f"/api/jobs/{job}/verify", {}, operator)
    assert outcome(world, asked["intent"])["outcome"] == "verification requested"
    status, answer = call(world, "POST", f"/api/jobs/{job}/verify", {"pr": pr + 100}, operator)
    assert status == 422 and f"#{pr}" in answer["error"]

    status, asked = call(world, "POST", "/api/land", {"job": job}, operator)
    assert status == 202 and outcome(world, asked["intent"])["outcome"] == "land requested"
    status, land = call(world, "GET", f"/api/land/{asked['land']}", token=operator)
    assert status == 200 and land["pr_number"] == pr and land["wished"] is True
    status, cancelled = call(world, "POST", f"/api/land/{asked['land']}/cancel", {}, operator)
    assert outcome(world, cancelled["intent"])["outcome"] == "land cancelled"
    assert call(world, "GET", f"/api/land/{asked['land']}", token=operator)[1]["state"] == \
        "cancelled"

    status, trail = call(world, "GET", "/api/audit")
    assert [e["action"] for e in trail if e["who"] == "token:operator-bot"] == [
        "job.start", "job.follow_up", "job.verify", "land.request", "land.cancel"]
    assert not world.replies(issue)  # nothing was refused on GitHub


def test_environment_builds_roll_back_and_unpin_with_admin(served):
    from app.envbuilds import rows as envbuilds
    from app.web.keys import STORE
    from tests.app.test_envbuilds import _built

    world = served
    store = world.hangar.app[STORE]
    first, _ = _built(store, "b1")
    failed, _ = _built(store, "b2", ok=False)
    operate = make_token(world, "ops", ["read", "operate", "land"])
    assert call(world, "GET", "/api/envs/acme/app/builds", token=operate)[0] == 403
    status, builds = call(world, "GET", "/api/envs/acme/app/builds")
    [lane] = builds["lanes"]
    assert status == 200 and lane["active"] == first.id and lane["pinned"] is None
    assert [b["state"] for b in lane["builds"]] == ["succeeded", "failed"]

    status, answer = call(world, "POST", f"/api/envs/builds/{failed.id}/rollback", {})
    assert status == 409 and "succeeded" in answer["error"]
    assert call(world, "POST", "/api/envs/builds/nope/rollback", {})[0] == 404
    status, rolled = call(world, "POST", f"/api/envs/builds/{first.id}/rollback", {})
    assert status == 200 and rolled["active"] == first.id
    assert envbuilds.lane(store, lane["lane"]).pinned_id == first.id
    status, unpinned = call(world, "POST", "/api/envs/acme/app/unpin", {})
    assert status == 200 and unpinned["unpinned"] == [lane["lane"]]
    status, trail = call(world, "GET", "/api/audit")
    assert [(e["action"], e["who"]) for e in trail][-2:] == [
        ("env.rollback", "token:operator"), ("env.unpin", "token:operator")]


def test_a_token_limited_to_repositories_reaches_nothing_else(served):
    """`--repo` (or `repos`): a token reaches the jobs, runs, asks and land requests of its
    repositories only, and nothing that spans every repository."""
    world = served
    issue = world.hub.create_issue(world.repo, "add() is wrong", "", as_user=world.maintainer)
    status, started = call(world, "POST", "/api/jobs",
                           {"repo": world.repo, "issue": issue, "prompt": "fix the test"})
    assert status == 202
    view = wait_until(lambda: (v := call(world, "GET", f"/api/jobs/{started['job']}")[1])
                      .get("runs") and v, 60, "the job's first run")
    run_id = view["runs"][0]["id"]
    status, made = call(world, "POST", "/api/tokens", {
        "name": "elsewhere", "scopes": ["read", "operate", "land"], "repos": ["acme/gadgets"]})
    assert status == 201 and made["repos"] == ["acme/gadgets"]
    other = made["token"]
    ours = make_token_for(world, "widgets-only", [world.repo])
    job = started["job"]
    for method, path, body in [
            ("GET", f"/api/jobs/{job}", None), ("GET", f"/api/jobs/{job}/ranking", None),
            ("GET", f"/api/runs/{run_id}", None), ("GET", f"/api/intents/{started['intent']}",
                                                   None),
            ("POST", f"/api/jobs/{job}/cancel", {}), ("POST", "/api/land", {"job": job}),
            ("POST", "/api/jobs", {"repo": world.repo, "issue": issue, "prompt": "again"}),
            ("GET", "/api/usage", None)]:
        status, answer = call(world, method, path, body, token=other)
        assert status == 403 and "elsewhere" in answer["error"], (path, status, answer)
    assert call(world, "GET", "/api/jobs", token=other) == (200, [])
    assert call(world, "GET", "/api/land", token=other) == (200, [])
    status, seen = call(world, "GET", f"/api/jobs/{job}", token=ours)
    assert status == 200 and seen["job"]["id"] == job
    assert [j["id"] for j in call(world, "GET", "/api/jobs", token=ours)[1]] == [job]
    status, answer = call(world, "POST", "/api/tokens", {
        "name": "admin-limited", "scopes": ["admin"], "repos": [world.repo]})
    assert status == 409 and "admin token reaches every repository" in answer["error"]


def make_token_for(world, name: str, repos: list[str]) -> str:
    status, made = call(world, "POST", "/api/tokens", {"name": name, "scopes": ["read"],
                                                       "repos": repos})
    assert status == 201, made
    return made["token"]
