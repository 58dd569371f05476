"""Structured logs (structlog on top of the standard `logging` module).

Every event is a name and typed fields: ``log.info("leader_change", leader=2,
epoch=7)``. `setup_logging` renders them one line each on stderr, as logfmt
(``ts=... level=info logger=metakraft.controller event=leader_change leader=2
epoch=7``) or as JSON (``{"leader": 2, "epoch": 7, ...}``: numbers stay numbers,
None is null). Lines from libraries that use `logging` directly carry their
sentence as the event.

Before `setup_logging` (tests, embedding) events go to the standard loggers
unrendered, so pytest's `caplog` and any handler an embedder installs see them.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import MutableMapping
from typing import Any

import structlog

_SHARED: list[Any] = [
    structlog.contextvars.merge_contextvars,
    structlog.stdlib.add_log_level,
    structlog.stdlib.add_logger_name,
    structlog.processors.TimeStamper(fmt="iso", utc=True, key="ts"),
]

structlog.configure(
    processors=[
        structlog.stdlib.filter_by_level,
        *_SHARED,
        structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
    ],
    logger_factory=structlog.stdlib.LoggerFactory(),
    wrapper_class=structlog.stdlib.BoundLogger,
    cache_logger_on_first_use=True,
)

LOG_FORMATS = ("kv", "json")


def get_logger(name: str) -> structlog.stdlib.BoundLogger:
    logger: structlog.stdlib.BoundLogger = structlog.stdlib.get_logger(name)
    return logger


_HEAD = ("ts", "level", "logger", "event")


def _head_first(_logger: Any, _name: str, event: MutableMapping[str, Any]) -> dict[str, Any]:
    """JSON lines start like logfmt ones: ts, level, logger, event, then the fields."""
    return {**{k: event[k] for k in _HEAD if k in event},
            **{k: v for k, v in event.items() if k not in _HEAD}}


def _renderer(fmt: str) -> Any:
    if fmt == "json":
        return structlog.processors.JSONRenderer(default=str)
    return structlog.processors.LogfmtRenderer(
        key_order=list(_HEAD), bool_as_flag=False)


def formatter(fmt: str) -> logging.Formatter:
    """The line format: "kv" (logfmt) or "json"."""
    if fmt not in LOG_FORMATS:
        raise ValueError(f"log format must be one of {', '.join(LOG_FORMATS)}, got {fmt!r}")
    return structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=_SHARED,
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            structlog.processors.format_exc_info,
            _head_first,
            _renderer(fmt),
        ],
    )


def setup_logging(level: str, fmt: str) -> None:
    """Route every logger to stderr in the chosen format (replacing handlers)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter(fmt))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
