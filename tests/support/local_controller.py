"""``LocalController``: a ``ControllerFacade`` for TESTS ONLY.

It has no Raft, no event queue, no purgatory and no standby: a real
``MetadataState`` behind an asyncio lock, generating with the real control managers
and replaying each result at increasing offsets as if it committed at once. It
exists only so the API layer (services, client, CLI) can be tested in-process; the
single-threaded controller replaces it behind the same seam.

Test hooks: ``fail_next(exc)`` makes the next facade call raise ``exc`` before it
does anything (``fail_always`` for every call); ``hold``/``release`` stall calls;
``calls`` lists the facade methods called; ``batches`` keeps every appended batch
with its origin; ``record_count`` is the log length (a request that failed must
leave it unchanged).
"""

from __future__ import annotations

import asyncio
import collections
import random
import time
from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar

import attrs

from controller.api.seam import (
    ClusterDescription,
    Origin,
    QuorumDescription,
    ReadConsistency,
    ReplicaState,
    VoterChangeKind,
    VoterChangeOutcome,
)
from controller.metadata import (
    AlterConfigsResource,
    AlterConfigsResult,
    ApiError,
    BrokerHeartbeatReply,
    BrokerHeartbeatRequest,
    BrokerRegistrationReply,
    BrokerRegistrationRequest,
    ConfigResource,
    ControllerResult,
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
    ErrorCode,
    FeatureControlManager,
    FeatureDescription,
    FeatureUpdate,
    FeatureUpdateResult,
    MetadataState,
    OngoingReassignment,
    ReassignmentRequest,
    ReassignmentResult,
    TopicDescription,
    TopicListing,
    TopicPartition,
)
from controller.records import MetadataRecord
from controller.security.acl import AclBinding, AclFilter

R = TypeVar("R")
T = TypeVar("T")


@attrs.frozen
class LocalBatch:
    base_offset: int
    origin: Origin
    records: tuple[MetadataRecord, ...]


