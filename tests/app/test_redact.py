"""Secrets never reach what people see: redaction of log tails and agent text."""

from __future__ import annotations

import pytest

from app.redact import REDACTED, redact, tail


@pytest.mark.parametrize(
    "secret",
    [
        "ghs_" + "a" * 36,
        "ghp_" + "B1" * 18,
        "gho_" + "c" * 36,
        "ghu_" + "d3" * 18,
        "ghr_" + "e" * 76,
        # a stateless installation token: ghs_<app id>_<JWT>
        "ghs_123456_eyJhbGciOiJSUzI1NiJ9.eyJpc3MiOiJnaXRodWIiLCJpbnN0In0.s1g-n_4tUr3xyz",
        "github_pat_11ABCDEFG0" + "x" * 12 + "_" + "y" * 59,
        "hgs_" + "Zz-_9" * 8,
        "sk-ant-api03-" + "q" * 40,
        "sk-" + "k" * 48,
        "AKIAABCDEFGHIJKLMNOP",
        "-----BEGIN RSA PRIVATE KEY-----\nMIIEow\nabc\n-----END RSA PRIVATE KEY-----",
    ],
)
def test_token_shapes_are_redacted(secret):
    out = redact(f"before {secret} after")
    assert secret not in out and REDACTED in out and out.startswith("before ")


def test_a_stateless_token_is_redacted_whole_and_a_sentence_keeps_its_stop():
    token = "ghs_42_eyJhbGciOiJSUzI1NiJ9.eyJpbnN0YWxsYXRpb24iOjF9.c2lnbmF0dXJl"
    assert redact(f"token {token}. Next") == f"token {REDACTED}. Next"


def test_known_values_urls_and_headers():
    text = ("cloning https://x-access-token:s3cr3tvalue@github.com/a/b.git\n"
            "Authorization: Bearer abc.def.ghi\nmy-model-key-12345 leaked")
    out = redact(text, known=["my-model-key-12345", "short"])
    assert "s3cr3tvalue" not in out and "abc.def.ghi" not in out
    assert "my-model-key-12345" not in out
    assert "https://[redacted]@github.com/a/b.git" in out


def test_ordinary_text_is_untouched():
    text = "FAILED test_calc.py::test_adds - assert -1 == 5\nsha 0123456789abcdef"
    assert redact(text) == text


def test_tail_keeps_the_end():
    text = "\n".join(f"line {i}" for i in range(500))
    assert tail(text, max_lines=3) == "line 497\nline 498\nline 499"
    assert len(tail("x" * 10_000, max_chars=100)) == 100
