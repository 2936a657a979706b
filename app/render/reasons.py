"""A concern's decision, for render to word: a reason code and the facts it names.

Concerns decide and return a `Why`; the sentence a person reads is render's, looked up by
the code in a table (`Sentences`). A code is a member of a concern's `StrEnum`: its value
is the table's key, so render never imports a concern.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from app.redact import redact


@dataclass(frozen=True, init=False)
class Why:
    """A reason code and the facts its sentence names (a login, check names, a sha)."""

    code: str
    facts: Mapping[str, Any]

    def __init__(self, code: str, **facts: Any) -> None:
        object.__setattr__(self, "code", code)
        object.__setattr__(self, "facts", facts)

    def __hash__(self) -> int:  # facts may hold lists: the code is enough to bucket
        return hash(self.code)


Sentences = Mapping[str, Callable[..., str]]


def word(table: Sentences, why: Why) -> str:
    """The sentence for `why` from its concern's table; a code without one is a defect
    (tests/test_render_reasons.py holds every code to a sentence). The facts are often
    others' words (git's, GitHub's, an agent's): the sentence is masked of secrets."""
    return redact(table[str(why.code)](**why.facts))
