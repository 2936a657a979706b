"""Logs are JSON lines carrying the ids that tie a line to its work."""

from __future__ import annotations

import io
import json
import logging

from app import logs


def test_a_log_line_is_json_with_the_delivery_fields():
    stream = io.StringIO()
    logs.configure("INFO", stream=stream)
    try:
        logging.getLogger("app.web.webhook").info(
            "delivery stored", extra={"delivery_id": "d-1", "event": "issue_comment",
                                      "repo": "acme/widgets"})
        try:
            raise ValueError("boom")
        except ValueError:
            logging.getLogger("app.engine").exception("step failed", extra={"run": "run-1"})
    finally:
        logging.getLogger().handlers[:] = []
    first, second = (json.loads(line) for line in stream.getvalue().splitlines())
    assert first["msg"] == "delivery stored" and first["level"] == "info"
    assert (first["delivery_id"], first["event"], first["repo"]) == (
        "d-1", "issue_comment", "acme/widgets")
    assert second["run"] == "run-1" and "ValueError: boom" in second["exc"]
