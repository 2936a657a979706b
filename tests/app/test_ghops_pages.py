"""hangar reads every page of a list that can be long: a matrix CI reports more check
runs and statuses on one commit than GitHub's default page (30) holds."""

from __future__ import annotations

import aiohttp
import pytest
from gidgethub import QueryError

from app.github.client import AppAuth, RetryPolicy
from app.github.ops import RepoOps
from tests.conftest import hangar_permissions

FAST = RetryPolicy(attempts=2, base_delay_s=0.01, write_spacing_s=0)


async def test_check_runs_and_statuses_of_a_matrix_are_read_whole(fakehub):
    app = fakehub.create_app(name="hangar", permissions=hangar_permissions())
    fakehub.create_user("acme")
    fakehub.create_repo("acme", "widgets", {"README.md": "# widgets\n"})
    installation = fakehub.install(app.id, "acme", ["acme/widgets"])
    sha = fakehub.ref_sha("acme/widgets", "main")
    for n in range(105):  # more than one page even at per_page=100
        fakehub.complete_check("acme/widgets", sha, f"ci / test ({n})", "success")
        fakehub.set_status("acme/widgets", sha, f"lint ({n})", "success", as_user="acme")
    async with aiohttp.ClientSession() as session:
        auth = AppAuth(app.id, app.private_key_pem, api_url=fakehub.api_url, session=session,
                       retry=FAST)
        ops = RepoOps(await auth.client(installation), "acme/widgets")
        runs = await ops.check_runs(sha)
        statuses = await ops.statuses(sha)
    assert len({r["name"] for r in runs}) == 105
    assert len({s["context"] for s in statuses}) == 105


async def test_a_required_check_as_the_101st_rule_is_in_the_gate(fakehub):
    """GET /rules/branches/{b} is paginated: the rule that asks for CI may be on page 2."""
    from app.landing import branch_gate, read_rules

    app = fakehub.create_app(name="hangar", permissions=hangar_permissions())
    fakehub.create_user("acme")
    fakehub.create_repo("acme", "widgets", {"README.md": "# widgets\n"})
    installation = fakehub.install(app.id, "acme", ["acme/widgets"])
    for n in range(100):
        fakehub.set_ruleset("acme/widgets", {"name": f"filler {n}", "enforcement": "active",
                                             "target": "branch", "rules": [{"type": "deletion"}]})
    fakehub.set_ruleset("acme/widgets", {"name": "ci", "enforcement": "active",
                                         "target": "branch", "rules": [{
                                             "type": "required_status_checks", "parameters": {
                                                 "required_status_checks": [
                                                     {"context": "ci / test"}],
                                                 "strict_required_status_checks_policy": False}}]})
    async with aiohttp.ClientSession() as session:
        auth = AppAuth(app.id, app.private_key_pem, api_url=fakehub.api_url, session=session,
                       retry=FAST)
        ops = RepoOps(await auth.client(installation), "acme/widgets")
        rules, _ = await read_rules(ops, "main")
    assert len(rules) == 101
    assert [c.context for c in branch_gate(rules).checks] == ["ci / test"]


async def test_only_hangars_own_app_comments_are_hangars(fakehub):
    """Any App's bot can copy hangar's hidden marker: the comment is hangar's only when
    GitHub says hangar's App made it."""
    app = fakehub.create_app(name="hangar", permissions=hangar_permissions())
    other = fakehub.create_app(name="copycat", permissions=hangar_permissions())
    fakehub.create_user("acme")
    fakehub.create_repo("acme", "widgets", {"README.md": "# widgets\n"})
    installation = fakehub.install(app.id, "acme", ["acme/widgets"])
    fakehub.install(other.id, "acme", ["acme/widgets"])
    issue = fakehub.create_issue("acme/widgets", "x", as_user="acme")
    marker = "<!-- hangar:status job-1 -->"
    fakehub.comment("acme/widgets", issue, f"{marker}\nall done", as_user=other.bot_login)
    async with aiohttp.ClientSession() as session:
        auth = AppAuth(app.id, app.private_key_pem, api_url=fakehub.api_url, session=session,
                       retry=FAST)
        ops = RepoOps(await auth.client(installation), "acme/widgets", own_app_id=app.id)
        assert await ops.find_own_comment(issue, marker) is None
        fakehub.comment("acme/widgets", issue, f"{marker}\nhangar's", as_user=app.bot_login)
        found = await ops.find_own_comment(issue, marker)
    assert found["body"].endswith("hangar's")


