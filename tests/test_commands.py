"""The `/hangar` command grammar: each case is a comment body and what hangar reads in it."""

from __future__ import annotations

import re
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.commands.grammar import (
    COMMANDS,
    MAX_COMMANDS_PER_COMMENT,
    MAX_PROMPT_CHARS,
    Command,
    CommandSpec,
    UsageError,
    help_text,
    parse,
    spec_for,
)


@dataclass(frozen=True)
class Err:
    """An expected UsageError: its line, and fragments its message must contain."""

    line: int
    says: tuple[str, ...] = ()


def run(prompt: str, line: int = 1) -> Command:
    return Command("run", {"prompt": prompt}, line)


def cmd(name: str, line: int = 1, **args: object) -> Command:
    return Command(name, args, line)


def err(line: int, *says: str) -> Err:
    return Err(line, says)


def check(body: str, expected: list[Command | Err]) -> None:
    got = parse(body)
    assert len(got) == len(expected), got
    for item, want in zip(got, expected, strict=True):
        if isinstance(want, Err):
            assert isinstance(item, UsageError), item
            assert item.line == want.line
            for fragment in want.says:
                assert fragment in item.message
        else:
            assert item == want


def cases(*rows: tuple[str, str, list[Command | Err]]) -> list:
    return [pytest.param(body, expected, id=name) for name, body, expected in rows]


# --- every command, as written ---------------------------------------------------------

HAPPY = cases(
    ("prompt", "/hangar fix the flaky test", [run("fix the flaky test")]),
    ("prompt capitalised", "/hangar Fix the test", [run("Fix the test")]),
    ("run", "/hangar run verify that the cache expires", [run("verify that the cache expires")]),
    ("run keyword-led", "/hangar RUN cancel the job", [run("cancel the job")]),
    ("run run", "/hangar run run the tests", [run("run the tests")]),
    ("try", "/hangar try 3 fix the login test", [cmd("try", n=3, prompt="fix the login test")]),
    ("try 1", "/hangar try 1 x", [cmd("try", n=1, prompt="x")]),
    ("try 10", "/hangar TRY 10 x", [cmd("try", n=10, prompt="x")]),
    ("pick", "/hangar pick 2", [cmd("pick", n=2, force=False)]),
    ("pick 1", "/hangar pick 1", [cmd("pick", n=1, force=False)]),
    ("pick 10", "/hangar Pick 10", [cmd("pick", n=10, force=False)]),
    ("pick forced", "/hangar pick 3 --force", [cmd("pick", n=3, force=True)]),
    ("land", "/hangar land", [cmd("land", ack_sensitive=False, ack_large=False)]),
    ("land ack", "/hangar land --ack-sensitive",
     [cmd("land", ack_sensitive=True, ack_large=False)]),
    ("land ack shouted", "/hangar LAND --ACK-SENSITIVE",
     [cmd("land", ack_sensitive=True, ack_large=False)]),
    ("land ack large", "/hangar land --ack-large",
     [cmd("land", ack_sensitive=False, ack_large=True)]),
    ("land both acks", "/hangar land --ack-large --ack-sensitive",
     [cmd("land", ack_sensitive=True, ack_large=True)]),
    ("resolve", "/hangar resolve", [cmd("resolve", prompt="")]),
    ("resolve with guidance", "/hangar resolve keep both tests\nand the new name",
     [cmd("resolve", prompt="keep both tests\nand the new name")]),
    ("land cancel", "/hangar land cancel", [cmd("land_cancel")]),
    ("land cancel capitalised", "/hangar Land Cancel", [cmd("land_cancel")]),
    ("cancel", "/hangar cancel", [cmd("cancel")]),
    ("verify", "/hangar verify", [cmd("verify")]),
    ("status", "/hangar status", [cmd("status")]),
    ("retry", "/hangar retry", [cmd("retry")]),
    ("resume", "/hangar resume", [cmd("resume")]),
    ("resume shouted", "/hangar RESUME", [cmd("resume")]),
    ("help", "/hangar help", [cmd("help")]),
    ("autofix on", "/hangar autofix on", [cmd("autofix", enabled=True)]),
    ("autofix off", "/hangar autofix off", [cmd("autofix", enabled=False)]),
    ("autofix shouted", "/hangar AUTOFIX ON", [cmd("autofix", enabled=True)]),
    ("phone capitalised", "/Hangar status", [cmd("status")]),
    ("shouted", "/HANGAR help", [cmd("help")]),
    ("three spaces in", "   /hangar status", [cmd("status")]),
    ("tab after", "/hangar\tstatus", [cmd("status")]),
    ("trailing blanks", "/hangar status  \t", [cmd("status")]),
    ("inner spacing kept", "/hangar   fix   it  ", [run("fix   it")]),
    (
        "keyword prefix is a prompt",
        "/hangar cancellation is broken",
        [run("cancellation is broken")],
    ),
    ("after other text", "Thanks for the report.\n\n/hangar fix it", [run("fix it", line=3)]),
    ("unicode prompt", "/hangar répare le test ✓", [run("répare le test ✓")]),
)


