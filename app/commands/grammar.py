"""The `/hangar` command grammar: a comment body in, commands out. Pure: no I/O, no state.

A command is a line that starts with `/hangar` (after at most three spaces), outside
fenced code, quotes and HTML comments, read the way GitHub renders the comment. The
commands describe themselves in `COMMANDS`; `/hangar help` and every usage message are
made from those descriptions.
"""

from __future__ import annotations

import bisect
import re
import unicodedata
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

__all__ = [
    "COMMANDS",
    "MAX_ATTEMPTS",
    "MAX_COMMANDS_PER_COMMENT",
    "MAX_PROMPT_CHARS",
    "Command",
    "CommandSpec",
    "UsageError",
    "help_text",
    "parse",
    "spec_for",
]

MAX_COMMANDS_PER_COMMENT = 10
MAX_PROMPT_CHARS = 8_000
MAX_ATTEMPTS = 10
ERROR_TEXT_CHARS = 200

Who = Literal["write", "anyone"]
Where = Literal["issue", "pr", "both"]


@dataclass(frozen=True)
class CommandSpec:
    """What a command looks like, what it does, who may use it and where."""

    name: str
    usage: str
    summary: str
    examples: tuple[str, ...]
    who: Who
    where: Where


@dataclass(frozen=True)
class Command:
    name: str
    args: dict[str, Any]
    line: int  # 1-based line of the `/hangar` line in the comment


@dataclass(frozen=True)
class UsageError:
    line: int
    text: str  # the offending line, stripped and cut to ERROR_TEXT_CHARS
    message: str  # a sentence a person can act on: what is wrong and the right form


COMMANDS: tuple[CommandSpec, ...] = (
    CommandSpec(
        name="run",
        usage="/hangar [run] <instruction>",
        summary=(
            "Run an agent with this instruction: on an issue a new job with its own pull "
            "request, on a hangar pull request a follow-up turn on its branch. The lines "
            "below the command belong to the instruction. Start with `run` when the "
            "instruction begins with a command word."
        ),
        examples=(
            "/hangar fix the flaky test in tests/test_sync.py",
            "/hangar run verify that the cache expires",
        ),
        who="write",
        where="both",
    ),
    CommandSpec(
        name="try",
        usage="/hangar try <n> <instruction>",
        summary=(
            f"Run `<n>` attempts (1 to {MAX_ATTEMPTS}) at the same instruction and rank "
            "them by verification, CI and diff size."
        ),
        examples=("/hangar try 3 fix the login test",),
        who="write",
        where="issue",
    ),
    CommandSpec(
        name="pick",
        usage="/hangar pick <n> [--force]",
        summary=(
            "Keep attempt `<n>` from the ranking of `/hangar try`. An attempt the ranking "
            "does not call eligible (it failed a gate, e.g. its verification) is kept only "
            "with `--force`."
        ),
        examples=("/hangar pick 2", "/hangar pick 3 --force"),
        who="write",
        where="both",
    ),
    CommandSpec(
        name="land",
        usage="/hangar land [--ack-sensitive] [--ack-large]",
        summary=(
            "Ask hangar to land this pull request once its checks pass on the current head. "
            "Add `--ack-sensitive` to confirm you reviewed the sensitive files it changes, "
            "`--ack-large` to confirm you reviewed a change larger than `land.max_diff_lines`."
        ),
        examples=("/hangar land", "/hangar land --ack-sensitive", "/hangar land --ack-large"),
        who="write",
        where="pr",
    ),
    CommandSpec(
        name="resolve",
        usage="/hangar resolve [<instruction>]",
        summary=(
            "A turn on this pull request's branch that merges its base into it and resolves "
            "the conflicts (with your instruction, if any); its head is verified again and "
            "needs its own approval."
        ),
        examples=("/hangar resolve", "/hangar resolve keep both tests"),
        who="write",
        where="pr",
    ),
    CommandSpec(
        name="land_cancel",
        usage="/hangar land cancel",
        summary="Withdraw the request to land this pull request.",
        examples=("/hangar land cancel",),
        who="write",
        where="pr",
    ),
    CommandSpec(
        name="cancel",
        usage="/hangar cancel",
        summary="Stop hangar's running work on this issue or pull request.",
        examples=("/hangar cancel",),
        who="write",
        where="both",
    ),
    CommandSpec(
        name="verify",
        usage="/hangar verify",
        summary="Verify the pull request's current head again in a clean sandbox.",
        examples=("/hangar verify",),
        who="write",
        where="pr",
    ),
    CommandSpec(
        name="status",
        usage="/hangar status",
        summary="Report where hangar's work on this issue or pull request stands.",
        examples=("/hangar status",),
        who="write",
        where="both",
    ),
    CommandSpec(
        name="retry",
        usage="/hangar retry",
        summary=(
            "Push again the commits hangar kept when GitHub refused or could not take a "
            "push, once the cause is fixed; or start again a turn that ended in a way a "
            "retry fixes (the agent crashed, its sandbox was lost, the model failed)."
        ),
        examples=("/hangar retry",),
        who="write",
        where="both",
    ),
    CommandSpec(
        name="resume",
        usage="/hangar resume",
        summary=(
            "Start this job's agents now although hangar paused them because the model's "
            "usage reached its threshold; the pause stays lifted until the usage resets."
        ),
        examples=("/hangar resume",),
        who="write",
        where="both",
    ),
    CommandSpec(
        name="help",
        usage="/hangar help",
        summary="List these commands.",
        examples=("/hangar help",),
        who="anyone",
        where="both",
    ),
    CommandSpec(
        name="autofix",
        usage="/hangar autofix on|off",
        summary="Turn automatic fix turns after failed CI on or off for this pull request.",
        examples=("/hangar autofix off",),
        who="write",
        where="pr",
    ),
)


