"""fakehub's web pages for the links hangar makes: an issue, a PR, a check run, a commit,
each escaped, and a private repository's pages hidden as GitHub hides them from visitors."""

from __future__ import annotations

import urllib.error
import urllib.request


def fetch(url: str) -> tuple[int, str, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as page:
            return page.status, page.geturl(), page.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, url, exc.read().decode()


def test_every_link_hangar_makes_leads_to_a_page(fakehub):
    fakehub.create_user("mona")
    fakehub.create_repo("mona", "widgets", {"a.txt": "a\n"})
    issue = fakehub.create_issue("mona/widgets", "<b>bold</b> title", "body", as_user="mona")
    fakehub.comment("mona/widgets", issue, "<script>alert(1)</script>", as_user="mona")
    sha = fakehub.push_files("mona/widgets", "fix", {"a.txt": "b\n"}, "Fix a", as_user="mona")
    pr = fakehub.open_pr("mona/widgets", "fix", "Fix it", as_user="mona")
    check = fakehub.complete_check("mona/widgets", sha, "hangar / verify", "success",
                                   summary="passed <in> a clean sandbox")
    web = f"{fakehub.base_url}/mona/widgets"

    status, _, page = fetch(f"{web}/issues/{issue}")
    assert status == 200 and "&lt;b&gt;bold&lt;/b&gt; title" in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "<script>" not in page
    status, _, page = fetch(f"{web}/pull/{pr}")
    assert status == 200 and "fix → main" in page and "hangar / verify" in page
    assert fetch(f"{web}/issues/{pr}")[1] == f"{web}/pull/{pr}"  # as GitHub redirects
    status, _, page = fetch(f"{web}/runs/{check}")
    assert status == 200 and "passed &lt;in&gt; a clean sandbox" in page
    status, _, page = fetch(f"{web}/commit/{sha}")
    assert status == 200 and sha in page and "Fix a" in page
    for missing in (f"{web}/issues/999", f"{web}/runs/999999", f"{web}/commit/{'0' * 40}",
                    f"{fakehub.base_url}/mona/nothing/issues/1"):
        assert fetch(missing)[0] == 404, missing
    fakehub.set_private("mona/widgets")
    assert fetch(f"{web}/issues/{issue}")[0] == 404
