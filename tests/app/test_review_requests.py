"""Who a verified PR asks for a review: the changed files' code owners and
`land.reviewers`, people and teams apart, each once, emails left out."""

from __future__ import annotations

from app.reviewers import candidates, code_owners

CODEOWNERS = """\
# owners
*            @acme/core
docs/        docs@example.com
calc.py      @rita @acme/math
/ci/**       @tina
"""


def test_the_last_matching_line_owns_each_changed_file():
    assert code_owners(CODEOWNERS, ["calc.py", "docs/a.md", "ci/x/run.sh"]) == [
        "@rita", "@acme/math", "docs@example.com", "@tina"]
    assert code_owners(CODEOWNERS, ["README.md"]) == ["@acme/core"]
    assert code_owners(None, ["calc.py"]) == []


def test_people_and_teams_each_once_and_no_email():
    people, teams = candidates(["@rita", "@acme/math", "docs@example.com"],
                               ["Rita", "tina", "@tina", "acme/math", "acme/Docs"])
    assert people == ["rita", "tina"]
    assert teams == ["math", "Docs"]