@pytest.mark.parametrize(("body", "expected"), HAPPY)
def test_every_command(body: str, expected: list) -> None:
    check(body, expected)


# --- prompts over several lines, several commands ---------------------------------------

MULTI = cases(
    (
        "prompt continues",
        "/hangar fix the test\nit fails on CI\n\nsee the log\n",
        [run("fix the test\nit fails on CI\n\nsee the log")],
    ),
    (
        "try prompt below",
        "/hangar try 2\nfix the login test",
        [cmd("try", n=2, prompt="fix the login test")],
    ),
    ("run prompt below", "/hangar run\n\nfix it", [run("fix it")]),
    (
        "code in the prompt is context",
        "/hangar fix this:\n```python\n/hangar cancel\nraise\n```\nthanks",
        [run("fix this:\n```python\n/hangar cancel\nraise\n```\nthanks")],
    ),
    (
        "quote in the prompt is context",
        "/hangar fix\n> Traceback\n/hangar status",
        [run("fix\n> Traceback"), cmd("status", line=3)],
    ),
    (
        "indented command is prompt text",
        "/hangar fix\n    /hangar cancel",
        [run("fix\n    /hangar cancel")],
    ),
    (
        "lookalike is prompt text",
        "/hangar fix\n/hangarx cancel",
        [run("fix\n/hangarx cancel")],
    ),
    ("text after a keyword is ignored", "/hangar status\nthanks!", [cmd("status")]),
    ("two prompts", "/hangar fix A\n/hangar fix B", [run("fix A"), run("fix B", line=2)]),
    (
        "mixed",
        "/hangar cancel\n/hangar try 2 again\nwith care\n\n/hangar status",
        [cmd("cancel"), cmd("try", line=2, n=2, prompt="again\nwith care"), cmd("status", line=5)],
    ),
    (
        "error does not stop the rest",
        "/hangar cancel now\n/hangar status",
        [err(1, "/hangar cancel"), cmd("status", line=2)],
    ),
    (
        "prompt ends at an error line",
        "/hangar fix it\n/hangar verify now",
        [run("fix it"), err(2, "/hangar verify")],
    ),
)


@pytest.mark.parametrize(("body", "expected"), MULTI)
def test_prompts_and_several_commands(body: str, expected: list) -> None:
    check(body, expected)


def test_ten_commands_are_read() -> None:
    body = "\n".join(f"/hangar pick {n}" for n in range(1, 11))
    assert parse(body) == [cmd("pick", line=n, n=n, force=False) for n in range(1, 11)]


def test_more_than_ten_commands_give_one_error_and_nothing_else() -> None:
    body = "\n".join(["/hangar status"] * 12)
    [error] = parse(body)
    assert isinstance(error, UsageError)
    assert error.line == MAX_COMMANDS_PER_COMMENT + 1
    assert "at most 10" in error.message
    assert "has 12" in error.message


def test_commands_hidden_in_code_do_not_count_towards_the_cap() -> None:
    body = "\n".join(["/hangar status"] * 10) + "\n```\n" + "/hangar status\n" * 5
    assert len(parse(body)) == 10


# --- where commands never trigger -------------------------------------------------------

