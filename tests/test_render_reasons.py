"""Concerns decide, render words: every reason code of every concern has a sentence in
render, the sentences read as they did, and no concern hands a sentence of its own to
GitHub."""

from __future__ import annotations

import ast
import re
from enum import StrEnum

import pytest

from app import autofix, fanout, landing, models, render, runs
from app.commands import intents
from app.render import autofix as fix_words
from app.render import endings as end_words
from app.render import landing as land_words
from app.render import replies
from app.render import usage as usage_words
from app.render import verify as verify_words
from app.render.reasons import Why, word
from tests.sources import ROOT, app_files

# (a concern's codes, render's table for them)
TABLES: list[tuple[type[StrEnum], dict]] = [
    (landing.LandReason, land_words.LAND_REASONS),
    (landing.NotCounted, land_words.NOT_COUNTED),
    (landing.AutoLandOut, land_words.AUTO_OUT),
    (landing.GateFact, land_words.GATE_FACTS),
    (landing.Needs, land_words.GATE_NEEDS),
    (landing.Cannot, land_words.GATE_CANNOT),
    (intents.Answer, replies.ANSWERS),
    (autofix.Stop, fix_words.STOPPED),
    (runs.VerifyTrouble, verify_words.ERRORS),
    (runs.VerifyTrouble, verify_words.FIXES),
    (models.RunWarning, render.RUN_WARNINGS),
    (runs.PauseWhy, usage_words.PAUSES),
    (fanout.FanoutWarning, usage_words.FANOUT_WARNINGS),
    (runs.Ending, end_words.ENDINGS),
    (runs.Ending, end_words.NEXT_STEPS),
    (runs.Wait, end_words.WAITS),
    (runs.Restart, end_words.RESTARTED),
]


@pytest.mark.parametrize(("codes", "table"), TABLES, ids=lambda v: getattr(v, "__name__", ""))
def test_every_code_has_a_sentence_and_every_sentence_a_code(codes, table):
    assert {c.value for c in codes} - set(table) == set(), "codes render cannot word"
    assert set(table) - {c.value for c in codes} == set(), "sentences no code reaches"


SHA = "a" * 40


@pytest.mark.parametrize(("table", "why", "sentence"), [
    (land_words.LAND_REASONS,
     Why(landing.LandReason.APPROVALS_WANTED, missing=1, head=SHA, other_than="mona"),
     "waiting for 1 approval(s) of `aaaaaaa` from someone with write access other than @mona"),
    (land_words.LAND_REASONS,
     Why(landing.LandReason.APPROVALS_WANTED, missing=2, head=SHA, other_than=None),
     "waiting for 2 approval(s) of `aaaaaaa` from someone with write access"),
    (land_words.LAND_REASONS,
     Why(landing.LandReason.CHECKS_FAILED, head=SHA, checks=["ci / test", "lint"]),
     "required check(s) failed on `aaaaaaa`: ci / test, lint"),
    (land_words.LAND_REASONS,
     Why(landing.LandReason.CHECK_LATE, check="ci / test", running=False, head=SHA,
         minutes=30.0),
     "check ci / test never reported on `aaaaaaa` within 30 minutes (land.ci_timeout_minutes);"
     " check that it still runs under this name, then `/hangar land`"),
    (land_words.LAND_REASONS,
     Why(landing.LandReason.CONFLICT, base="main", files=["calc.py"]),
     "the branch conflicts with main in `calc.py`; hangar does not resolve conflicts "
     "silently: comment `/hangar resolve` (or press \"Resolve conflicts\" on hangar / land) "
     "for a turn that merges main and resolves them, then is verified again; or resolve them "
     "by hand"),
    (land_words.LAND_REASONS,
     Why(landing.LandReason.SENSITIVE, paths=[],
         gap=Why(landing.LandReason.TOO_MANY_FILES, limit=3000)),
     "the pull request changes 3000 files or more, more than GitHub lists, so hangar treats "
     "it as touching sensitive paths: an approver must comment `/hangar land --ack-sensitive`"),
    (land_words.LAND_REASONS, Why(landing.LandReason.LANDED, sha=SHA), "merged as `aaaaaaa`"),
    (land_words.NOT_COUNTED,
     Why(landing.NotCounted.OTHER_COMMIT, user="rita", approved="b" * 40, head=SHA),
     "@rita approved `bbbbbbb`, but the head is now `aaaaaaa`; approvals are bound to the "
     "exact commit"),
    (land_words.GATE_FACTS, Why(landing.GateFact.BYPASS, ruleset="main"),
     "hangar's App is a bypass actor of ruleset 'main': remove it from the bypass list, or "
     "the ruleset is no gate for hangar"),
    (replies.ANSWERS, Why(intents.Answer.NO_WRITE_ACCESS, login="eve"),
     "Hi @eve, hangar takes `/hangar` commands only from people with write access to this "
     "repository, so nothing was started. A maintainer can comment the command for you. "
     "(`/hangar help` works for everyone.)"),
    (replies.ANSWERS, Why(intents.Answer.NO_SUCH_ATTEMPT, n=3, have=[1, 2]),
     "Attempt 3 has no pull request to keep; attempts with one: 1, 2."),
    (replies.ANSWERS, Why(intents.Answer.NO_SUCH_ATTEMPT, n=3, have=[]),
     "Attempt 3 has no pull request to keep; attempts with one: none."),
    (replies.ANSWERS, Why(intents.Answer.USAGE, message="`/hangar run` needs an instruction"),
     "`/hangar run` needs an instruction\n\n`/hangar help` lists every command."),
    (fix_words.STOPPED, Why(autofix.Stop.TURNS_USED, max_turns=2),
     "auto-fix used its 2 turn(s); comment `/hangar <instruction>` to ask for another turn, "
     "or fix it by hand"),
    (fix_words.STOPPED, Why(autofix.Stop.REVIEW_NOT_STARTED, author="rita",
                            because=autofix.Stop.OFF),
     "@rita requested changes, but hangar did not start a turn: auto-fix is off for this "
     "pull request"),
    (verify_words.FIXES, Why(runs.VerifyTrouble.NO_VERIFY_COMMAND, env="python"),
     "add `verify: {command: ...}` to the environment `python`, then press **Verify again** "
     "(or comment `/hangar verify`)"),
    (verify_words.ERRORS, Why(runs.VerifyTrouble.TIMED_OUT, minutes=2.5),
     "timed out after 2.5 minutes"),
    (render.RUN_WARNINGS, Why(models.RunWarning.PUBLISH_FAILED),
     "could not publish from the sandbox; collecting what reached GitHub"),
])
def test_sentences_read_as_before(table, why, sentence):
    assert word(table, why) == sentence


