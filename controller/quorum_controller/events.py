"""The values the controller's loop works with: its mode, a queued event, and how
a waiting caller's future is settled."""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Callable
from typing import Any

import attrs

from controller.logformat.batch import EMPTY_ORIGIN, BatchOrigin
from controller.metadata import ControllerResult

# Generates a write's records and response: (next offset, now in ms) -> result.
Generate = Callable[[int, int], ControllerResult[Any]]
# Answers a read at a committed offset (a live registry snapshot).
Query = Callable[[int], Any]


class RequestTooLargeError(Exception):
    """The request's records do not fit one batch; nothing was applied."""


class Mode(enum.Enum):
    STANDBY = "standby"
    PENDING = "pending"
    ACTIVE = "active"


@attrs.define(slots=True)
class Event:
    name: str
    future: asyncio.Future[Any]
    enqueued_ms: int
    generate: Generate | None = None
    query: Query | None = None
    origin: BatchOrigin = EMPTY_ORIGIN
    # Set while parked waiting for this node to become active.
    deadline_ms: int = 0


def settle(fut: asyncio.Future[Any] | None, result: Any = None,
           exc: BaseException | None = None) -> None:
    if fut is None or fut.done():
        return  # the caller gave up waiting
    if exc is not None:
        fut.set_exception(exc)
    else:
        fut.set_result(result)