NEVER = cases(
    ("backtick fence", "```\n/hangar fix\n```", []),
    ("tilde fence", "~~~\n/hangar fix\n~~~", []),
    ("fence with info", "```python\n/hangar fix\n```", []),
    ("after a closed fence", "```\n/hangar x\n```\n/hangar status", [cmd("status", line=4)]),
    ("longer fence", "````\n```\n/hangar x\n````\n/hangar status", [cmd("status", line=5)]),
    ("other char does not close", "```\n/hangar x\n~~~\n/hangar y", []),
    (
        "shorter fence does not close",
        "~~~~\n/hangar x\n~~~\n/hangar y\n~~~~~\n/hangar status",
        [cmd("status", line=6)],
    ),
    ("closing fence takes no info", "```\n/hangar x\n``` x\n/hangar y", []),
    ("unclosed fence", "```\n/hangar x", []),
    ("unclosed fence to the end", "text\n```sh\n/hangar x\n\n/hangar y", []),
    ("fence indented three", "   ```\n/hangar x\n   ```\n/hangar status", [cmd("status", line=4)]),
    ("fence indented four is code", "    ```\n/hangar status", [cmd("status", line=2)]),
    ("closer indented four", "```\n/hangar x\n    ```\n/hangar y", []),
    ("backtick in info: no fence", "``` not`a`fence\n/hangar status", [cmd("status", line=2)]),
    (
        "tilde info may hold backticks",
        "~~~ a`b\n/hangar x\n~~~\n/hangar status",
        [cmd("status", line=4)],
    ),
    ("fence in a list item", "- ```\n  /hangar x\n  ```\n/hangar status", [cmd("status", line=4)]),
    ("list item ends the fence", "- ```\n  /hangar x\n/hangar status", [cmd("status", line=3)]),
    ("fence in a numbered item", "1. ```\n   /hangar x\n\n   /hangar y", []),
    ("indented four", "    /hangar fix", []),
    ("indented by tab", "\t/hangar fix", []),
    ("spaces then tab", "  \t/hangar fix", []),
    ("indented in a paragraph", "some text\n    /hangar fix", []),
    ("quote", "> /hangar fix", []),
    ("quote without space", ">/hangar fix", []),
    ("nested quote", ">> /hangar fix", []),
    ("spaced nested quote", "> > /hangar fix", []),
    ("indented quote", "   > /hangar fix", []),
    ("after a quote", "> you wrote\n\n/hangar status", [cmd("status", line=3)]),
    ("fence in a quote ends with it", "> ```\n/hangar status", [cmd("status", line=2)]),
    ("html comment block", "<!--\n/hangar fix\n-->", []),
    ("html comment one line", "<!-- /hangar fix -->", []),
    (
        "after an html comment",
        "<!-- hangar:status run-1 -->\n/hangar status",
        [cmd("status", line=2)],
    ),
    (
        "inline comment",
        "text <!-- start\n/hangar fix\nend -->\n/hangar status",
        [cmd("status", line=4)],
    ),
    ("second comment stays open", "<!-- a --> <!-- b\n/hangar fix\n-->", []),
    ("empty comment", "<!-->\n/hangar status", [cmd("status", line=2)]),
    ("empty comment with dash", "<!--->\n/hangar status", [cmd("status", line=2)]),
    (
        "comment opener in code span",
        "Use `<!--` for notes\n/hangar status",
        [cmd("status", line=2)],
    ),
    ("fence inside a comment", "<!--\n```\n-->\n/hangar status", [cmd("status", line=4)]),
    ("comment inside a fence", "```\n<!--\n```\n/hangar status", [cmd("status", line=4)]),
    (
        "comment opened on a command line",
        "/hangar fix it <!-- note\n/hangar cancel\n-->",
        [run("fix it <!-- note\n/hangar cancel\n-->")],
    ),
)


@pytest.mark.parametrize(("body", "expected"), NEVER)
def test_code_quotes_and_comments_never_trigger(body: str, expected: list) -> None:
    check(body, expected)


LOOKALIKES = [
    "\uff0fhangar fix",  # fullwidth solidus
    "\u2215hangar fix",  # division slash
    "\u2044hangar fix",  # fraction slash
    "/h\u0430ngar fix",  # Cyrillic a
    "/\uff48angar fix",  # fullwidth h
    "/han\u200dgar fix",  # zero-width joiner inside
    "/han\u200bgar fix",  # zero-width space inside
    "/\u00a0hangar fix",  # non-breaking space after the slash
    "/hangar\u00a0fix",  # non-breaking space instead of a space
    "\u200b/hangar fix",  # zero-width space before
    "\ufeff/hangar fix",  # byte order mark before
    "\u00a0/hangar fix",  # non-breaking space as indent
    "/hangarx fix",
    "/hangar-fix",
    "/hangar: fix",
    "/hangar/fix",
    "hangar fix",
    "/ hangar fix",
    "@hangar fix",
    "please /hangar fix",
    "- /hangar fix",
    "`/hangar fix`",
]


