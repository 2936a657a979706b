"""What model tokens cost: US dollars per million tokens, by model.

Claude's prices are the pinned Claude Code's own (its model catalog's pricing tiers, from
which it reports `total_cost_usd`): its default model with an API key is claude-opus-5-5,
with a subscription claude-sonnet-5-5. OpenAI's are its API pricing page's (as of June
2026); the pinned Codex runs gpt-5.5 (sandbox/harness.py CODEX_DEFAULT_MODEL), whose price
holds for prompts up to 272K tokens, Codex's context window. A model not listed here has
no known price: its cost is unknown, never 0.
"""

from __future__ import annotations

import re
from typing import NamedTuple


class Price(NamedTuple):
    """Dollars per million tokens."""

    input: float
    output: float
    cache_write: float  # Anthropic: writing the prompt cache (5 minutes); OpenAI: none
    cache_read: float  # a prompt-cache hit (OpenAI: "cached input")


# Model ids without their date suffix (claude-sonnet-4-5-20250929, gpt-5-2025-08-07).
PRICES: dict[str, Price] = {
    "claude-opus-5-5": Price(4.0, 20.0, 5.0, 0.2),
    "claude-sonnet-5-5": Price(2.0, 10.0, 2.5, 0.1),
    "claude-opus-5": Price(5.0, 25.0, 6.25, 0.5),
    "claude-sonnet-5": Price(2.0, 10.0, 2.5, 0.2),
    "claude-opus-4-8": Price(5.0, 25.0, 6.25, 0.5),
    "claude-opus-4-7": Price(5.0, 25.0, 6.25, 0.5),
    "claude-opus-4-6": Price(5.0, 25.0, 6.25, 0.5),
    "claude-opus-4-5": Price(5.0, 25.0, 6.25, 0.5),
    "claude-opus-4-1": Price(15.0, 75.0, 18.75, 1.5),
    "claude-opus-4": Price(15.0, 75.0, 18.75, 1.5),
    "claude-sonnet-4-6": Price(3.0, 15.0, 3.75, 0.3),
    "claude-sonnet-4-5": Price(3.0, 15.0, 3.75, 0.3),
    "claude-sonnet-4": Price(3.0, 15.0, 3.75, 0.3),
    "claude-3-7-sonnet": Price(3.0, 15.0, 3.75, 0.3),
    "claude-haiku-4-5": Price(1.0, 5.0, 1.25, 0.1),
    "claude-3-5-haiku": Price(0.8, 4.0, 1.0, 0.08),
    "gpt-5.5": Price(5.0, 30.0, 0.0, 0.5),
    "gpt-5": Price(1.25, 10.0, 0.0, 0.125),
    "gpt-5-mini": Price(0.25, 2.0, 0.0, 0.025),
    "gpt-4.1": Price(2.0, 8.0, 0.0, 0.5),
}

_DATED = re.compile(r"-(?:\d{8}|\d{4}-\d{2}-\d{2})$")


def price_of(model: str | None) -> Price | None:
    if not model:
        return None
    return PRICES.get(_DATED.sub("", model.split("[")[0].strip()))


def price(model: str | None, input_tokens: int, output_tokens: int, *,
          cache_read_tokens: int = 0, cache_write_tokens: int = 0) -> float | None:
    """Dollars for the tokens, when the model's price is known. `input_tokens` counts every
    prompt token, the cached ones among them."""
    known = price_of(model)
    if known is None:
        return None
    fresh = max(0, input_tokens - cache_read_tokens - cache_write_tokens)
    return (fresh * known.input + cache_write_tokens * known.cache_write
            + cache_read_tokens * known.cache_read + output_tokens * known.output) / 1_000_000
