"""Stable error codes, the per-item error value, and what a control manager returns.

The codes are part of the admin API (gRPC answers carry them as strings), so a value
is never renamed or reused; new codes are only added. Names follow Kafka's error names
so operators who know Kafka recognise them.
"""

from __future__ import annotations

import enum
from typing import Generic, TypeVar

import attrs

from controller.records import MetadataRecord, decode_record, encode_record


class ErrorCode(enum.StrEnum):
    """A stable, machine-readable error code (the value is the wire string)."""

    NONE = "NONE"
    INVALID_TOPIC_EXCEPTION = "INVALID_TOPIC_EXCEPTION"
    TOPIC_ALREADY_EXISTS = "TOPIC_ALREADY_EXISTS"
    UNKNOWN_TOPIC_OR_PARTITION = "UNKNOWN_TOPIC_OR_PARTITION"
    UNKNOWN_TOPIC_ID = "UNKNOWN_TOPIC_ID"
    INVALID_PARTITIONS = "INVALID_PARTITIONS"
    INVALID_REPLICATION_FACTOR = "INVALID_REPLICATION_FACTOR"
    INVALID_REPLICA_ASSIGNMENT = "INVALID_REPLICA_ASSIGNMENT"
    INVALID_CONFIG = "INVALID_CONFIG"
    INVALID_REQUEST = "INVALID_REQUEST"
    DUPLICATE_RESOURCE = "DUPLICATE_RESOURCE"
    STALE_BROKER_EPOCH = "STALE_BROKER_EPOCH"
    BROKER_ID_NOT_REGISTERED = "BROKER_ID_NOT_REGISTERED"
    DUPLICATE_BROKER_REGISTRATION = "DUPLICATE_BROKER_REGISTRATION"
    INCONSISTENT_CLUSTER_ID = "INCONSISTENT_CLUSTER_ID"
    NO_REASSIGNMENT_IN_PROGRESS = "NO_REASSIGNMENT_IN_PROGRESS"
    ELIGIBLE_LEADERS_NOT_AVAILABLE = "ELIGIBLE_LEADERS_NOT_AVAILABLE"
    ELECTION_NOT_NEEDED = "ELECTION_NOT_NEEDED"
    PREFERRED_LEADER_NOT_AVAILABLE = "PREFERRED_LEADER_NOT_AVAILABLE"
    INVALID_UPDATE_VERSION = "INVALID_UPDATE_VERSION"
    # AlterPartition (a partition leader reporting its ISR).
    FENCED_LEADER_EPOCH = "FENCED_LEADER_EPOCH"
    NOT_LEADER_OR_FOLLOWER = "NOT_LEADER_OR_FOLLOWER"
    INELIGIBLE_REPLICA = "INELIGIBLE_REPLICA"
    UNSUPPORTED_VERSION = "UNSUPPORTED_VERSION"
    NOT_CONTROLLER = "NOT_CONTROLLER"
    CONTROLLER_BUSY = "CONTROLLER_BUSY"
    REQUEST_TOO_LARGE = "REQUEST_TOO_LARGE"
    # Quorum membership (KIP-853's codes).
    DUPLICATE_VOTER = "DUPLICATE_VOTER"
    VOTER_NOT_FOUND = "VOTER_NOT_FOUND"
    REQUEST_TIMED_OUT = "REQUEST_TIMED_OUT"
    UNKNOWN_SERVER_ERROR = "UNKNOWN_SERVER_ERROR"
    # A conditional write whose condition (a mod offset, a partition epoch) no longer
    # holds: the resource changed since it was read. Nothing was written for it.
    CONDITION_FAILED = "CONDITION_FAILED"


@attrs.frozen
class ApiError:
    """A per-item outcome: a code and, unless NONE, a message a person can act on."""

    code: ErrorCode
    message: str = ""

    @property
    def ok(self) -> bool:
        return self.code is ErrorCode.NONE

    def __str__(self) -> str:
        return self.code.value if not self.message else f"{self.code.value}: {self.message}"


# The success value, shared (ApiError is immutable).
OK = ApiError(ErrorCode.NONE)


def condition_failed(what: str, mod_offset: int, expected: int) -> ApiError:
    """A conditional write's refusal: `what` changed since the caller read it (its mod
    offset is not the `expected` one)."""
    now = "has none" if mod_offset < 0 else f"was last changed at offset {mod_offset}"
    return ApiError(ErrorCode.CONDITION_FAILED,
                    f"{what} {now}, not {expected} as the condition says: it changed since "
                    "it was read; read it again")

R = TypeVar("R")


@attrs.frozen(init=False)
class ControllerResult(Generic[R]):
    """What a control manager's write operation produces: records to append, and the
    response to give once they commit. Generating a result changes no durable state;
    only replaying the records does.

    A manager gives its records as values, or (where it writes them faster as bytes:
    new partitions) as their bytes, never both: `records` decodes bytes and `encoded`
    encodes values when asked (tests, tools); the controller takes what was given
    (`given_bytes`)."""

    response: R
    _records: tuple[MetadataRecord, ...] | None
    _encoded: tuple[bytes, ...] | None

    def __init__(self, records: tuple[MetadataRecord, ...] = (), response: R = None,  # type: ignore[assignment]
                 *, encoded: tuple[bytes, ...] | None = None) -> None:
        assert encoded is None or not records, "records or their bytes, not both"
        object.__setattr__(self, "response", response)
        object.__setattr__(self, "_records", None if encoded is not None else tuple(records))
        object.__setattr__(self, "_encoded", None if encoded is None else tuple(encoded))

    @property
    def given_bytes(self) -> tuple[bytes, ...] | None:
        """The records' bytes if the manager gave bytes (None: it gave values)."""
        return self._encoded

    @property
    def records(self) -> tuple[MetadataRecord, ...]:
        if self._records is not None:
            return self._records
        assert self._encoded is not None
        return tuple(decode_record(data) for data in self._encoded)

    @property
    def encoded(self) -> tuple[bytes, ...]:
        if self._encoded is not None:
            return self._encoded
        assert self._records is not None
        return tuple(encode_record(record) for record in self._records)

    def __len__(self) -> int:
        """How many records."""
        return len(self._records if self._records is not None else self._encoded or ())


class MetadataReplayError(ValueError):
    """A record cannot be replayed onto the current state (it names an unknown topic,
    partition or broker, or the log is otherwise inconsistent). Replay checks before it
    changes anything, so the state is unchanged when this is raised."""