@pytest.mark.parametrize("body", LOOKALIKES)
def test_lookalikes_never_trigger(body: str) -> None:
    assert parse(body) == []
    assert parse(f"{body}\n{body}\n") == []


def test_invisible_characters_in_a_keyword_are_an_error_not_a_prompt() -> None:
    [error] = parse("/hangar can\u200bcel")
    assert isinstance(error, UsageError)
    assert "invisible" in error.message


# --- line endings, sizes, empty ----------------------------------------------------------

SHAPES = cases(
    ("crlf", "/hangar status\r\n", [cmd("status")]),
    (
        "crlf prompt",
        "/hangar fix it\r\nplease\r\n/hangar status\r\n",
        [run("fix it\nplease"), cmd("status", line=3)],
    ),
    (
        "cr only",
        "/hangar fix it\rplease\r/hangar status",
        [run("fix it\nplease"), cmd("status", line=3)],
    ),
    ("crlf fence", "```\r\n/hangar x\r\n```\r\n/hangar status\r\n", [cmd("status", line=4)]),
    ("empty", "", []),
    ("blank", "   ", []),
    ("newlines", "\n\n", []),
    ("crlf only", "\r\n", []),
    ("whitespace lines", "\t \n  \n", []),
    ("bare", "/hangar", [err(1, "`/hangar help`")]),
    ("bare with blanks", "  /hangar \t", [err(1, "`/hangar help`")]),
    ("bare then text", "/hangar\nfix it", [err(1, "same line", "`/hangar help`")]),
    ("prompt at the limit", "/hangar " + "x" * MAX_PROMPT_CHARS, [run("x" * MAX_PROMPT_CHARS)]),
    (
        "prompt over the limit",
        "/hangar " + "x" * (MAX_PROMPT_CHARS + 1),
        [err(1, "8,000", "issue body")],
    ),
    ("prompt over the limit below", "/hangar fix\n" + "x" * MAX_PROMPT_CHARS, [err(1, "8,000")]),
    ("try over the limit", "/hangar try 2 " + "x" * 9_000, [err(1, "8,000")]),
)


@pytest.mark.parametrize(("body", "expected"), SHAPES)
def test_line_endings_sizes_and_empty_bodies(body: str, expected: list) -> None:
    check(body, expected)


LONG_LINES = cases(
    ("prompt", "/hangar " + "x" * 100_000, [err(1, "8,000")]),
    ("keyword-like word", "/hangar " + "a" * 100_000, [err(1, "8,000")]),
    ("backticks", "/hangar fix " + "`" * 100_000, [err(1, "8,000")]),
    ("comment openers", "<!--" * 25_000 + "\n/hangar status", []),
    ("comment openers in code", "`<!--` " * 15_000 + "\n/hangar status", [cmd("status", line=2)]),
    ("list markers then fence", "- " * 50_000 + "```\n/hangar status", [cmd("status", line=2)]),
    ("spaces", " " * 100_000 + "/hangar status", []),
    ("try count", "/hangar try " + "1" * 100_000, [err(1, "from 1 to 10")]),
    ("pick count", "/hangar pick " + "9" * 100_000, [err(1, "from 1 to 10")]),
    ("tildes", "~" * 100_000 + "\n/hangar status", []),
)


@pytest.mark.parametrize(("body", "expected"), LONG_LINES)
def test_very_long_lines(body: str, expected: list) -> None:
    check(body, expected)


def test_error_text_is_the_line_cut_to_200_characters() -> None:
    line = "/hangar " + "x" * 100_000
    [error] = parse(line)
    assert error.text == line[:200]


# --- usage errors name the right form ---------------------------------------------------

