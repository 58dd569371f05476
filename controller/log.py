"""Structured logs (structlog on top of the standard `logging` module).

Every event is a name and typed fields: ``log.info("leader_change", leader=2,
epoch=7)``. `setup_logging` renders them one line each on stderr, as logfmt
(``ts=... level=info logger=metakraft.controller event=leader_change leader=2
epoch=7``) or as JSON (``{"leader": 2, "epoch": 7, ...}``: numbers stay numbers,
None is null). Lines from libraries that use `logging` directly carry their
sentence as the event.

Before `setup_logging` (tests, embedding) events go to the standard loggers
unrendered, so pytest's `caplog` and any handler an embedder installs see them.

The active controller logs one line per admin write, so the line's cost is part of
every small write's: `LineFormatter` renders the event dict structlog hands to
`logging` directly (no record copy, no generic processor chain), and
`setup_logging` turns off the caller lookup the lines never show.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import structlog

structlog.configure(
    processors=[
        structlog.stdlib.filter_by_level,
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True, key="ts"),
        structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
    ],
    logger_factory=structlog.stdlib.LoggerFactory(),
    wrapper_class=structlog.stdlib.BoundLogger,
    cache_logger_on_first_use=True,
)

LOG_FORMATS = ("kv", "json")
# Every line starts with these, in this order (logfmt renders a missing one empty).
_HEAD = ("ts", "level", "logger", "event")
# Keys already checked to be printable without spaces (they come from code: few).
_CHECKED_KEYS: set[str] = set()
_CHECKED_KEYS_LIMIT = 4096


def get_logger(name: str) -> structlog.stdlib.BoundLogger:
    logger: structlog.stdlib.BoundLogger = structlog.stdlib.get_logger(name)
    return logger


def _check_key(key: str) -> None:
    if key in _CHECKED_KEYS:
        return
    if not key or any(c <= " " for c in key):
        raise ValueError(f"invalid log key {key!r}: empty, or with spaces or control "
                         "characters")
    if len(_CHECKED_KEYS) < _CHECKED_KEYS_LIMIT:
        _CHECKED_KEYS.add(key)


def _logfmt_value(value: Any) -> str:
    if value is None:
        return ""
    if value is True or value is False:
        return "true" if value else "false"
    if isinstance(value, dict | list | tuple):
        # Structured values as compact JSON (parseable back), not a Python repr.
        text = json.dumps(value, separators=(",", ":"), default=str)
    else:
        text = value if isinstance(value, str) else str(value)
    quote = " " in text or "=" in text or '"' in text
    if quote and "\\" in text:
        text = text.replace("\\", "\\\\")
    if '"' in text:
        text = text.replace('"', '\\"')
    if "\n" in text:
        text = text.replace("\n", "\\n")
    return f'"{text}"' if quote else text


def render_logfmt(event: dict[str, Any]) -> str:
    """`key=value` pairs, the head keys first; a value with a space, `=` or `"` is
    quoted (backslashes and quotes escaped), newlines become `\\n`, None is empty,
    dicts and lists are compact JSON."""
    parts = [f"{key}={_logfmt_value(event.get(key))}" for key in _HEAD]
    for key, value in event.items():
        if key in _HEAD:
            continue
        _check_key(key)
        parts.append(f"{key}={_logfmt_value(value)}")
    return " ".join(parts)


def render_json(event: dict[str, Any]) -> str:
    """One JSON object, the head keys first; what JSON cannot hold becomes a string."""
    head = {k: event[k] for k in _HEAD if k in event}
    head.update((k, v) for k, v in event.items() if k not in _HEAD)
    return json.dumps(head, default=str)


def _utc_iso(created_s: float) -> str:
    return datetime.fromtimestamp(created_s, tz=UTC).isoformat().replace(
        "+00:00", "Z")


class LineFormatter(logging.Formatter):
    """One line per record: a structlog event from the dict it travels in, another
    library's record from its level, logger and message; a traceback, if any, as
    the field `exception`."""

    def __init__(self, render: Callable[[dict[str, Any]], str]) -> None:
        super().__init__()
        self._render = render

    def format(self, record: logging.LogRecord) -> str:
        msg = record.msg
        event: dict[str, Any]
        if isinstance(msg, dict) and hasattr(record, "_logger"):
            event = dict(msg)  # other handlers may format the same record
        else:
            event = {**structlog.contextvars.get_contextvars(),
                     "ts": _utc_iso(record.created), "level": record.levelname.lower(),
                     "logger": record.name, "event": record.getMessage()}
            if record.exc_info:
                event["exc_info"] = record.exc_info
        exc_info = event.pop("exc_info", None)
        if exc_info:
            if exc_info is True:
                exc_info = sys.exc_info()
            elif isinstance(exc_info, BaseException):
                exc_info = (type(exc_info), exc_info, exc_info.__traceback__)
            if exc_info[0] is not None:
                event["exception"] = self.formatException(exc_info)
        return self._render(event)


def formatter(fmt: str) -> logging.Formatter:
    """The line format: "kv" (logfmt) or "json"."""
    if fmt not in LOG_FORMATS:
        raise ValueError(f"log format must be one of {', '.join(LOG_FORMATS)}, got {fmt!r}")
    return LineFormatter(render_json if fmt == "json" else render_logfmt)


def setup_logging(level: str, fmt: str) -> None:
    """Route every logger to stderr in the chosen format (replacing handlers)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter(fmt))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # The lines show none of these; each costs every record a lookup (the logging
    # HOWTO's "Optimization" section: no caller frame, thread, process names).
    logging._srcfile = None
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
