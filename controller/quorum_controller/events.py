"""The values the controller's state machine works with: its modes and their one
transition table, a request, and the instructions it emits."""

from __future__ import annotations

import enum
from typing import Any

import attrs

from controller.api.seam import Args, OpContext, Operation, ReadConsistency, ResultCodec
from controller.logformat.batch import EMPTY_ORIGIN, BatchOrigin


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
    """One request for the machine: operation `op` on `args` (a write runs
    `op.run`, a read `op.query`), with `ctx`, what the operation reads besides."""

    id: int
    op: Operation
    args: Args
    ctx: OpContext
    enqueued_ms: int
    origin: BatchOrigin = EMPTY_ORIGIN
    consistency: ReadConsistency = ReadConsistency.LINEARIZABLE
    # Reads: served only at a committed end offset of at least this.
    min_offset: int = 0
    # Writes with a request id in `origin` and a codec are remembered (exactly once).
    codec: ResultCodec | None = None
    # Set while parked waiting for this node to become active.
    deadline_ms: int = 0

    @property
    def name(self) -> str:
        return self.op.name

    @property
    def is_write(self) -> bool:
        return self.op.run is not None


@attrs.frozen(slots=True)
class Answer:
    """Answer request `request_id` with `value`. `commit_ms`: how long its batch took
    from append to commit (None: a read, or a write that appended nothing).
    `read_offset`: for a read, the committed end offset it read at; for a write, the
    committed end offset that covers it (None: not known)."""

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

__all__ = ["MODE_TRANSITIONS", "Answer", "Fail", "Instruction", "Mode", "ReadConsistency",
           "Request", "RequestTooLargeError"]