ERRORS = [
    # body, specs whose usage the message must give, keyword it suggests after `run`
    ("/hangar run", ("run",), None),
    ("/hangar try 0 x", ("try",), None),
    ("/hangar try 11 x", ("try",), None),
    ("/hangar try -1 x", ("try",), "try"),
    ("/hangar try 3.5 x", ("try",), "try"),
    ("/hangar try three x", ("try",), "try"),
    ("/hangar try fixing the test", ("try",), "try"),
    ("/hangar try \uff13 x", ("try",), "try"),  # fullwidth digit
    ("/hangar try 3", ("try",), None),
    ("/hangar try", ("try",), None),
    ("/hangar pick", ("pick",), "pick"),
    ("/hangar pick x", ("pick",), "pick"),
    ("/hangar pick 0", ("pick",), "pick"),
    ("/hangar pick 11", ("pick",), "pick"),
    ("/hangar pick 2 3", ("pick",), "pick"),
    ("/hangar pick #2", ("pick",), "pick"),
    ("/hangar pick 2 --forcefully", ("pick",), "pick"),
    ("/hangar pick --force 2", ("pick",), "pick"),
    ("/hangar autofix", ("autofix",), "autofix"),
    ("/hangar autofix maybe", ("autofix",), "autofix"),
    ("/hangar autofix on now", ("autofix",), "autofix"),
    ("/hangar cancel the job", ("cancel",), "cancel"),
    ("/hangar verify now", ("verify",), "verify"),
    ("/hangar status please", ("status",), "status"),
    ("/hangar resume the work on the cache", ("resume",), "resume"),
    ("/hangar help me fix this", ("help",), "help"),
    ("/hangar land please", ("land", "land_cancel"), "land"),
    ("/hangar land --force", ("land", "land_cancel"), "land"),
    ("/hangar land cancel now", ("land", "land_cancel"), "land"),
    ("/hangar land --ack-sensitive cancel", ("land", "land_cancel"), "land"),
    ("/hangar land --ack-large --ack-large", ("land", "land_cancel"), "land"),
]


@pytest.mark.parametrize(("body", "names", "instruction_word"), ERRORS)
def test_usage_errors_name_the_right_form(
    body: str, names: tuple[str, ...], instruction_word: str | None
) -> None:
    [error] = parse(body)
    assert isinstance(error, UsageError)
    assert error.line == 1
    assert error.text == body
    for name in names:
        assert f"`{spec_for(name).usage}`" in error.message
    hint = f"`/hangar run {instruction_word} …`"
    if instruction_word is None:
        assert "/hangar run " not in error.message or names == ("run",)
    else:
        assert hint in error.message
    assert error.message.endswith(".")


def test_try_error_reads_as_the_design_says() -> None:
    [error] = parse("/hangar try 11 fix it")
    assert "`/hangar try` takes a number from 1 to 10" in error.message
    assert "e.g. `/hangar try 3 fix the login test`" in error.message


# --- commands describe themselves --------------------------------------------------------

PARSED_NAMES = {
    "run",
    "retry",
    "resume",
    "try",
    "pick",
    "land",
    "land_cancel",
    "resolve",
    "cancel",
    "verify",
    "status",
    "help",
    "autofix",
}


def test_registry_covers_every_command_once() -> None:
    names = [spec.name for spec in COMMANDS]
    assert sorted(names) == sorted(PARSED_NAMES)


@pytest.mark.parametrize("spec", COMMANDS, ids=lambda spec: spec.name)
def test_each_example_parses_as_its_command(spec: CommandSpec) -> None:
    assert spec.examples
    for example in spec.examples:
        [command] = parse(example)
        assert isinstance(command, Command)
        assert command.name == spec.name


@pytest.mark.parametrize("spec", COMMANDS, ids=lambda spec: spec.name)
def test_only_help_is_for_anyone(spec: CommandSpec) -> None:
    assert spec.who == ("anyone" if spec.name == "help" else "write")
    assert spec.where in ("issue", "pr", "both")


@pytest.mark.parametrize("spec", COMMANDS, ids=lambda spec: spec.name)
def test_help_text_shows_every_command(spec: CommandSpec) -> None:
    text = help_text()
    assert f"`{spec.usage.replace('|', chr(92) + '|')}`" in text
    assert spec.summary in text
    for example in spec.examples:
        assert f"`{example}`" in text


