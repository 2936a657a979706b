"""Nothing hangar writes is past GitHub's size limits: render cuts it, and says so."""

from __future__ import annotations

import pytest

from app.render import BODY_LIMIT_CHARS, OUTPUT_LIMIT_BYTES, fenced, fit_body, fit_output


@pytest.mark.parametrize("text", ["short", "x" * BODY_LIMIT_CHARS, "é" * BODY_LIMIT_CHARS])
def test_a_body_within_the_limit_is_untouched(text):
    assert fit_body(text) == text


@pytest.mark.parametrize("text", [
    "x" * (BODY_LIMIT_CHARS + 1),
    "<!-- hangar:pr j b -->\n" + "| `f` | 1 | 2 |\n" * 10_000,
    "<details><summary>Agent says</summary>\n\n" + fenced("y" * 200_000, "text"),
])
def test_a_long_body_is_cut_within_the_limit_closed_and_says_so(text):
    cut = fit_body(text, "the Files changed tab")
    assert len(cut) <= BODY_LIMIT_CHARS
    assert cut.endswith("… (cut: GitHub takes at most 65,536 characters here; see the Files "
                        "changed tab)")
    assert cut.startswith(text[:20])
    assert cut.count("```") % 2 == 0  # a code block cut open is closed again
    assert cut.count("<details>") == cut.count("</details>")


@pytest.mark.parametrize(("text", "cut"), [
    ("x" * OUTPUT_LIMIT_BYTES, False),
    ("é" * (OUTPUT_LIMIT_BYTES // 2), False),  # 65,534 bytes
    ("é" * (OUTPUT_LIMIT_BYTES // 2 + 1), True),  # fewer characters than the limit, more bytes
    ("🙂" * 20_000, True),
])
def test_check_output_is_held_to_65535_bytes(text, cut):
    fitted = fit_output(text)
    assert len(fitted.encode()) <= OUTPUT_LIMIT_BYTES
    assert (fitted != text) is cut
    if cut:
        assert "… (cut: GitHub takes at most 65,535 bytes here; see" in fitted