def spec_for(name: str, specs: Iterable[CommandSpec] = COMMANDS) -> CommandSpec:
    """The spec of the command called `name` (a `Command.name`, e.g. `land_cancel`)."""
    for spec in specs:
        if spec.name == name:
            return spec
    raise KeyError(f"no /hangar command is named {name!r}")


# --- help ------------------------------------------------------------------------------

_WHO_WORDS = {"write": "write access", "anyone": "anyone"}
_WHERE_WORDS = {"issue": "issues", "pr": "pull requests", "both": "issues and pull requests"}


def help_text(where: str | None = None, specs: Iterable[CommandSpec] = COMMANDS) -> str:
    """Markdown listing the commands usable `where` ("issue", "pr", or None for all)."""
    if where not in (None, "issue", "pr"):
        raise ValueError(f"where must be 'issue', 'pr' or None, not {where!r}")
    shown = [s for s in specs if where is None or s.where in (where, "both")]
    lines = [
        "**hangar commands.** Write one at the start of a line in a comment; "
        "quoted lines and code blocks never count.",
        "",
        "| command | what it does | who | where | example |",
        "| --- | --- | --- | --- | --- |",
    ]
    for spec in shown:
        cells = (
            _code(spec.usage),
            spec.summary,
            _WHO_WORDS[spec.who],
            _WHERE_WORDS[spec.where],
            "<br>".join(_code(example) for example in spec.examples),
        )
        lines.append("| " + " | ".join(_table_cell(cell) for cell in cells) + " |")
    return "\n".join(lines) + "\n"


def _code(text: str) -> str:
    return f"`{text}`"


def _table_cell(text: str) -> str:
    # GitHub splits table cells on `|` even inside code spans unless it is escaped.
    return text.replace("|", "\\|").replace("\n", " ")


# --- reading the comment ---------------------------------------------------------------

