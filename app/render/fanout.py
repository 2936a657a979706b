"""Fan-out's words in the status comment: a ranking that waits for CI (grading), the
heads whose CI had not finished when the wait ran out, and a weighted ranking's scores."""

from __future__ import annotations

from app.models import Job
from app.render.text import clock, short


def grading_line(job: Job) -> str | None:
    """While the ranking waits for CI on the attempts' heads: which, and until when."""
    waiting = job.grading.get("waiting") if not job.ranking else None
    if not waiting:
        return None
    return ("**Grading:** every attempt has ended; the ranking waits for the repository's "
            f"CI, still running on {_heads(waiting)}, until {clock(job.grading['until'])} "
            "at the latest.")


def unfinished_line(job: Job) -> str | None:
    """The ranking was made with CI still running on these heads: said as the fact it is."""
    unfinished = job.grading.get("unfinished") if job.ranking else None
    if not unfinished:
        return None
    return (f"**CI had not finished** after {_span(job.grading.get('waited', 0.0))} on "
            f"{_heads(unfinished)}; the ranking counts their CI as pending.")


def _heads(heads: dict) -> str:
    return ", ".join(f"attempt {a}'s head `{short(sha)}`"
                     for a, sha in sorted(heads.items(), key=lambda kv: int(kv[0])))


def _span(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min"


WEIGHED_HEAD = ("**Ranking** (eligible first: a pull request, verification and CI not "
                "failed; then the score this repository's `fanout.weights` give, higher "
                "first):")

# What each weighed value is, as the score line names it (app.fanout.ranking.WEIGHED).
VALUE_NAMES = {"ci": "CI passed", "verification": "verified", "diff_lines": "changed lines",
               "files": "files", "duration": "minutes"}


def weighed(ranking: list[dict]) -> bool:
    return any("score" in entry for entry in ranking)


def score_words(entry: dict) -> str:
    """The score as the sum it is, each value times its weight; '' unweighted."""
    if "score" not in entry:
        return ""
    terms = " + ".join(f"{VALUE_NAMES.get(name, name)} {value:g} × {weight:g}"
                       for name, value, weight in entry.get("score_terms", []))
    return f"; score {entry['score']:g}" + (f" = {terms}" if terms else " (every weight 0)")
