"""`ControllerApi`: the `ControllerFacade` the gRPC services call, on a `QuorumController`.

Each method bounds the request's size, then queues one event: writes generate with
the managers (`controller.metadata`) and answer once committed; reads answer at the
committed offset. A request too large for one batch (or with too many items) gets
REQUEST_TOO_LARGE on every item and changes nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from controller.api.results import REMEMBERED_WRITES, codec_for
from controller.api.seam import (
    ClusterDescription,
    NodeDescription,
    Origin,
    QuorumDescription,
    ReadConsistency,
    ReplicaState,
    TransferOutcome,
    VoterChangeKind,
    VoterChangeOutcome,
)
from controller.log import get_logger
from controller.logformat.batch import BatchOrigin
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
from controller.quorum.proposals import ProposalLostError
from controller.quorum_controller import member_status
from controller.quorum_controller.controller import QuorumController
from controller.quorum_controller.events import RequestTooLargeError
from controller.quorum_controller.member_status import MAX_TRANSFER_WAIT_MS
from controller.quorum_controller.ports import QuorumPort
from controller.raft.voters import Voter, VoterChangeError
from controller.security.acl import AclBinding, AclFilter

T = TypeVar("T")
# Origin fields are stored in every batch header; keep them small.
MAX_ORIGIN_FIELD_CHARS = 256


def batch_origin(origin: Origin) -> BatchOrigin:
    def clip(text: str) -> str:
        return text[:MAX_ORIGIN_FIELD_CHARS]

    return BatchOrigin(clip(origin.principal), clip(origin.client_address),
                       clip(origin.request_id))


# The Raft layer's feature level: 1 = the voter set lives in the log (KIP-853).
KRAFT_VERSION = "kraft.version"

# The longest a voter change may wait (the new voter catching up, then the commit).
_MAX_VOTER_CHANGE_MS = 10 * 60 * 1000

_VOTER_ERROR_CODES = {
    VoterChangeError.STATIC_QUORUM: ErrorCode.UNSUPPORTED_VERSION,
    VoterChangeError.NO_HIGH_WATERMARK: ErrorCode.REQUEST_TIMED_OUT,
    VoterChangeError.CHANGE_PENDING: ErrorCode.REQUEST_TIMED_OUT,
    VoterChangeError.NOT_CAUGHT_UP: ErrorCode.REQUEST_TIMED_OUT,
    VoterChangeError.DUPLICATE_VOTER: ErrorCode.DUPLICATE_VOTER,
    VoterChangeError.UNKNOWN_VOTER: ErrorCode.VOTER_NOT_FOUND,
}


log = get_logger(__name__)


def _too_large(message: str) -> ApiError:
    return ApiError(ErrorCode.REQUEST_TOO_LARGE, message)


class ControllerApi:
    def __init__(self, controller: QuorumController, quorum: QuorumPort, *,
                 data_dir: Path | None = None) -> None:
        self.controller = controller
        self._quorum = quorum
        self._state = controller.state
        # This controller's data directory (its size is part of DescribeNode).
        self._data_dir = data_dir

    @property
    def cluster_id(self) -> str:
        return self.controller.settings.cluster_id

    def check_serves(self, *, write: bool, consistency: ReadConsistency) -> None:
        machine = self.controller.machine
        if machine.refuses(write=write, consistency=consistency):
            raise machine.not_controller()

    # ---------------------------------------------------------------- helpers

    def _count_error(self, count: int) -> ApiError | None:
        limit = self.controller.settings.max_items_per_request
        if count > limit:
            return _too_large(f"{count} items in one request (limit {limit}); split it")
        return None

    async def _write(self, name: str, count: int, generate: Callable[[int, int], ControllerResult[Any]],
                     origin: Origin, fail_all: Callable[[ApiError], T],
                     items: Sequence[Any] = ()) -> T:
        error = self._count_error(count)
        if error is not None:
            return fail_all(error)
        # Admin writes are remembered by request id (a retry gets the first answer).
        codec = codec_for(name, items) if name in REMEMBERED_WRITES else None
        try:
            result: T = await self.controller.write(name, generate, batch_origin(origin), codec)
        except RequestTooLargeError as exc:
            return fail_all(_too_large(str(exc)))
        return result

    # ---------------------------------------------------------------- topics

    async def create_topics(self, topics: Sequence[CreatableTopic], *, validate_only: bool,
                            origin: Origin) -> tuple[CreateTopicResult, ...]:
        items = tuple(topics)
        return await self._write(
            "create_topics", len(items),
            lambda _next, _now: self._state.replication.create_topics(
                items, validate_only=validate_only),
            origin, lambda err: tuple(CreateTopicResult(t.name, err) for t in items))

    async def delete_topics(self, names: Sequence[str], *,
                            origin: Origin) -> tuple[DeleteTopicResult, ...]:
        items = tuple(names)
        return await self._write(
            "delete_topics", len(items),
            lambda _next, _now: self._state.replication.delete_topics(items),
            origin, lambda err: tuple(DeleteTopicResult(n, err) for n in items))

    async def create_partitions(self, topics: Sequence[CreatePartitionsTopic], *,
                                validate_only: bool,
                                origin: Origin) -> tuple[CreatePartitionsResult, ...]:
        items = tuple(topics)
        return await self._write(
            "create_partitions", len(items),
            lambda _next, _now: self._state.replication.create_partitions(
                items, validate_only=validate_only),
            origin, lambda err: tuple(CreatePartitionsResult(t.name, err) for t in items))

    async def list_topics(self, *, origin: Origin) -> tuple[TopicListing, ...]:
        result: tuple[TopicListing, ...] = await self.controller.read(
            "list_topics", lambda epoch: self._state.replication.list_topics(epoch),
            origin.consistency)
        return result

    async def describe_topics(self, names: Sequence[str] | None, *,
                              origin: Origin) -> tuple[TopicDescription, ...]:
        items = None if names is None else tuple(names)
        error = self._count_error(0 if items is None else len(items))
        if error is not None:
            assert items is not None
            return tuple(TopicDescription(n, error) for n in items)
        result: tuple[TopicDescription, ...] = await self.controller.read(
            "describe_topics", lambda epoch: self._state.replication.describe_topics(items, epoch),
            origin.consistency)
        return result

    # ---------------------------------------------------------------- cluster

    async def describe_cluster(self, *, origin: Origin) -> ClusterDescription:
        def describe(epoch: int) -> ClusterDescription:
            # The active controller as the answering one knows it (a stale read on a
            # standby names the leader it follows; -1 while there is none).
            leader = self.controller.leader_id
            return ClusterDescription(self.cluster_id, -1 if leader is None else leader,
                                      self._state.cluster.brokers(epoch))

        result: ClusterDescription = await self.controller.read(
            "describe_cluster", describe, origin.consistency)
        return result

    async def unregister_broker(self, broker_id: int, *, origin: Origin) -> ApiError:
        return await self._write(
            "unregister_broker", 1,
            lambda _next, _now: self._state.cluster.unregister_broker(broker_id),
            origin, lambda err: err)

    async def describe_quorum(self, *, origin: Origin) -> QuorumDescription:
        def describe(_epoch: int) -> QuorumDescription:
            # On the active controller `replicas` is the Raft leader's view (fetch
            # offsets and times on the node's wall clock); a stale read on a standby
            # knows only its own log end.
            status = self._quorum.status()
            leader = -1 if status.leader_id is None else status.leader_id
            settings = self.controller.settings
            me = (status.voters.dynamic, status.node_id, status.directory_id,
                  settings.listen_address or settings.voter_addresses.get(status.node_id, ""),
                  settings.cluster_id)
            voter_ids = sorted(status.voters.ids) or sorted(settings.voter_addresses)
            known = {v.node_id: v for v in status.voters}

            def replica(replica_id: int, log_end_offset: int = -1, last_fetch_ms: int = -1,
                        caught_up_ms: int = -1, directory_id: str = "",
                        versions: tuple[int, int] = (0, 0)) -> ReplicaState:
                voter = known.get(replica_id)
                # A static quorum's voter set names no endpoints: the configured ones.
                endpoint = voter.endpoint if voter and voter.endpoint else \
                    settings.voter_addresses.get(replica_id, "") if replica_id in voter_ids \
                    else ""
                return ReplicaState(replica_id, log_end_offset, last_fetch_ms, caught_up_ms,
                                    voter.directory_id if voter else directory_id,
                                    endpoint, versions)

            if not status.replicas:
                voters = tuple(replica(v, status.end_offset if v == status.node_id else -1)
                               for v in voter_ids)
                return QuorumDescription(leader, status.epoch, status.high_watermark, voters,
                                         (), *me)
            states = {p.replica_id: replica(p.replica_id, p.log_end_offset, p.last_fetch_ms,
                                            p.last_caught_up_ms, p.directory_id,
                                            p.supported_versions)
                      for p in status.replicas}
            return QuorumDescription(
                leader, status.epoch, status.high_watermark,
                tuple(states[p.replica_id] for p in status.replicas if p.is_voter),
                tuple(states[p.replica_id] for p in status.replicas if not p.is_voter), *me)

        result: QuorumDescription = await self.controller.read(
            "describe_quorum", describe, origin.consistency)
        return result

    async def transfer_leadership(self, target_id: int, *, timeout_ms: int,
                                  origin: Origin) -> TransferOutcome:
        limit = self.controller.settings.request_timeout_ms
        timeout_ms = limit if timeout_ms <= 0 else min(timeout_ms, MAX_TRANSFER_WAIT_MS)
        outcome = await member_status.transfer_leadership(self.controller, self._quorum,
                                                          target_id, timeout_ms)
        log.info("leadership_transfer", target=target_id, principal=origin.principal,
                 request_id=origin.request_id, error=outcome.error.code.value,
                 leader=outcome.leader_id, epoch=outcome.leader_epoch)
        return outcome

    async def describe_node(self, *, origin: Origin) -> NodeDescription:
        def describe(_epoch: int) -> NodeDescription:
            return member_status.describe_node(self.controller, self._quorum.status(),
                                               self._data_dir)

        result: NodeDescription = await self.controller.read("describe_node", describe,
                                                             ReadConsistency.STALE)
        return result

    async def change_raft_voters(self, kind: VoterChangeKind, node_id: int, directory_id: str,
                                 endpoint: str, *, validate_only: bool, timeout_ms: int,
                                 origin: Origin) -> VoterChangeOutcome:
        limit = self.controller.settings.request_timeout_ms
        timeout_ms = limit if timeout_ms <= 0 else min(timeout_ms, _MAX_VOTER_CHANGE_MS)
        try:
            voter = Voter(node_id, directory_id, endpoint)
        except ValueError as exc:
            return VoterChangeOutcome(ApiError(ErrorCode.INVALID_REQUEST, str(exc)))
        try:
            result = await self.controller.change_voters(kind.value, voter,
                                                         timeout_s=timeout_ms / 1e3,
                                                         dry_run=validate_only)
        except TimeoutError:
            return VoterChangeOutcome(ApiError(
                ErrorCode.REQUEST_TIMED_OUT,
                f"the voter change did not commit within {timeout_ms} ms; it may still: "
                "check `metakraft quorum describe` before retrying"))
        except ProposalLostError as exc:
            return VoterChangeOutcome(ApiError(
                ErrorCode.NOT_CONTROLLER, f"the leader changed before the voter change "
                f"committed, and it was dropped ({exc}); retry"))
        if result.error is VoterChangeError.NOT_LEADER:
            raise self.controller.machine.not_controller()
        voters = () if result.voters is None else tuple(
            ReplicaState(v.node_id, directory_id=v.directory_id, endpoint=v.endpoint)
            for v in result.voters)
        if result.error is None:
            log.info("voters_changed", kind=kind.value, node=node_id, directory_id=directory_id,
                     principal=origin.principal, request_id=origin.request_id,
                     validate_only=validate_only,
                     offset=-1 if result.offset is None else result.offset)
            return VoterChangeOutcome(
                ApiError(ErrorCode.NONE), -1 if result.offset is None else result.offset, voters)
        code = _VOTER_ERROR_CODES.get(result.error, ErrorCode.INVALID_REQUEST)
        return VoterChangeOutcome(ApiError(code, result.message), -1, voters)

    # ---------------------------------------------------------------- configs

    async def incremental_alter_configs(self, resources: Sequence[AlterConfigsResource], *,
                                        validate_only: bool,
                                        origin: Origin) -> tuple[AlterConfigsResult, ...]:
        items = tuple(resources)
        return await self._write(
            "incremental_alter_configs", len(items),
            lambda _next, _now: self._state.configs.incremental_alter_configs(
                items, validate_only=validate_only),
            origin, lambda err: tuple(AlterConfigsResult(r.resource, err) for r in items))

    async def describe_configs(self, resources: Sequence[ConfigResource], *,
                               origin: Origin) -> tuple[DescribeConfigsResult, ...]:
        items = tuple(resources)
        error = self._count_error(len(items))
        if error is not None:
            return tuple(DescribeConfigsResult(r, error) for r in items)
        result: tuple[DescribeConfigsResult, ...] = await self.controller.read(
            "describe_configs", lambda epoch: self._state.configs.describe_configs(items, epoch),
            origin.consistency)
        return result

    # ---------------------------------------------------------------- partitions

    async def alter_partition_reassignments(self, items: Sequence[ReassignmentRequest], *,
                                            origin: Origin) -> tuple[ReassignmentResult, ...]:
        reqs = tuple(items)
        return await self._write(
            "alter_partition_reassignments", len(reqs),
            lambda _next, _now: self._state.replication.alter_partition_reassignments(reqs),
            origin, lambda err: tuple(ReassignmentResult(r.topic, r.partition, err)
                                      for r in reqs))

    async def list_partition_reassignments(self, partitions: Sequence[TopicPartition] | None, *,
                                           origin: Origin) -> tuple[OngoingReassignment, ...]:
        wanted = None if partitions is None else {(p.topic, p.partition) for p in partitions}

        def query(epoch: int) -> tuple[OngoingReassignment, ...]:
            ongoing = self._state.replication.list_reassignments(epoch)
            return tuple(r for r in ongoing
                         if wanted is None or (r.topic, r.partition) in wanted)

        result: tuple[OngoingReassignment, ...] = await self.controller.read(
            "list_partition_reassignments", query, origin.consistency)
        return result

    async def elect_leaders(self, partitions: Sequence[TopicPartition] | None,
                            election_type: ElectionType, *,
                            origin: Origin) -> tuple[ElectLeadersResult, ...]:
        items = None if partitions is None else tuple(partitions)
        return await self._write(
            "elect_leaders", 0 if items is None else len(items),
            lambda _next, _now: self._state.replication.elect_leaders(items, election_type),
            origin, lambda err: tuple(ElectLeadersResult(p.topic, p.partition, err)
                                      for p in items or ()))

    # ---------------------------------------------------------------- features

    async def describe_features(self, *, origin: Origin) -> tuple[FeatureDescription, ...]:
        result: tuple[FeatureDescription, ...] = await self.controller.read(
            "describe_features", lambda epoch: self._state.features.describe(epoch),
            origin.consistency)
        # The Raft layer's own feature: 1 when the voter set lives in the log (voter
        # changes allowed), 0 for a static quorum. Set when the quorum is formatted.
        dynamic = self._quorum.status().voters.dynamic
        return (*result, FeatureDescription(KRAFT_VERSION, int(dynamic), 0, 1))

    async def update_features(self, updates: Sequence[FeatureUpdate], *, validate_only: bool,
                              origin: Origin) -> tuple[FeatureUpdateResult, ...]:
        items = tuple(updates)
        if any(u.name == KRAFT_VERSION for u in items):
            error = ApiError(ErrorCode.UNSUPPORTED_VERSION, (
                f"{KRAFT_VERSION} is chosen when the controllers are formatted: 1 with "
                "--initial-controllers (a dynamic quorum), else 0; a static quorum cannot "
                "be upgraded online"))
            return tuple(FeatureUpdateResult(u.name, error) for u in items)
        # Each voter's supported range, as its fetches told this leader (none when not
        # leading: the write is refused as NOT_CONTROLLER anyway).
        replicas = self._quorum.status().replicas
        controllers = {r.replica_id: r.supported_versions for r in replicas
                       if r.is_voter} or None
        return await self._write(
            "update_features", len(items),
            lambda _next, _now: self._state.features.update_features(
                items, validate_only=validate_only, controllers=controllers),
            origin, lambda err: tuple(FeatureUpdateResult(u.name, err) for u in items))

    # ---------------------------------------------------------------- ACLs

    async def create_acls(self, bindings: Sequence[AclBinding], *,
                          origin: Origin) -> tuple[CreateAclResult, ...]:
        items = tuple(bindings)
        return await self._write(
            "create_acls", len(items),
            lambda _next, _now: self._state.access.create_acls(items),
            origin, lambda err: tuple(CreateAclResult(b, err) for b in items), items)

    async def describe_acls(self, acl_filter: AclFilter, *, origin: Origin
                            ) -> DescribeAclsResult:
        result: DescribeAclsResult = await self.controller.read(
            "describe_acls", lambda epoch: self._state.access.describe_acls(acl_filter, epoch),
            origin.consistency)
        return result

    async def delete_acls(self, filters: Sequence[AclFilter], *,
                          origin: Origin) -> tuple[DeleteAclsResult, ...]:
        items = tuple(filters)
        return await self._write(
            "delete_acls", len(items),
            lambda _next, _now: self._state.access.delete_acls(items),
            origin, lambda err: tuple(DeleteAclsResult(f, err) for f in items), items)

    # ---------------------------------------------------------------- brokers

    async def register_broker(self, request: BrokerRegistrationRequest, *,
                              origin: Origin) -> BrokerRegistrationReply:
        return await self._write(
            "register_broker", 1,
            lambda next_offset, now_ms: self._state.cluster.register_broker(
                request, next_offset=next_offset, now_ms=now_ms),
            origin, BrokerRegistrationReply)

    async def broker_heartbeat(self, request: BrokerHeartbeatRequest, *,
                               origin: Origin) -> BrokerHeartbeatReply:
        return await self._write(
            "broker_heartbeat", 1,
            lambda _next, now_ms: self._state.cluster.process_heartbeat(request, now_ms=now_ms),
            origin, BrokerHeartbeatReply)


class CommittedAcls:
    """The authorizer's `AclSource`: the ACLs at the committed offset (an ACL change
    takes effect once committed, never while it could still be reverted)."""

    def __init__(self, controller: QuorumController) -> None:
        self._controller = controller

    def acl_version(self) -> int:
        return self._controller.state.access.version(self._controller.committed_read_epoch())

    def acl_bindings(self) -> Iterable[AclBinding]:
        return self._controller.state.access.bindings(self._controller.committed_read_epoch())
