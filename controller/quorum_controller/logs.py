"""Structured logs: one line per event on stderr, `key=value` pairs or JSON.

The controller logs messages that are already `event=name key=value ...`; other
modules log sentences, which become the `msg` field.
"""

from __future__ import annotations

import json
import logging
import re
import sys
import time

_PAIR = re.compile(r'(\w+)=("(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|\S+)')


def _fields(message: str) -> dict[str, str] | None:
    """The key=value pairs of an `event=...` message, else None."""
    if not message.startswith("event="):
        return None
    return {key: value.strip("\"'") for key, value in _PAIR.findall(message)}


def _timestamp(record: logging.LogRecord) -> str:
    ms = int(record.msecs)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{ms:03d}Z"


class KeyValueFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        head = f"ts={_timestamp(record)} level={record.levelname} logger={record.name}"
        body = message if _fields(message) is not None else f"msg={json.dumps(message)}"
        line = f"{head} {body}"
        if record.exc_info:
            line += f" exc={json.dumps(self.formatException(record.exc_info))}"
        return line


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        doc: dict[str, str] = {"ts": _timestamp(record), "level": record.levelname,
                               "logger": record.name}
        fields = _fields(message)
        if fields is None:
            doc["msg"] = message
        else:
            doc.update(fields)
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        return json.dumps(doc, sort_keys=False)


def setup_logging(level: str, fmt: str) -> None:
    """Route every logger to stderr with the chosen format (replacing handlers)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else KeyValueFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
