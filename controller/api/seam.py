"""The seam between the gRPC services and the controller: ``ControllerFacade``.

The services convert and validate wire messages, then call one facade method per
RPC with the control managers' own request values (``controller.metadata``) and
the request's ``Origin``; the facade answers with the managers' result values. The
single-threaded controller (`quorum_controller/facade.py`) implements it, in the
daemon and (over an in-memory quorum) in the API tests.

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
from collections.abc import Sequence
from typing import Protocol

import attrs

from controller.metadata import (
    AlterConfigsResource,
    AlterConfigsResult,
    ApiError,
    BrokerHeartbeatReply,
    BrokerHeartbeatRequest,
    BrokerRegistrationReply,
    BrokerRegistrationRequest,
    ConfigResource,
    CreatableTopic,
    CreateAclResult,
    CreatePartitionsResult,
    CreatePartitionsTopic,
    CreateTopicResult,
    DeleteAclsResult,
    DeleteTopicResult,
    DescribeAclsResult,
    DescribeConfigsResult,
    ElectionType,
    ElectLeadersResult,
    FeatureDescription,
    FeatureUpdate,
    FeatureUpdateResult,
    OngoingReassignment,
    ReassignmentRequest,
    ReassignmentResult,
    TopicDescription,
    TopicListing,
    TopicPartition,
)
from controller.records.domain import BrokerRegistration
from controller.security.acl import AclBinding, AclFilter

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


# The committed end offset the current task's last read was served at (None: no read
# yet). `QuorumController.read` sets it; the API handler returns it to the caller in
# trailing metadata (`x-metakraft-read-offset`). A context variable, so concurrent
# requests (each its own task) never see each other's.
READ_OFFSET: contextvars.ContextVar[int | None] = contextvars.ContextVar(
    "metakraft_read_offset", default=None)


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


class ControllerTimeoutError(Exception):
    """No answer in time. For a write the outcome is unknown: it may still be applied."""


# -- the seam ------------------------------------------------------------------------


class ControllerFacade(Protocol):
    """One async method per RPC. Reads answer at the committed offset; writes answer
    once their records are committed. Batch methods answer per item, in order."""

    @property
    def cluster_id(self) -> str: ...

    def check_serves(self, *, write: bool, consistency: ReadConsistency) -> None:
        """Raise `NotControllerError` when this node would refuse the request anyway
        (a write or a linearizable read on a standby). Called before authorization:
        a standby's ACLs are as of its committed offset, which may lag the active
        controller's, and a request it would not serve must be redirected, not denied."""

    async def create_topics(
        self, topics: Sequence[CreatableTopic], *, validate_only: bool, origin: Origin
    ) -> tuple[CreateTopicResult, ...]: ...

    async def delete_topics(
        self, names: Sequence[str], *, origin: Origin
    ) -> tuple[DeleteTopicResult, ...]: ...

    async def create_partitions(
        self, topics: Sequence[CreatePartitionsTopic], *, validate_only: bool, origin: Origin
    ) -> tuple[CreatePartitionsResult, ...]: ...

    async def list_topics(self, *, origin: Origin) -> tuple[TopicListing, ...]: ...

    async def describe_topics(
        self, names: Sequence[str] | None, *, origin: Origin
    ) -> tuple[TopicDescription, ...]:
        """``None``: every topic."""
        ...

    async def describe_cluster(self, *, origin: Origin) -> ClusterDescription: ...

    async def incremental_alter_configs(
        self, resources: Sequence[AlterConfigsResource], *, validate_only: bool, origin: Origin
    ) -> tuple[AlterConfigsResult, ...]: ...

    async def describe_configs(
        self, resources: Sequence[ConfigResource], *, origin: Origin
    ) -> tuple[DescribeConfigsResult, ...]: ...

    async def alter_partition_reassignments(
        self, items: Sequence[ReassignmentRequest], *, origin: Origin
    ) -> tuple[ReassignmentResult, ...]: ...

    async def list_partition_reassignments(
        self, partitions: Sequence[TopicPartition] | None, *, origin: Origin
    ) -> tuple[OngoingReassignment, ...]:
        """``None``: every ongoing reassignment."""
        ...

    async def elect_leaders(
        self,
        partitions: Sequence[TopicPartition] | None,
        election_type: ElectionType,
        *,
        origin: Origin,
    ) -> tuple[ElectLeadersResult, ...]:
        """``None``: every partition that needs an election."""
        ...

    async def unregister_broker(self, broker_id: int, *, origin: Origin) -> ApiError: ...

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

    async def describe_features(self, *, origin: Origin) -> tuple[FeatureDescription, ...]: ...

    async def update_features(
        self, updates: Sequence[FeatureUpdate], *, validate_only: bool, origin: Origin
    ) -> tuple[FeatureUpdateResult, ...]: ...

    async def create_acls(
        self, bindings: Sequence[AclBinding], *, origin: Origin
    ) -> tuple[CreateAclResult, ...]: ...

    async def describe_acls(self, acl_filter: AclFilter, *, origin: Origin
                            ) -> DescribeAclsResult: ...

    async def delete_acls(
        self, filters: Sequence[AclFilter], *, origin: Origin
    ) -> tuple[DeleteAclsResult, ...]: ...

    async def register_broker(
        self, request: BrokerRegistrationRequest, *, origin: Origin
    ) -> BrokerRegistrationReply: ...

    async def broker_heartbeat(
        self, request: BrokerHeartbeatRequest, *, origin: Origin
    ) -> BrokerHeartbeatReply: ...