def test_auto_fix_keeps_a_code_on_its_row_and_render_words_it_when_shown():
    row = models.AutofixRow(id="a", job_id="j", repo="o/r", pr_number=7, stopped=autofix.kept(
        Why(autofix.Stop.TURNS_USED, max_turns=2)))
    stored = row.model_dump_json()
    assert "turns_used" in stored and "auto-fix used" not in stored
    back = models.AutofixRow.model_validate_json(stored)
    assert fix_words.status_note(7, back.stopped) == (
        "**Auto-fix on #7:** auto-fix used its 2 turn(s); comment `/hangar <instruction>` to "
        "ask for another turn, or fix it by hand")


def test_a_sentence_a_row_kept_before_codes_is_shown_as_it_was():
    row = models.AutofixRow.model_validate({
        "id": "a", "job_id": "j", "repo": "o/r", "pr_number": 7,
        "stopped": "auto-fix is off for this pull request"})
    assert fix_words.stopped(row.stopped) == "auto-fix is off for this pull request"


def test_a_code_without_a_sentence_is_an_error_not_silence():
    with pytest.raises(KeyError):
        word(land_words.LAND_REASONS, Why("no_such_code"))


# -- no concern words things itself ----------------------------------------------------

# Calls whose text reaches GitHub (or a land request's shown reason), and the position of
# that text among their arguments; and the row fields that are shown as they are stored.
SPEAKING = {"reply": 2, "upsert_comment": 2, "move": 3, "set_reason": 1}
SHOWN_FIELDS = ("stopped", "label", "reason", "fix", "title", "summary", "description",
                "warnings", "github_says")
CONCERNS = ("landing", "commands", "autofix", "runs", "fanout", "repositories", "envbuilds")
# A command's declaration is its own self-description (usage, summary, examples), the way
# a Prow plugin provides its help: `/hangar help` quotes it, and so may the grammar.
DECLARATIONS = {"app/commands/grammar.py"}
CONCERN_FILES = [path.relative_to(ROOT).as_posix() for name in CONCERNS
                 for path in app_files(name)
                 if path.relative_to(ROOT).as_posix() not in DECLARATIONS]
WORDS = re.compile(r"[A-Za-z]+ [A-Za-z]+")  # a marker and a newline are no sentence


def sentences_handed_over(source: str) -> list[tuple[int, str]]:
    """(line, call) for each speaking call given a literal sentence: words in a string
    constant or in an f-string's text."""
    def worded(nodes: list[ast.AST]) -> bool:
        return any(isinstance(a, ast.Constant) and isinstance(a.value, str)
                   and WORDS.search(a.value) for node in nodes for a in ast.walk(node))

    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Dict) and worded([
                value for key, value in zip(node.keys, node.values, strict=True)
                if isinstance(key, ast.Constant) and key.value in SHOWN_FIELDS]):
            found.append((node.lineno, "a shown field"))
        if not isinstance(node, ast.Call):
            continue
        if worded([k.value for k in node.keywords if k.arg in SHOWN_FIELDS]):
            found.append((node.lineno, "a shown field"))
            continue
        name = getattr(node.func, "attr", None) or getattr(node.func, "id", None)
        if name not in SPEAKING:
            continue
        args = [*node.args, *(k.value for k in node.keywords if k.arg in ("text", "body"))]
        position = SPEAKING[name]
        if worded(args[position:position + 1] + args[len(node.args):]):
            found.append((node.lineno, name))
    return sorted(found)


def test_the_guard_finds_a_sentence_where_it_would_be():
    worded_here = '''
async def cancel(engine, ops, intent, request):
    await reply(ops, intent, f"#{request.pr_number} is already landed.")
    move(engine, request, "cancelled", "the pull request was closed")
    await ops.upsert_comment(1, marker, marker + "\\nThis approval does not count")
    await reply(ops, intent, words.nothing_to_cancel(1, "landed"), key=f"k-{intent.id}")
    await ops.upsert_comment(1, marker, f"{marker}\\n{replies.answer(why)}")
    patch(engine, row.id, stopped=None if on else "auto-fix is off", due_at=0)
    save(engine, changed(row, **{"stopped": f"hangar stopped ({reason})"}), active=False)
    patch(engine, row.id, stopped=words.stopped(Why(Stop.OFF)))
'''
    assert [name for _, name in sentences_handed_over(worded_here)] == [
        "reply", "move", "upsert_comment", "a shown field", "a shown field"]


def test_the_guard_reads_every_file_of_a_concern_folder():
    assert {"app/landing/steps.py", "app/runs/verify.py", "app/fanout/commands.py"} <= set(
        CONCERN_FILES)


@pytest.mark.parametrize("path", CONCERN_FILES)
def test_concerns_hand_no_sentence_of_their_own_to_github(path):
    assert sentences_handed_over((ROOT / path).read_text()) == []
