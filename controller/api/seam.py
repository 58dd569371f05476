"""The seam between the gRPC services and the controller: ``ControllerFacade``.

The services convert and validate wire messages into the control managers' own
values (``Args``: ``controller.metadata`` items and flags), then call the facade:
its one write path or one read path with the RPC's ``Operation``
(``controller/api/rpcs.py``), or its method for a call about the quorum or this
node; the facade answers with the managers' result values. The single-threaded
controller (`quorum_controller/facade.py`) implements it, in the daemon and (over
an in-memory quorum) in the API tests.

Errors the facade raises, and what they promise (the client's retry policy rests on
these promises, so an implementation must keep them):

- ``NotControllerError``: this node is not the active controller and the request
  was NOT appended to the log; it is safe to send it to the leader. A request whose
  records were appended before leadership was lost must NOT get this error (a new
  leader may still commit them): raise ``ControllerTimeoutError`` instead.
- ``ControllerBusyError``: the request was refused before it was queued (queue full,
  too much work); nothing was applied.
- ``ControllerTimeoutError``: no answer in time; for a write the outcome is unknown.

Anything else is a bug: the service answers INTERNAL and logs it with an error id.
"""

from __future__ import annotations

import contextvars
import enum
import re
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import attrs

from controller.metadata import (
    ApiError,
    BrokerHeartbeatReply,
    BrokerHeartbeatRequest,
    BrokerRegistrationReply,
    BrokerRegistrationRequest,
    ControllerResult,
    MetadataState,
)
from controller.metadata.alter_partition import AlterPartitionRequest, AlterPartitionResult
from controller.records.domain import BrokerRegistration

# -- values the managers do not have -------------------------------------------------


class ReadConsistency(enum.Enum):
    # The default: the active controller confirms with a majority that it still
    # leads (ReadIndex), then answers at a committed offset at least that of the
    # moment the read arrived. Sees every write acknowledged before it was sent.
    LINEARIZABLE = "linearizable"
    # Any controller, standbys included, answers at once from its own committed
    # state: possibly behind; the answer says at which offset it was read.
    STALE = "stale"



@attrs.frozen
class Origin:
    """Who sent a request (recorded as the origin of the batch it produces), and how
    they want it read."""

    # The authenticated principal (User:ANONYMOUS on a plaintext listener).
    principal: str
    # The peer address as gRPC reports it (e.g. "ipv4:127.0.0.1:53122").
    client_address: str
    # The caller's request id, "" when it gave none.
    request_id: str = ""
    # Reads only: linearizable (the default) or stale (any controller, at once).
    consistency: ReadConsistency = ReadConsistency.LINEARIZABLE
    # Reads only: answer at a committed end offset of at least this (0: any), the
    # highest the client has seen (session consistency).
    min_offset: int = 0


# The committed end offset the current task's last read was served at (None: no read
# yet). `QuorumController.read` sets it; the API handler returns it to the caller in
# trailing metadata (`x-metakraft-read-offset`). A context variable, so concurrent
# requests (each its own task) never see each other's.
READ_OFFSET: contextvars.ContextVar[int | None] = contextvars.ContextVar(
    "metakraft_read_offset", default=None)
# For a stale read: the Raft high watermark the answering controller knew (how far
# behind the leader its answer may be), returned as `x-metakraft-high-watermark`.
HIGH_WATERMARK: contextvars.ContextVar[int | None] = contextvars.ContextVar(
    "metakraft_high_watermark", default=None)


@attrs.frozen
class ClusterDescription:
    cluster_id: str
    # The active controller's node id, -1 when unknown.
    controller_id: int
    brokers: tuple[BrokerRegistration, ...]


@attrs.frozen
class ReplicaState:
    """One quorum member as the leader sees it (-1 where unknown)."""

    replica_id: int
    log_end_offset: int = -1
    last_fetch_timestamp_ms: int = -1
    last_caught_up_timestamp_ms: int = -1
    directory_id: str = ""
    endpoint: str = ""
    # metadata.version levels its software supports ((0, 0): not said).
    supported_versions: tuple[int, int] = (0, 0)