class LocalController:
    """See the module docstring: no Raft, tests only."""

    def __init__(
        self,
        *,
        cluster_id: str = "local-cluster",
        node_id: int = 1,
        seed: int = 0,
        clock_ms: Callable[[], int] | None = None,
    ) -> None:
        self._cluster_id = cluster_id
        self.node_id = node_id
        self.state = MetadataState(cluster_id=cluster_id, rng=random.Random(seed))
        self._clock_ms = clock_ms or (lambda: int(time.time() * 1000))
        self._lock: asyncio.Lock | None = None
        self.batches: list[LocalBatch] = []
        self.next_offset = 0
        self.calls: list[str] = []
        # deque: the test thread appends while the server's loop thread pops.
        self._faults: collections.deque[BaseException] = collections.deque()
        self.standing_fault: BaseException | None = None
        self._append(FeatureControlManager.bootstrap_records(), Origin("bootstrap", ""))

    # -- test hooks --------------------------------------------------------------------

    def fail_next(self, exc: BaseException, times: int = 1) -> None:
        self._faults.extend([exc] * times)

    def fail_always(self, exc: BaseException | None) -> None:
        self.standing_fault = exc

    async def hold(self) -> None:
        """Every later facade call waits, after it is counted in ``calls``, until
        ``release`` (both run on the server's loop: ``ApiServer.run``)."""
        if self._lock is None:
            self._lock = asyncio.Lock()
        await self._lock.acquire()

    async def release(self) -> None:
        assert self._lock is not None
        self._lock.release()

    @property
    def record_count(self) -> int:
        return self.next_offset

    # -- the write path ----------------------------------------------------------------

    def _append(self, records: Sequence[MetadataRecord], origin: Origin) -> None:
        if not records:
            return
        base = self.next_offset
        self.next_offset = self.state.replay_batch(records, base)
        self.state.registry.create_snapshot(self.next_offset - 1)
        self.batches.append(LocalBatch(base, origin, tuple(records)))

    async def _enter(self, name: str) -> asyncio.Lock:
        self.calls.append(name)
        fault = self._faults.popleft() if self._faults else self.standing_fault
        if fault is not None:
            raise fault
        if self._lock is None:
            self._lock = asyncio.Lock()
        return self._lock

    async def _write(
        self, name: str, origin: Origin, generate: Callable[[], ControllerResult[R]]
    ) -> R:
        async with await self._enter(name):
            result = generate()
            self._append(result.records, origin)
            return result.response

    async def _read(self, name: str, query: Callable[[], T]) -> T:
        async with await self._enter(name):
            return query()

    # -- ControllerFacade --------------------------------------------------------------

    @property
    def cluster_id(self) -> str:
        return self._cluster_id

    def check_serves(self, *, write: bool, consistency: ReadConsistency) -> None:
        """Always the active controller: it serves everything."""

    async def create_topics(
        self, topics: Sequence[CreatableTopic], *, validate_only: bool, origin: Origin
    ) -> tuple[CreateTopicResult, ...]:
        return await self._write(
            "create_topics",
            origin,
            lambda: self.state.replication.create_topics(topics, validate_only=validate_only),
        )

    async def delete_topics(
        self, names: Sequence[str], *, origin: Origin
    ) -> tuple[DeleteTopicResult, ...]:
        return await self._write(
            "delete_topics", origin, lambda: self.state.replication.delete_topics(names)
        )

    async def create_partitions(
        self, topics: Sequence[CreatePartitionsTopic], *, validate_only: bool, origin: Origin
    ) -> tuple[CreatePartitionsResult, ...]:
        return await self._write(
            "create_partitions",
            origin,
            lambda: self.state.replication.create_partitions(topics, validate_only=validate_only),
        )

    async def list_topics(self, *, origin: Origin) -> tuple[TopicListing, ...]:
        return await self._read("list_topics", self.state.replication.list_topics)

    async def describe_topics(
        self, names: Sequence[str] | None, *, origin: Origin
    ) -> tuple[TopicDescription, ...]:
        return await self._read(
            "describe_topics", lambda: self.state.replication.describe_topics(names)
        )

    async def describe_cluster(self, *, origin: Origin) -> ClusterDescription:
        return await self._read(
            "describe_cluster",
            lambda: ClusterDescription(
                self._cluster_id, self.node_id, self.state.cluster.brokers()
            ),
        )

    async def incremental_alter_configs(
        self, resources: Sequence[AlterConfigsResource], *, validate_only: bool, origin: Origin
    ) -> tuple[AlterConfigsResult, ...]:
        return await self._write(
            "incremental_alter_configs",
            origin,
            lambda: self.state.configs.incremental_alter_configs(
                resources, validate_only=validate_only
            ),
        )

    async def describe_configs(
        self, resources: Sequence[ConfigResource], *, origin: Origin
    ) -> tuple[DescribeConfigsResult, ...]:
        return await self._read(
            "describe_configs", lambda: self.state.configs.describe_configs(resources)
        )

    async def alter_partition_reassignments(
        self, items: Sequence[ReassignmentRequest], *, origin: Origin
    ) -> tuple[ReassignmentResult, ...]:
        return await self._write(
            "alter_partition_reassignments",
            origin,
            lambda: self.state.replication.alter_partition_reassignments(items),
        )

    async def list_partition_reassignments(
        self, partitions: Sequence[TopicPartition] | None, *, origin: Origin
    ) -> tuple[OngoingReassignment, ...]:
        def query() -> tuple[OngoingReassignment, ...]:
            found = self.state.replication.list_reassignments()
            if partitions is None:
                return found
            wanted = set(partitions)
            return tuple(r for r in found if TopicPartition(r.topic, r.partition) in wanted)

        return await self._read("list_partition_reassignments", query)

    async def elect_leaders(
        self,
        partitions: Sequence[TopicPartition] | None,
        election_type: ElectionType,
        *,
        origin: Origin,
    ) -> tuple[ElectLeadersResult, ...]:
        return await self._write(
            "elect_leaders",
            origin,
            lambda: self.state.replication.elect_leaders(partitions, election_type),
        )

    async def unregister_broker(self, broker_id: int, *, origin: Origin) -> ApiError:
        return await self._write(
            "unregister_broker", origin, lambda: self.state.cluster.unregister_broker(broker_id)
        )

    async def describe_quorum(self, *, origin: Origin) -> QuorumDescription:
        def query() -> QuorumDescription:
            now = self._clock_ms()
            me = ReplicaState(self.node_id, self.next_offset, now, now)
            return QuorumDescription(self.node_id, 1, self.next_offset, (me,))

        return await self._read("describe_quorum", query)

    async def describe_features(self, *, origin: Origin) -> tuple[FeatureDescription, ...]:
        found = await self._read("describe_features", self.state.features.describe)
        # One in-process controller: a static voter set.
        return (*found, FeatureDescription("kraft.version", 0, 0, 1))

    async def change_raft_voters(self, kind: VoterChangeKind, node_id: int, directory_id: str,
                                 endpoint: str, *, validate_only: bool, timeout_ms: int,
                                 origin: Origin) -> VoterChangeOutcome:
        return VoterChangeOutcome(ApiError(
            ErrorCode.UNSUPPORTED_VERSION, "the voter set is static (one in-process controller)"))

    async def update_features(
        self, updates: Sequence[FeatureUpdate], *, validate_only: bool, origin: Origin
    ) -> tuple[FeatureUpdateResult, ...]:
        return await self._write(
            "update_features",
            origin,
            lambda: self.state.features.update_features(updates, validate_only=validate_only),
        )

    async def create_acls(
        self, bindings: Sequence[AclBinding], *, origin: Origin
    ) -> tuple[CreateAclResult, ...]:
        return await self._write("create_acls", origin,
                                 lambda: self.state.access.create_acls(bindings))

    async def describe_acls(self, acl_filter: AclFilter, *, origin: Origin
                            ) -> DescribeAclsResult:
        return await self._read("describe_acls",
                                lambda: self.state.access.describe_acls(acl_filter))

    async def delete_acls(
        self, filters: Sequence[AclFilter], *, origin: Origin
    ) -> tuple[DeleteAclsResult, ...]:
        return await self._write("delete_acls", origin,
                                 lambda: self.state.access.delete_acls(filters))

    def acl_version(self) -> int:
        return self.state.access.version()

    def acl_bindings(self) -> Iterable[AclBinding]:
        return self.state.access.bindings()

    async def register_broker(
        self, request: BrokerRegistrationRequest, *, origin: Origin
    ) -> BrokerRegistrationReply:
        return await self._write(
            "register_broker",
            origin,
            lambda: self.state.cluster.register_broker(
                request, next_offset=self.next_offset, now_ms=self._clock_ms()
            ),
        )

    async def broker_heartbeat(
        self, request: BrokerHeartbeatRequest, *, origin: Origin
    ) -> BrokerHeartbeatReply:
        return await self._write(
            "broker_heartbeat",
            origin,
            lambda: self.state.cluster.process_heartbeat(request, now_ms=self._clock_ms()),
        )
