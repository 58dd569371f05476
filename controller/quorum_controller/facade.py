"""`ControllerApi`: the `ControllerFacade` the gRPC services call, on a `QuorumController`.

Every Admin RPC that is an operation on the metadata goes through one write path and
one read path (`write`, `read`: the RPC's row in controller/api/rpcs.py says what
runs): the request's size is bounded (too many items: the row's `fail_all` answer,
nothing queued), then one event is queued; a write answers once committed (a
request too large for one batch gets REQUEST_TOO_LARGE on every item and changes
nothing), a read at the committed offset. What is about the quorum or this node has
a method of its own.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from controller.api.seam import (
    Args,
    NodeDescription,
    Operation,
    Origin,
    QuorumDescription,
    ReadConsistency,
    ReplicaState,
    ResultCodec,
    TransferOutcome,
    VoterChangeKind,
    VoterChangeOutcome,
)
from controller.log import get_logger
from controller.logformat.batch import BatchOrigin
from controller.metadata import (
    ApiError,
    BrokerHeartbeatReply,
    BrokerHeartbeatRequest,
    BrokerRegistrationReply,
    BrokerRegistrationRequest,
    ErrorCode,
)
from controller.metadata.alter_partition import (
    AlterPartitionRequest,
    AlterPartitionResult,
    check_item_count,
)
from controller.quorum.proposals import ProposalLostError
from controller.quorum_controller import member_status
from controller.quorum_controller.controller import QuorumController
from controller.quorum_controller.events import RequestTooLargeError
from controller.quorum_controller.member_status import MAX_TRANSFER_WAIT_MS
from controller.quorum_controller.ports import QuorumPort
from controller.raft.voters import Voter, VoterChangeError
from controller.security.acl import AclBinding

# Origin fields are stored in every batch header; keep them small.
MAX_ORIGIN_FIELD_CHARS = 256


def batch_origin(origin: Origin) -> BatchOrigin:
    def clip(text: str) -> str:
        return text[:MAX_ORIGIN_FIELD_CHARS]

    return BatchOrigin(clip(origin.principal), clip(origin.client_address),
                       clip(origin.request_id))


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

# The broker lifecycle's two writes (BrokerLifecycle service; `extra` is the request).
REGISTER_BROKER = Operation(
    "RegisterBroker", run=lambda ctx, args, next_offset, now_ms:
    ctx.state.cluster.register_broker(args.extra, next_offset=next_offset, now_ms=now_ms))
BROKER_HEARTBEAT = Operation(
    "BrokerHeartbeat", run=lambda ctx, args, _next, now_ms:
    ctx.state.cluster.process_heartbeat(args.extra, now_ms=now_ms))
ALTER_PARTITION = Operation(
    "AlterPartition", run=lambda ctx, args, _next, _now:
    ctx.state.replication.alter_partition(args.extra))


log = get_logger(__name__)


def _too_large(message: str) -> ApiError:
    return ApiError(ErrorCode.REQUEST_TOO_LARGE, message)


class ControllerApi:
    def __init__(self, controller: QuorumController, quorum: QuorumPort, *,
                 data_dir: Path | None = None) -> None:
        self.controller = controller
        self._quorum = quorum
        # This controller's data directory (its size is part of DescribeNode).
        self._data_dir = data_dir

    @property
    def cluster_id(self) -> str:
        return self.controller.settings.cluster_id

    def check_serves(self, *, write: bool, consistency: ReadConsistency) -> None:
        machine = self.controller.machine
        if machine.refuses(write=write, consistency=consistency):
            raise machine.not_controller()

    # ---------------------------------------------------------------- the two paths

    def _count_error(self, args: Args) -> ApiError | None:
        limit = self.controller.settings.max_items_per_request
        if args.count > limit:
            return _too_large(f"{args.count} items in one request (limit {limit}); split it")
        return None

    async def write(self, op: Operation, args: Args, *, origin: Origin,
                    fail_all: Callable[[Args, ApiError], Any],
                    codec: ResultCodec | None = None) -> Any:
        error = self._count_error(args)
        if error is not None:
            return fail_all(args, error)
        try:
            return await self.controller.write(op, args, batch_origin(origin), codec)
        except RequestTooLargeError as exc:
            return fail_all(args, _too_large(str(exc)))

    async def read(self, op: Operation, args: Args, *, origin: Origin,
                   fail_all: Callable[[Args, ApiError], Any]) -> Any:
        error = self._count_error(args)
        if error is not None:
            return fail_all(args, error)
        return await self.controller.read(op, args, origin.consistency, origin.min_offset)

    # ---------------------------------------------------------------- quorum and node

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
            Operation("DescribeQuorum", query=lambda _ctx, _args, epoch: describe(epoch)),
            Args(), origin.consistency)
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

        result: NodeDescription = await self.controller.read(
            Operation("DescribeNode", query=lambda _ctx, _args, epoch: describe(epoch)),
            Args(), ReadConsistency.STALE)
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

    # ---------------------------------------------------------------- brokers

    async def register_broker(self, request: BrokerRegistrationRequest, *,
                              origin: Origin) -> BrokerRegistrationReply:
        reply: BrokerRegistrationReply = await self.write(
            REGISTER_BROKER, Args((request.broker_id,), extra=request), origin=origin,
            fail_all=lambda _args, error: BrokerRegistrationReply(error))
        return reply

    async def broker_heartbeat(self, request: BrokerHeartbeatRequest, *,
                               origin: Origin) -> BrokerHeartbeatReply:
        reply: BrokerHeartbeatReply = await self.write(
            BROKER_HEARTBEAT, Args((request.broker_id,), extra=request), origin=origin,
            fail_all=lambda _args, error: BrokerHeartbeatReply(error))
        return reply

    async def alter_partition(self, request: AlterPartitionRequest, *,
                              origin: Origin) -> tuple[AlterPartitionResult, ...]:
        def fail_all(_args: Args, error: ApiError) -> tuple[AlterPartitionResult, ...]:
            return tuple(AlterPartitionResult(i.topic_id, i.partition, error)
                         for i in request.items)

        too_many = check_item_count(request.items)
        if too_many is not None:
            return fail_all(Args(()), too_many)
        results: tuple[AlterPartitionResult, ...] = await self.write(
            ALTER_PARTITION, Args(tuple(request.items), extra=request), origin=origin,
            fail_all=fail_all)
        return results


class CommittedAcls:
    """The authorizer's `AclSource`: the ACLs at the committed offset (an ACL change
    takes effect once committed, never while it could still be reverted)."""

    def __init__(self, controller: QuorumController) -> None:
        self._controller = controller

    def acl_version(self) -> int:
        return self._controller.state.access.version(self._controller.committed_read_epoch())

    def acl_bindings(self) -> Iterable[AclBinding]:
        return self._controller.state.access.bindings(self._controller.committed_read_epoch())
