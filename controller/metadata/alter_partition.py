"""AlterPartition: a partition leader reports the ISR it observes (KIP-497, KIP-903).

Generation only (the records change nothing until replayed). The leader sends,
per partition, the leader epoch and partition epoch it acts under and the ISR it
wants, with the broker epoch of each member (the epoch the follower fetched
with: a replica that restarted meanwhile is another incarnation and may not be
added on its predecessor's progress). Refusals, each for one item:

- UNKNOWN_TOPIC_OR_PARTITION: no such partition;
- NOT_LEADER_OR_FOLLOWER: the sender does not lead it;
- FENCED_LEADER_EPOCH: another leader epoch (the sender is a zombie leader);
- INVALID_UPDATE_VERSION: the partition changed since the leader's view (its
  partition epoch): it will see the change and decide again;
- INELIGIBLE_REPLICA: a new member is not a replica, is fenced or shutting down,
  or its broker epoch is not its registration's;
- INVALID_REQUEST: an ISR without its leader, or with duplicates.

An accepted item writes one PartitionChangeRecord (nothing if the ISR is already
that) and answers the registration as it will be once committed; the leader
applies the ISR only from the committed metadata. Fencing still removes brokers
from ISRs (the cluster manager), and a reassignment completes once its adding
replicas are reported in sync.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from controller.metadata import topics as _topics
from controller.metadata.cluster import ClusterControlManager
from controller.metadata.errors import OK, ApiError, ControllerResult, ErrorCode
from controller.metadata.partition_change import change_record
from controller.records import MetadataRecord
from controller.records.domain import PartitionRegistration

# The most partitions one request may carry (a leader batches its changes).
MAX_ALTER_PARTITION_ITEMS = 10_000


@attrs.frozen
class IsrMember:
    broker_id: int
    # -1: not given (the controller then checks only that the broker is usable).
    broker_epoch: int = -1


@attrs.frozen
class AlterPartitionItem:
    topic_id: str
    partition: int
    leader_epoch: int
    partition_epoch: int
    new_isr: tuple[IsrMember, ...]


@attrs.frozen
class AlterPartitionRequest:
    broker_id: int
    broker_epoch: int
    items: tuple[AlterPartitionItem, ...]


@attrs.frozen
class AlterPartitionResult:
    topic_id: str
    partition: int
    error: ApiError
    # The registration once the change commits (or as it is, on a refusal that the
    # leader can act on: FENCED_LEADER_EPOCH, INVALID_UPDATE_VERSION). None: unknown.
    registration: PartitionRegistration | None = None


def alter_partition(manager: _topics.ReplicationView, request: AlterPartitionRequest
                    ) -> ControllerResult[tuple[AlterPartitionResult, ...]]:
    cluster = manager.cluster
    sender = cluster.broker(request.broker_id)
    if sender is None or sender.broker_epoch != request.broker_epoch:
        error = ApiError(ErrorCode.STALE_BROKER_EPOCH,
                         f"broker {request.broker_id} epoch {request.broker_epoch} is not its "
                         "current registration; re-register")
        return ControllerResult((), tuple(AlterPartitionResult(i.topic_id, i.partition, error)
                                          for i in request.items))
    records: list[MetadataRecord] = []
    results: list[AlterPartitionResult] = []
    for item in request.items:
        result, record = _one(manager, cluster, request.broker_id, item)
        results.append(result)
        if record is not None:
            records.append(record)
    return ControllerResult(tuple(records), tuple(results))


def _one(manager: _topics.ReplicationView, cluster: ClusterControlManager, sender: int,
         item: AlterPartitionItem) -> tuple[AlterPartitionResult, MetadataRecord | None]:
    def refuse(code: ErrorCode, message: str,
               registration: PartitionRegistration | None = None
               ) -> tuple[AlterPartitionResult, None]:
        return AlterPartitionResult(item.topic_id, item.partition, ApiError(code, message),
                                    registration), None

    part = manager.partition(item.topic_id, item.partition)
    name = f"{item.topic_id}-{item.partition}"
    if part is None:
        return refuse(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no partition {name}")
    if part.leader != sender:
        return refuse(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                      f"broker {sender} does not lead {name} (leader {part.leader})", part)
    if item.leader_epoch != part.leader_epoch:
        return refuse(ErrorCode.FENCED_LEADER_EPOCH,
                      f"{name}: leader epoch {item.leader_epoch}, current {part.leader_epoch}",
                      part)
    if item.partition_epoch != part.partition_epoch:
        return refuse(ErrorCode.INVALID_UPDATE_VERSION,
                      f"{name}: partition epoch {item.partition_epoch}, current "
                      f"{part.partition_epoch}", part)
    isr = tuple(m.broker_id for m in item.new_isr)
    if sender not in isr or len(set(isr)) != len(isr):
        return refuse(ErrorCode.INVALID_REQUEST,
                      f"{name}: an ISR holds its leader once, got {list(isr)}")
    for member in item.new_isr:
        if member.broker_id in part.isr:
            continue
        broker = cluster.broker(member.broker_id)
        why = None
        if member.broker_id not in part.replicas:
            why = "is not a replica"
        elif broker is None or broker.fenced:
            why = "is fenced"
        elif broker.in_controlled_shutdown:
            why = "is shutting down"
        elif member.broker_epoch >= 0 and member.broker_epoch != broker.broker_epoch:
            why = (f"reported with broker epoch {member.broker_epoch}, but it registered "
                   f"again (epoch {broker.broker_epoch})")
        if why is not None:
            return refuse(ErrorCode.INELIGIBLE_REPLICA,
                          f"{name}: broker {member.broker_id} {why}", part)
    delta = manager.partition_delta(item.topic_id, part, isr=isr)
    if delta is None:
        return AlterPartitionResult(item.topic_id, item.partition, OK, part), None
    return (AlterPartitionResult(item.topic_id, item.partition, OK, part.apply(delta)),
            change_record(item.topic_id, item.partition, delta))


def check_item_count(items: Sequence[AlterPartitionItem]) -> ApiError | None:
    if len(items) > MAX_ALTER_PARTITION_ITEMS:
        return ApiError(ErrorCode.INVALID_REQUEST,
                        f"{len(items)} partitions in one AlterPartition "
                        f"(max {MAX_ALTER_PARTITION_ITEMS})")
    return None
