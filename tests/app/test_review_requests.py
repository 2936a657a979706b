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


def test_a_refused_review_request_quotes_github_not_a_guess():
    """GitHub's 422 says why it took none of the request; the status comment quotes it
    instead of guessing a cause."""
    from app.render.reviewers import waiting_note

    said = ("Reviews may only be requested from collaborators. One or more of the users or "
            "teams you specified is not a collaborator of the acme/widgets repository.")
    note = waiting_note("mona", 7, [], [], refused=said)
    assert "GitHub refused hangar's review request, saying `Reviews may only be requested" \
        in note
    assert "cannot review here" not in note
    assert "review requested from @rita" in waiting_note("mona", 7, ["rita"], [], refused=None)