_LINE_BREAK = re.compile(r"\r\n|\r|\n")
# ASCII only: look-alike letters, fullwidth slashes and non-breaking spaces never match.
_COMMAND_LINE = re.compile(r" {0,3}/hangar(?:[ \t]|\Z)", re.IGNORECASE | re.ASCII)
_QUOTE_LINE = re.compile(r" {0,3}>")
# A fence may follow list markers (`- ```` ); its content then sits at the marker's indent.
_FENCE_OPEN = re.compile(
    r"(?P<lead> {0,3}(?:(?:[-+*]|[0-9]{1,9}[.)]) {1,4})*)(?P<fence>`{3,}|~{3,})(?P<info>.*)\Z"
)
_FENCE_CLOSE = re.compile(r"(?P<fence>`{3,}|~{3,})[ \t]*\Z")
_LEADING_BLANKS = re.compile(r"[ \t]*")
_BACKTICK_RUN = re.compile(r"`+")
_FIRST_WORD = re.compile(r"\s*(\S*)\s*")
_ATTEMPT_NUMBER = re.compile(r"[0-9]{1,2}")
_ASCII_DIGITS = re.compile(r"[0-9]+")
# The word after `/hangar` that names a command: `land_cancel` is spelled `land cancel`.
_KEYWORDS = frozenset(spec.name.partition("_")[0] for spec in COMMANDS)


@dataclass(frozen=True)
class _Fence:
    char: str
    length: int
    column: int  # indent of the list item holding the fence; 0 at top level

    def left_by(self, line: str) -> bool:
        """A less indented, non-blank line ends the list item, and the fence with it."""
        return self.column > 0 and line.strip() != "" and _indent_width(line) < self.column

    def closed_by(self, line: str) -> bool:
        width = _indent_width(line)
        if not self.column <= width <= self.column + 3:
            return False
        close = _FENCE_CLOSE.match(line, len(_leading_blanks(line)))
        return (
            close is not None
            and close["fence"][0] == self.char
            and len(close["fence"]) >= self.length
        )


def _leading_blanks(line: str) -> str:
    blanks = _LEADING_BLANKS.match(line)
    assert blanks is not None  # `[ \t]*` matches at the start of every line
    return blanks.group()


def _indent_width(line: str) -> int:
    width = 0
    for char in _leading_blanks(line):
        width = width + 1 if char == " " else width + 4 - width % 4
    return width


def _fence_opened_by(line: str) -> _Fence | None:
    opened = _FENCE_OPEN.match(line)
    if opened is None:
        return None
    fence = opened["fence"]
    if fence[0] == "`" and "`" in opened["info"]:
        return None  # a backtick in the info string makes it inline code, not a fence
    lead = opened["lead"]
    column = len(lead) if lead.strip() else 0
    return _Fence(char=fence[0], length=len(fence), column=column)


def _code_spans(line: str) -> list[tuple[int, int]]:
    """Inline code spans of one line as (start, end): a backtick run closed by an equal one."""
    runs = [(m.start(), m.end()) for m in _BACKTICK_RUN.finditer(line)]
    next_equal: list[int | None] = [None] * len(runs)
    last_seen: dict[int, int] = {}
    for index in range(len(runs) - 1, -1, -1):
        length = runs[index][1] - runs[index][0]
        next_equal[index] = last_seen.get(length)
        last_seen[length] = index
    spans = []
    index = 0
    while index < len(runs):
        closer = next_equal[index]
        if closer is None:
            index += 1
            continue
        spans.append((runs[index][0], runs[closer][1]))
        index = closer + 1
    return spans


def _html_comment_open_after(line: str, open_before: bool) -> bool:
    """Whether an HTML comment is still open at the end of `line`."""
    position = 0
    if open_before:
        end = line.find("-->")
        if end < 0:
            return True
        position = end + 3
    spans: list[tuple[int, int]] | None = None
    while True:
        start = line.find("<!--", position)
        if start < 0:
            return False
        if spans is None:
            spans = _code_spans(line)
        inside = bisect.bisect_right(spans, (start, len(line) + 1)) - 1
        if inside >= 0 and spans[inside][0] <= start < spans[inside][1]:
            position = spans[inside][1]  # `<!--` in inline code is text
            continue
        end = line.find("-->", start + 2)  # from +2 so `<!-->` and `<!--->` close at once
        if end < 0:
            return True
        position = end + 3


