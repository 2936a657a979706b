"""Structured logs: one JSON object per line, with the ids that tie a line to its work."""

from __future__ import annotations

import json
import logging
import sys
import time

from app.redact import redact

# Fields a caller may attach with `extra={...}`; they become top-level JSON keys.
FIELDS = ("delivery_id", "event", "action", "repo", "job", "run", "land", "installation_id",
          "sandbox", "step", "error")


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line = {
            "ts": round(record.created, 3),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": redact(record.getMessage()),
        }
        for field in FIELDS:
            value = getattr(record, field, None)
            if value is not None:
                line[field] = redact(value) if isinstance(value, str) else value
        if record.exc_info:
            line["exc"] = redact(self.formatException(record.exc_info))
        # A log is read by more people than hangar's keys are: nothing secret in it.
        return json.dumps(line, default=lambda value: redact(str(value)))


def configure(level: str = "INFO", stream=None) -> None:
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    logging.Formatter.converter = time.gmtime