async def test_files_at_a_commit_are_read_in_one_call_as_rest_reads_them(fakehub):
    """A verified PR's review request reads hangar.yml and the three places CODEOWNERS may
    be at the base commit: one GraphQL query instead of four charged REST reads."""
    app = fakehub.create_app(name="hangar", permissions=hangar_permissions())
    fakehub.create_user("acme")
    fakehub.create_repo("acme", "widgets", {
        "README.md": "# widgets\n", "docs/CODEOWNERS": "/src/ @rita\n",
        "logo.png": "\x00PNG\x00"})
    installation = fakehub.install(app.id, "acme", ["acme/widgets"])
    sha = fakehub.ref_sha("acme/widgets", "main")
    paths = [".github/hangar.yml", ".github/CODEOWNERS", "CODEOWNERS", "docs/CODEOWNERS",
             "docs", "logo.png"]
    async with aiohttp.ClientSession() as session:
        auth = AppAuth(app.id, app.private_key_pem, api_url=fakehub.api_url, session=session,
                       retry=FAST)
        ops = RepoOps(await auth.client(installation), "acme/widgets")
        calls = len(fakehub.api_calls())
        texts = await ops.texts_at(sha, paths)
        graphql_calls = fakehub.api_calls()[calls:]
        one_by_one = {path: await ops.get_text(path, ref=sha) for path in paths}
    assert texts == one_by_one
    assert texts["docs/CODEOWNERS"] == "/src/ @rita\n" and texts["docs"] is None
    # The binary file is read through REST, as get_text reads it; the rest in one query.
    assert [(method, path) for method, path, _ in graphql_calls] == [
        ("POST", "/graphql"), ("GET", "/repos/acme/widgets/contents/logo.png")]


async def test_the_same_query_says_whether_classic_protection_guards_the_branch(fakehub):
    """Whether the base has classic protection, asked beside the files: its absence is a
    404 REST charges every time. As REST answers it: an App without administration may not
    read it (GitHub refuses that field), the files are then read alone."""
    fakehub.create_user("acme")
    fakehub.create_repo("acme", "widgets", {"README.md": "# widgets\n"})
    sha = fakehub.ref_sha("acme/widgets", "main")
    paths = [".github/hangar.yml", "README.md"]
    app = fakehub.create_app(name="hangar", permissions=hangar_permissions())
    blind = fakehub.create_app(name="blind", permissions={
        k: v for k, v in hangar_permissions().items() if k != "administration"})
    async with aiohttp.ClientSession() as session:
        async def ops_of(some_app) -> RepoOps:
            auth = AppAuth(some_app.id, some_app.private_key_pem, api_url=fakehub.api_url,
                           session=session, retry=FAST)
            installation = fakehub.install(some_app.id, "acme", ["acme/widgets"])
            return RepoOps(await auth.client(installation), "acme/widgets")

        ops = await ops_of(app)
        texts, protected = await ops.texts_and_protection(sha, paths, "main")
        assert protected is False and await ops.protection("main") is None
        assert texts == {".github/hangar.yml": None, "README.md": "# widgets\n"}
        fakehub.protect_branch("acme/widgets", "main")
        assert (await ops.texts_and_protection(sha, paths, "main"))[1] is True
        assert await ops.protection("main") is not None
        assert (await ops.texts_and_protection(sha, paths, "gone"))[1] is None
        assert (await ops.texts_and_protection(sha, paths))[1] is None
        blind_ops = await ops_of(blind)
        with pytest.raises(QueryError, match="not accessible"):
            await blind_ops.texts_and_protection(sha, paths, "main")
        assert await blind_ops.texts_at(sha, paths) == texts