@attrs.frozen
class QuorumDescription:
    # -1 when there is no leader.
    leader_id: int
    leader_epoch: int
    high_watermark: int
    voters: tuple[ReplicaState, ...]
    observers: tuple[ReplicaState, ...] = ()
    # The voter set lives in the log and can change (else: the configured voters).
    dynamic: bool = False
    # Who answered: its id, directory id and address.
    node_id: int = -1
    node_directory_id: str = ""
    node_endpoint: str = ""
    cluster_id: str = ""


@attrs.frozen(kw_only=True)
class NodeDescription:
    """One controller's own state, as it sees it (`metakraft endpoint status`); the
    fields are DescribeNodeResponse's (admin.proto says what each means)."""

    node_id: int
    directory_id: str
    endpoint: str
    cluster_id: str
    role: str
    controller_mode: str
    leader_id: int
    leader_epoch: int
    high_watermark: int
    log_start_offset: int
    log_end_offset: int
    flushed_offset: int
    applied_offset: int
    data_dir_bytes: int
    software_version: str
    min_supported_version: int
    max_supported_version: int
    finalized_metadata_version: int
    voter: bool
    repair_to_offset: int = -1
    uptime_ms: int = 0
    transfer_target: int = -1


@attrs.frozen
class TransferOutcome:
    """What a leadership transfer did: the leader and epoch after it (-1: none known)."""

    error: ApiError
    leader_id: int = -1
    leader_epoch: int = -1


class VoterChangeKind(enum.Enum):
    ADD = "add"
    REMOVE = "remove"
    UPDATE = "update"


@attrs.frozen
class VoterChangeOutcome:
    """What a voter change did: `offset` of the voter set written (-1: none) and the
    voter set after it."""

    error: ApiError
    offset: int = -1
    voters: tuple[ReplicaState, ...] = ()


# -- errors --------------------------------------------------------------------------


class NotControllerError(Exception):
    """Not the active controller; the request was not appended (see module doc)."""

    def __init__(self, leader_id: int | None, leader_address: str | None) -> None:
        self.leader_id = leader_id
        self.leader_address = leader_address
        if leader_id is None:
            where = "the active controller is not known yet (an election may be running)"
        else:
            where = f"the active controller is node {leader_id}"
            if leader_address:
                where += f" at {leader_address}"
        super().__init__(f"this node is not the active controller; {where}")


class RequestIdReusedError(Exception):
    """The request id was used by an earlier write of another method: nothing applied
    (INVALID_ARGUMENT). A request id names one write; pick a new one."""


class ResultNotKeptError(Exception):
    """A retry of a write that was applied, whose answer was too large to keep: the
    work was done once and is not repeated (ALREADY_EXISTS); describe to see it."""


class ControllerBusyError(Exception):
    """Refused before it was queued: the controller is overloaded. Nothing applied."""


class BehindError(Exception):
    """A read asked for state at least as new as `min_offset`, and this controller had
    not applied that far within its wait (`stale_read_wait_ms`). Nothing is wrong with
    the request: another controller, or this one a little later, can answer it."""

    def __init__(self, applied_offset: int, min_offset: int, high_watermark: int | None) -> None:
        known = "" if high_watermark is None else \
            f"; the leader's high watermark it knows is {high_watermark}"
        super().__init__(f"this controller has applied the log to offset {applied_offset}, "
                         f"{min_offset - applied_offset} short of the requested min_offset "
                         f"{min_offset}{known}")
        self.applied_offset = applied_offset
        self.min_offset = min_offset


class ControllerTimeoutError(Exception):
    """No answer in time. For a write the outcome is unknown: it may still be applied."""


# -- the seam ------------------------------------------------------------------------


@attrs.frozen
class ResultCodec:
    """A write's answer as bytes and back: kept in the replicated table of recent
    writes, so a retry (maybe to the next leader) gets the original answer."""

    encode: Callable[[Any], bytes]
    decode: Callable[[bytes], Any]


@attrs.frozen
class Args:
    """One call's arguments as the control managers take them: its items (topics,
    names, resources, partitions, bindings, filters ...; None: "all of them") and
    flags. Item limits count `items`."""

    items: tuple[Any, ...] | None = ()
    validate_only: bool = False
    # The call's one other argument (an election type, an ACL filter, a broker's
    # registration or heartbeat, a voter change ...).
    extra: Any = None

    @property
    def count(self) -> int:
        return len(self.items or ())