def _lines(body: str) -> Iterator[tuple[int, str, str | None]]:
    """Each line as (number, line, text after `/hangar` if it is a command line else None)."""
    fence: _Fence | None = None
    in_html_comment = False
    for number, line in enumerate(_LINE_BREAK.split(body), start=1):
        if fence is not None:
            if fence.left_by(line):
                fence = None
            else:
                if fence.closed_by(line):
                    fence = None
                yield number, line, None
                continue
        if in_html_comment:
            in_html_comment = _html_comment_open_after(line, open_before=True)
            yield number, line, None
            continue
        if _QUOTE_LINE.match(line):
            yield number, line, None
            continue
        fence = _fence_opened_by(line)
        if fence is not None:
            yield number, line, None
            continue
        command = _COMMAND_LINE.match(line)
        in_html_comment = _html_comment_open_after(line, open_before=False)
        yield number, line, None if command is None else line[command.end() :]


def parse(body: str) -> list[Command | UsageError]:
    """The `/hangar` commands in a comment body, in order.

    Each command line gives one Command or one UsageError. More than
    MAX_COMMANDS_PER_COMMENT command lines give a single UsageError and nothing else.
    """
    found: list[tuple[int, str, str, list[str]]] = []
    too_many: tuple[int, str] | None = None
    count = 0
    for number, line, after_hangar in _lines(body):
        if after_hangar is None:
            if found and too_many is None:
                found[-1][3].append(line)
            continue
        count += 1
        if count <= MAX_COMMANDS_PER_COMMENT:
            found.append((number, line, after_hangar, []))
        elif too_many is None:
            too_many = (number, line)
    if too_many is not None:
        number, line = too_many
        return [
            _error(
                number,
                line,
                f"A comment can hold at most {MAX_COMMANDS_PER_COMMENT} `/hangar` commands "
                f"and this one has {count}; post them in several comments.",
            )
        ]
    return [_read_command(*command) for command in found]


# --- one command -----------------------------------------------------------------------


def _read_command(
    number: int, line: str, after_hangar: str, following: list[str]
) -> Command | UsageError:
    word, rest = _first_word(after_hangar)
    if not word:
        return _error(
            number,
            line,
            "`/hangar` needs an instruction or a command on the same line, "
            f"e.g. `{spec_for('run').examples[0]}`; `/hangar help` lists the commands.",
        )
    keyword = word.lower() if word.isascii() else ""
    if not keyword and _without_invisibles(word).lower() in _KEYWORDS:
        # `cancel` with a zero-width space in it must not start a job called "cancel".
        return _error(
            number,
            line,
            f"`{_without_invisibles(word).lower()}` here has invisible characters in it; "
            "type the command again without them.",
        )
    match keyword:
        case "run":
            return _run(number, line, rest, following)
        case "try":
            return _try(number, line, rest, following)
        case "pick":
            return _pick(number, line, rest)
        case "land":
            return _land(number, line, rest)
        case "resolve":
            return _resolve(number, line, rest, following)
        case "autofix":
            return _autofix(number, line, rest)
        case "cancel" | "verify" | "status" | "retry" | "resume" | "help":
            if rest:
                return _usage_error(
                    number,
                    line,
                    f"`/hangar {keyword}` takes nothing after it",
                    (keyword,),
                    instruction_word=keyword,
                )
            return Command(keyword, {}, number)
        case _:
            return _run(number, line, after_hangar, following)


def _run(number: int, line: str, first: str, following: list[str]) -> Command | UsageError:
    prompt = _prompt(first, following)
    if not prompt:
        return _usage_error(number, line, "`/hangar run` needs an instruction", ("run",))
    if len(prompt) > MAX_PROMPT_CHARS:
        return _too_long(number, line, prompt)
    return Command("run", {"prompt": prompt}, number)


def _try(number: int, line: str, after_try: str, following: list[str]) -> Command | UsageError:
    count_word, first = _first_word(after_try)
    attempts = _attempt_number(count_word)
    if attempts is None:
        return _usage_error(
            number,
            line,
            f"`/hangar try` takes a number from 1 to {MAX_ATTEMPTS} and an instruction",
            ("try",),
            instruction_word=(
                "try" if count_word and not _ASCII_DIGITS.fullmatch(count_word) else None
            ),
        )
    prompt = _prompt(first, following)
    if not prompt:
        return _usage_error(
            number,
            line,
            f"`/hangar try {attempts}` needs an instruction after the number",
            ("try",),
        )
    if len(prompt) > MAX_PROMPT_CHARS:
        return _too_long(number, line, prompt)
    return Command("try", {"n": attempts, "prompt": prompt}, number)


