"""Minimal HTML for the github.com pages hangar links to, so every link in a demo leads
somewhere: an issue or a pull request with its comments, a check run with its output, a
commit. Everything is escaped; markdown is shown as text. As on GitHub for a visitor who
is not signed in, a private repository's pages answer 404.
"""

from __future__ import annotations

from html import escape

from aiohttp import web

from fakehub import gitrepo
from fakehub.rest.common import hub
from fakehub.state import Repo

routes = web.RouteTableDef()


def _page(title: str, body: str, status: int = 200) -> web.Response:
    text = (f"<!doctype html><html lang=en><head><meta charset=utf-8>"
            f"<meta name=viewport content=\"width=device-width,initial-scale=1\">"
            f"<title>{escape(title)}</title></head><body><h1>{escape(title)}</h1>{body}"
            "</body></html>")
    return web.Response(text=text, status=status, content_type="text/html")


def _not_found() -> web.Response:
    return _page("Page not found", "<p>This is not the web page you are looking for.</p>",
                 404)


def _repo(request: web.Request) -> Repo | None:
    store = hub(request).store
    asked = f"{request.match_info['owner']}/{request.match_info['repo']}"
    repo = store.repo(asked)
    moved = store.repo_renamed_from(asked) if repo is None else None
    if moved is not None and not moved.private:  # GitHub sends an old name's visitors on
        rest = request.rel_url.raw_path.split("/", 3)[3]
        raise web.HTTPMovedPermanently(f"{hub(request).base_url}/{moved.full_name}/{rest}")
    return None if repo is None or repo.private else repo


def _number(request: web.Request, name: str) -> int | None:
    value = request.match_info[name]
    return int(value) if value.isdigit() else None


@routes.get("/{owner}/{repo}/issues/{number}")
@routes.get("/{owner}/{repo}/pull/{number}")
async def issue_page(request: web.Request) -> web.Response:
    repo, number = _repo(request), _number(request, "number")
    store = hub(request).store
    issue = store.issue(repo, number) if repo and number is not None else None
    if issue is None:
        return _not_found()
    wants_pull = "/pull/" in request.path
    if wants_pull != (issue.pull is not None):  # GitHub redirects between the two
        kind = "pull" if issue.pull else "issues"
        raise web.HTTPFound(f"/{request.match_info['owner']}/{request.match_info['repo']}"
                            f"/{kind}/{number}")
    state = "merged" if issue.pull and issue.pull.merged else issue.state
    parts = [f"<p id=state>{escape(state)} · opened by {escape(issue.user.login)}</p>"]
    if issue.pull:
        pull = issue.pull
        parts.append(f"<p id=branches>{escape(pull.head_ref)} → {escape(pull.base_ref)} at "
                     f"<a href=\"/{escape(_full(repo))}/commit/{escape(pull.head_sha)}\">"
                     f"<code>{escape(pull.head_sha[:7])}</code></a></p>")
        checks = store.check_runs_for(repo, pull.head_sha)
        if checks:
            parts.append("<ul id=checks>" + "".join(
                f"<li><a href=\"/{escape(_full(repo))}/runs/{c.id}\">{escape(c.name)}</a> "
                f"{escape(c.conclusion or c.status)}</li>" for c in checks) + "</ul>")
    parts.append(f"<pre id=body>{escape(issue.body or '')}</pre>")
    comments = sorted((c for c in store.comments.values()
                       if c.repo_id == repo.id and c.issue_number == number),
                      key=lambda c: c.id)
    parts += [f"<div class=comment id=comment-{c.id}><p><b>{escape(c.user.login)}</b></p>"
              f"<pre>{escape(c.body)}</pre></div>" for c in comments]
    return _page(f"{issue.title} #{number}", "".join(parts))


@routes.get("/{owner}/{repo}/runs/{check_id}")
async def check_run_page(request: web.Request) -> web.Response:
    repo, check_id = _repo(request), _number(request, "check_id")
    check = hub(request).store.check_runs.get(check_id) if check_id is not None else None
    if repo is None or check is None or check.repo_id != repo.id:
        return _not_found()
    output = check.output or {}
    return _page(check.name, (
        f"<p id=state>{escape(check.conclusion or check.status)} on "
        f"<a href=\"/{escape(_full(repo))}/commit/{escape(check.head_sha)}\">"
        f"<code>{escape(check.head_sha[:7])}</code></a></p>"
        f"<h2 id=title>{escape(str(output.get('title') or ''))}</h2>"
        f"<pre id=summary>{escape(str(output.get('summary') or ''))}</pre>"
        f"<pre id=text>{escape(str(output.get('text') or ''))}</pre>"))


@routes.get("/{owner}/{repo}/commit/{sha}")
async def commit_page(request: web.Request) -> web.Response:
    repo = _repo(request)
    sha = request.match_info["sha"]
    if repo is None or not all(c in "0123456789abcdef" for c in sha) or not 4 <= len(sha) <= 40:
        return _not_found()
    try:
        commit = gitrepo.commit_info(repo.path, sha)
    except (gitrepo.GitError, IndexError, ValueError):
        return _not_found()
    return _page(commit.message.splitlines()[0] if commit.message else commit.sha, (
        f"<p id=sha><code>{escape(commit.sha)}</code> by {escape(commit.author_name)} "
        f"on {escape(commit.author_date)}</p><pre id=message>{escape(commit.message)}</pre>"))


def _full(repo: Repo) -> str:
    return f"{repo.owner.login}/{repo.name}"