class OpContext(Protocol):
    """What an operation reads beside its arguments: the metadata state and a few
    facts about the quorum (the facade gives its own; the simulation its own)."""

    @property
    def state(self) -> MetadataState: ...

    @property
    def cluster_id(self) -> str: ...

    def active_controller_id(self) -> int | None:
        """The active controller this node knows (itself when active)."""
        ...

    def quorum_is_dynamic(self) -> bool:
        """Whether the voter set lives in the log (kraft.version 1)."""
        ...

    def voter_versions(self) -> Mapping[int, tuple[int, int]] | None:
        """Each voter's supported metadata.version range, as its fetches told this
        leader (None: not leading)."""
        ...


# A write: (context, args, next offset, now in ms) -> records and the answer.
Run = Callable[[OpContext, Args, int, int], ControllerResult[Any]]
# A read at a committed offset: (context, args, read epoch) -> the answer.
Query = Callable[[OpContext, Args, int], Any]


@attrs.frozen
class Operation:
    """What the controller does for one kind of request: a write (`run`: its records
    and answer from the latest state) or a read (`query`, at a committed offset).
    `name` is the one name of the operation in metrics, logs and the simulation (an
    Admin RPC's name, e.g. CreateTopics)."""

    name: str
    run: Run | None = None
    query: Query | None = None

    def __attrs_post_init__(self) -> None:
        assert (self.run is None) != (self.query is None), self.name

    @property
    def stored_name(self) -> str:
        """The name the table of recent writes stores with an answer (and compares a
        retry's with): snake_case, as every release has stored it, so a retry across
        an upgrade still matches (CreateTopics -> create_topics)."""
        return re.sub(r"(?<!^)(?=[A-Z])", "_", self.name).lower()


class ControllerFacade(Protocol):
    """The controller as the services see it: a generic write and read for every
    Admin RPC that is an operation on the metadata (controller/api/rpcs.py), and a
    method for each that is about the quorum or this node. Reads answer at the
    committed offset; writes answer once their records are committed."""

    @property
    def cluster_id(self) -> str: ...

    def check_serves(self, *, write: bool, consistency: ReadConsistency) -> None:
        """Raise `NotControllerError` when this node would refuse the request anyway
        (a write or a linearizable read on a standby). Called before authorization:
        a standby's ACLs are as of its committed offset, which may lag the active
        controller's, and a request it would not serve must be redirected, not denied."""

    async def write(self, op: Operation, args: Args, *, origin: Origin,
                    fail_all: Callable[[Args, ApiError], Any],
                    codec: ResultCodec | None = None) -> Any:
        """Run write `op` once its records commit. Over the item limit, or too large
        for one batch: `fail_all(args, error)`, nothing applied. With a `codec` and a
        request id, a retry gets the first answer."""
        ...

    async def read(self, op: Operation, args: Args, *, origin: Origin,
                   fail_all: Callable[[Args, ApiError], Any]) -> Any:
        """Run read `op` at a committed offset (`origin.consistency`)."""
        ...

    async def describe_quorum(self, *, origin: Origin) -> QuorumDescription: ...

    async def change_raft_voters(self, kind: VoterChangeKind, node_id: int, directory_id: str,
                                 endpoint: str, *, validate_only: bool, timeout_ms: int,
                                 origin: Origin) -> VoterChangeOutcome:
        """Add, remove or update a voter of a dynamic quorum (on the active
        controller; raises `NotControllerError` elsewhere)."""
        ...

    async def transfer_leadership(self, target_id: int, *, timeout_ms: int,
                                  origin: Origin) -> TransferOutcome:
        """Hand leadership to voter `target_id` (on the active controller; raises
        `NotControllerError` elsewhere)."""
        ...

    async def describe_node(self, *, origin: Origin) -> NodeDescription:
        """This controller's own state, whatever its role."""
        ...

    async def register_broker(
        self, request: BrokerRegistrationRequest, *, origin: Origin
    ) -> BrokerRegistrationReply: ...

    async def broker_heartbeat(
        self, request: BrokerHeartbeatRequest, *, origin: Origin
    ) -> BrokerHeartbeatReply: ...

    async def alter_partition(
        self, request: AlterPartitionRequest, *, origin: Origin
    ) -> tuple[AlterPartitionResult, ...]: ...