def _pick(number: int, line: str, after_pick: str) -> Command | UsageError:
    words = after_pick.split()
    force = len(words) == 2 and words[1].lower() == "--force"
    attempt = _attempt_number(words[0]) if len(words) == 1 or force else None
    if attempt is None:
        return _usage_error(
            number,
            line,
            f"`/hangar pick` takes the number of one attempt, from 1 to {MAX_ATTEMPTS}, "
            "and `--force` for one the ranking does not call eligible",
            ("pick",),
            instruction_word="pick",
        )
    return Command("pick", {"n": attempt, "force": force}, number)


_LAND_FLAGS = {"--ack-sensitive": "ack_sensitive", "--ack-large": "ack_large"}


def _land(number: int, line: str, after_land: str) -> Command | UsageError:
    words = [word.lower() if word.isascii() else word for word in after_land.split()]
    if words == ["cancel"]:
        return Command("land_cancel", {}, number)
    if all(word in _LAND_FLAGS for word in words) and len(set(words)) == len(words):
        return Command("land", {flag: word in words for word, flag in _LAND_FLAGS.items()},
                       number)
    return _usage_error(
        number,
        line,
        "`/hangar land` takes nothing after it but `--ack-sensitive`, `--ack-large` or "
        "`cancel`",
        ("land", "land_cancel"),
        instruction_word="land",
    )


def _resolve(number: int, line: str, rest: str, following: list[str]) -> Command | UsageError:
    guidance = _prompt(rest, following)
    if len(guidance) > MAX_PROMPT_CHARS:
        return _too_long(number, line, guidance)
    return Command("resolve", {"prompt": guidance}, number)


def _autofix(number: int, line: str, after_autofix: str) -> Command | UsageError:
    words = [word.lower() if word.isascii() else word for word in after_autofix.split()]
    if words in (["on"], ["off"]):
        return Command("autofix", {"enabled": words == ["on"]}, number)
    return _usage_error(
        number,
        line,
        "`/hangar autofix` takes `on` or `off`",
        ("autofix",),
        instruction_word="autofix",
    )


def _without_invisibles(word: str) -> str:
    return "".join(char for char in word if unicodedata.category(char) != "Cf")


def _first_word(text: str) -> tuple[str, str]:
    """The first whitespace-separated word of `text`, and what follows it, stripped."""
    first = _FIRST_WORD.match(text)
    assert first is not None  # `\s*(\S*)\s*` matches at the start of every text
    return first.group(1), text[first.end() :].rstrip()


def _attempt_number(word: str) -> int | None:
    if _ATTEMPT_NUMBER.fullmatch(word) and 1 <= int(word) <= MAX_ATTEMPTS:
        return int(word)
    return None


def _prompt(first: str, following: list[str]) -> str:
    return "\n".join([first, *following]).strip()


def _too_long(number: int, line: str, prompt: str) -> UsageError:
    return _error(
        number,
        line,
        f"The instruction is {len(prompt):,} characters long and hangar takes at most "
        f"{MAX_PROMPT_CHARS:,}; put the details in the issue body or pull request "
        "description and point to them, e.g. `/hangar follow the plan in the issue body`.",
    )


def _usage_error(
    number: int,
    line: str,
    problem: str,
    names: tuple[str, ...],
    *,
    instruction_word: str | None = None,
) -> UsageError:
    """`problem`, then the right form from the specs, then how to say it as an instruction."""
    specs = [spec_for(name) for name in names]
    usages = " or ".join(_code(spec.usage) for spec in specs)
    example = next(
        (ex for spec in specs for ex in spec.examples if ex not in {s.usage for s in specs}),
        None,
    )
    message = f"{problem}; write {usages}" + (f", e.g. {_code(example)}." if example else ".")
    if instruction_word is not None:
        message += (
            f" To give an instruction that starts with `{instruction_word}`, write "
            f"`/hangar run {instruction_word} …`."
        )
    return _error(number, line, message)


def _error(number: int, line: str, message: str) -> UsageError:
    return UsageError(line=number, text=line.strip()[:ERROR_TEXT_CHARS], message=message)
