"""The values the controller's state machine works with: its modes and their one
transition table, a request, and the instructions it emits."""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Any, Protocol

import attrs

from controller.api.seam import ReadConsistency
from controller.logformat.batch import EMPTY_ORIGIN, BatchOrigin
from controller.metadata import ControllerResult

# Generates a write's records and response: (next offset, now in ms) -> result.
Generate = Callable[[int, int], ControllerResult[Any]]
# Answers a read at a committed offset (a live registry snapshot).
Query = Callable[[int], Any]


class ResponseCodec(Protocol):
    """A write's answer as bytes and back (`controller.api.results`): kept in the
    replicated table of recent writes so a retry gets the original answer."""

    @property
    def encode(self) -> Callable[[Any], bytes]: ...

    @property
    def decode(self) -> Callable[[bytes], Any]: ...


class RequestTooLargeError(Exception):
    """The request's records do not fit one batch; nothing was applied."""


class Mode(enum.Enum):
    # Replays what commits; answers requests "not controller".
    STANDBY = "standby"
    # Won an election; waits for its LeaderChange batch to commit (requests park).
    PENDING = "pending"
    # The active controller: writes and reads.
    ACTIVE = "active"


# Every mode change the controller may make; `ControllerMachine._become` asserts it.
MODE_TRANSITIONS: dict[Mode, frozenset[Mode]] = {
    Mode.STANDBY: frozenset({Mode.PENDING}),
    Mode.PENDING: frozenset({Mode.ACTIVE, Mode.STANDBY}),
    Mode.ACTIVE: frozenset({Mode.STANDBY}),
}


@attrs.define(slots=True)
class Request:
    """One admin request for the machine: a write (`generate`) or a read (`query`)."""

    id: int
    name: str
    enqueued_ms: int
    generate: Generate | None = None
    query: Query | None = None
    origin: BatchOrigin = EMPTY_ORIGIN
    consistency: ReadConsistency = ReadConsistency.LINEARIZABLE
    # Writes with a request id in `origin` and a codec are remembered (exactly once).
    codec: ResponseCodec | None = None
    # Set while parked waiting for this node to become active.
    deadline_ms: int = 0

    def __attrs_post_init__(self) -> None:
        assert (self.generate is None) != (self.query is None), self.name


@attrs.frozen(slots=True)
class Answer:
    """Answer request `request_id` with `value`. `commit_ms`: how long its batch took
    from append to commit (None: a read, or a write that appended nothing).
    `read_offset`: for a read, the committed end offset it read at."""

    request_id: int
    value: Any
    commit_ms: int | None = None
    read_offset: int | None = None


@attrs.frozen(slots=True)
class Fail:
    """Answer request `request_id` with `error` (a seam error, or a manager's bug)."""

    request_id: int
    error: BaseException


Instruction = Answer | Fail

__all__ = ["MODE_TRANSITIONS", "Answer", "Fail", "Generate", "Instruction", "Mode", "Query",
           "ReadConsistency", "Request", "RequestTooLargeError", "ResponseCodec"]
