"""What a log line costs hangar: its JSON formatter, which masks every known secret in
every encoding and every token shape, against the same line formatted with no masking
(the baseline), with the App's private key and a few secrets known, as when serving.

Every line hangar logs, and every comment, check run and API answer it writes, goes
through the same redaction.

    .venv/bin/python bench/log_line.py [--lines 20000] [--secrets 8]
"""

from __future__ import annotations

import argparse
import json
import logging
import secrets
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from app import redact
from app.logs import JsonFormatter

ROOT = Path(__file__).resolve().parent.parent


class PlainJson(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return json.dumps({"ts": round(record.created, 3), "level": record.levelname.lower(),
                           "logger": record.name, "msg": record.getMessage()})


def records(n: int) -> list[logging.LogRecord]:
    made = []
    for i in range(n):
        record = logging.LogRecord("app.web.webhook", logging.INFO, __file__, 1,
                                   "delivery stored", None, None)
        record.delivery_id = f"b65e1c9f-703b-42a9-9544-{i:012d}"
        record.event = "issue_comment"
        record.repo = "acme/widgets"
        made.append(record)
    return made


def per_line(formatter: logging.Formatter, lines: list[logging.LogRecord]) -> float:
    started = time.perf_counter()
    for record in lines:
        formatter.format(record)
    return (time.perf_counter() - started) / len(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=20000)
    parser.add_argument("--secrets", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    redact.remember_pem(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption()).decode())
    redact.remember(*(secrets.token_urlsafe(24) for _ in range(args.secrets)))
    started = time.perf_counter()
    redact.redact("the first line builds the finder")
    built = time.perf_counter() - started

    lines = records(args.lines)
    plain, masked = [], []
    for _ in range(args.rounds):  # alternated, so a busy moment hits both
        plain.append(per_line(PlainJson(), lines))
        masked.append(per_line(JsonFormatter(), lines))
    plain_s, masked_s = statistics.median(plain), statistics.median(masked)
    print(f"{len(redact.KNOWN.known())} known values (the App's key, its lines and "
          f"{args.secrets} secrets), finder built in {built * 1000:.0f} ms")
    print(f"plain JSON line     {plain_s * 1e6:8.1f} us")
    print(f"hangar's log line   {masked_s * 1e6:8.1f} us")
    print(f"ratio hangar/plain log line: {masked_s / plain_s:.1f}x "
          f"(+{(masked_s - plain_s) * 1e6:.1f} us a line)")
    # A comment or check run's text: Markdown with links and code, 5 KB.
    text = (ROOT / "README.md").read_text()[:5000]
    started = time.perf_counter()
    for _ in range(200):
        redact.redact(text)
    print(f"a 5 KB comment's text: {(time.perf_counter() - started) / 200 * 1e6:.0f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