def test_help_text_escapes_pipes_for_tables() -> None:
    assert "`/hangar autofix on\\|off`" in help_text()
    table_rows = [line for line in help_text().splitlines() if line.startswith("| `")]
    assert len(table_rows) == len(COMMANDS)
    for row in table_rows:
        assert len(re.findall(r"(?<!\\)\|", row)) == 6


def test_help_text_is_made_from_the_specs_it_is_given() -> None:
    fake = CommandSpec(
        name="wave",
        usage="/hangar wave <whom>",
        summary="Wave at someone.",
        examples=("/hangar wave octocat",),
        who="anyone",
        where="issue",
    )
    text = help_text(specs=(*COMMANDS, fake))
    assert "`/hangar wave <whom>`" in text
    assert "Wave at someone." in text
    assert "`/hangar wave octocat`" in text
    assert "wave" not in help_text()
    without_run = help_text(specs=COMMANDS[1:])
    assert spec_for("run").usage not in without_run
    assert "/hangar" not in help_text(specs=()).split("| --- |")[-1]


def test_help_text_for_a_place_shows_what_works_there() -> None:
    on_issues = help_text("issue")
    on_prs = help_text("pr")
    for spec in COMMANDS:
        shown = f"`{spec.usage.replace('|', chr(92) + '|')}`"
        assert (shown in on_issues) == (spec.where in ("issue", "both"))
        assert (shown in on_prs) == (spec.where in ("pr", "both"))
    with pytest.raises(ValueError):
        help_text("discussion")


def test_spec_for() -> None:
    assert spec_for("land_cancel").usage == "/hangar land cancel"
    assert spec_for("help").who == "anyone"
    for spec in COMMANDS:
        assert spec_for(spec.name) is spec
    with pytest.raises(KeyError):
        spec_for("deploy")
    fake = CommandSpec("wave", "/hangar wave", "Wave.", ("/hangar wave",), "anyone", "both")
    assert spec_for("wave", specs=(fake,)) is fake


def test_results_are_frozen() -> None:
    [command] = parse("/hangar status")
    with pytest.raises(AttributeError):
        command.name = "cancel"  # type: ignore[misc]


# --- properties -------------------------------------------------------------------------

COMMAND_LINE = re.compile(r" {0,3}/hangar(?:[ \t]|\Z)", re.IGNORECASE | re.ASCII)
LINE_BREAK = re.compile(r"\r\n|\r|\n")

# Pieces of Markdown and near-misses of the command word, joined at random.
tricky_text = st.lists(
    st.sampled_from(
        [
            *"/hangrHANGR \t\n\r>`~<!-#0123456789",
            *("/hangar ", "/HANGAR\t", "```", "~~~", "<!--", "-->", "    ", "- "),
            *("run ", "try ", "pick ", "land ", "cancel", "autofix "),
            *("\uff0f", "\u0430", "\u200b", "\u200d", "\u00a0", "\ufeff"),
        ]
    ),
    max_size=80,
).map("".join)
any_text = st.one_of(st.text(max_size=500), tricky_text)


def has_command_line(text: str) -> bool:
    return any(COMMAND_LINE.match(line) for line in LINE_BREAK.split(text))


@settings(deadline=None)
@given(any_text)
def test_parse_never_raises_and_returns_commands_or_errors(body: str) -> None:
    items = parse(body)
    lines = LINE_BREAK.split(body)
    assert len(items) <= MAX_COMMANDS_PER_COMMENT
    assert [item.line for item in items] == sorted({item.line for item in items})
    for item in items:
        assert isinstance(item, Command | UsageError)
        assert COMMAND_LINE.match(lines[item.line - 1])
        if isinstance(item, UsageError):
            assert item.text == lines[item.line - 1].strip()[:200]
            assert item.message
        else:
            assert item.name in PARSED_NAMES


@settings(deadline=None)
@given(any_text.filter(lambda text: not has_command_line(text)))
def test_text_without_an_ascii_hangar_line_yields_nothing(body: str) -> None:
    assert parse(body) == []


@settings(deadline=None)
@given(st.sampled_from(LOOKALIKES), st.text(max_size=100))
def test_lookalike_lines_yield_nothing(lookalike: str, tail: str) -> None:
    body = lookalike + tail
    if not has_command_line(body):
        assert parse(body) == []
