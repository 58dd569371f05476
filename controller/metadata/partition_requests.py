"""Partition requests of the replication manager: leader elections and reassignments.

Generation only: these read the manager's latest state and return records and
per-item results; nothing changes until the records are replayed.
"""

from __future__ import annotations

from collections.abc import Sequence

from controller.metadata import topics as _topics
from controller.metadata.errors import OK, ApiError, ControllerResult, ErrorCode
from controller.metadata.partition_change import Election, change_record
from controller.metadata.topics import (
    ElectionType,
    ElectLeadersResult,
    ReassignmentRequest,
    ReassignmentResult,
    TopicPartition,
)
from controller.records import MetadataRecord
from controller.records.domain import NO_LEADER, PartitionDelta


def elect_leaders(
    manager: _topics.ReplicationView,
    partitions: Sequence[TopicPartition] | None,
    election_type: ElectionType = ElectionType.PREFERRED,
) -> ControllerResult[tuple[ElectLeadersResult, ...]]:
    """Per-partition results. ``None`` means every partition that needs it (its
    leader is not the preferred one, or, for UNCLEAN, it has no leader)."""
    if partitions is None:
        wanted = sorted(
            (
                TopicPartition(manager.topic_name(tid), pid)
                for (tid, pid), part in manager.partition_items()
                if (part.leader == NO_LEADER)
                or (election_type is ElectionType.PREFERRED and part.leader != part.replicas[0])
            ),
            key=lambda t: (t.topic, t.partition),
        )
    else:
        wanted = list(dict.fromkeys(partitions))  # dedupe, keep request order
    records: list[MetadataRecord] = []
    results: list[ElectLeadersResult] = []
    for tp in wanted:
        error, change = _elect_one(manager, tp, election_type)
        results.append(ElectLeadersResult(tp.topic, tp.partition, error))
        if change is not None:
            records.append(change)
    return ControllerResult(tuple(records), tuple(results))


def _elect_one(
    manager: _topics.ReplicationView, tp: TopicPartition, election_type: ElectionType
) -> tuple[ApiError, MetadataRecord | None]:
    found = manager.lookup_partition(tp.topic, tp.partition)
    if isinstance(found, ApiError):
        return found, None
    tid, part = found
    if election_type is ElectionType.PREFERRED:
        preferred = part.replicas[0]
        if part.leader == preferred:
            return ApiError(
                ErrorCode.ELECTION_NOT_NEEDED,
                f"{tp.topic}-{tp.partition} is already led by its preferred replica {preferred}",
            ), None
        if preferred not in part.isr or not manager.cluster.is_usable(preferred):
            why = (
                "not in the ISR"
                if preferred not in part.isr
                else "not usable (fenced, shutting down or unregistered)"
            )
            return ApiError(
                ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE,
                f"preferred replica {preferred} of {tp.topic}-{tp.partition} is {why}",
            ), None
        delta = manager.partition_delta(tid, part, election=Election.PREFERRED)
        assert delta is not None and delta.leader == preferred
        return OK, _record(tid, tp.partition, delta)
    if part.leader != NO_LEADER:
        return ApiError(
            ErrorCode.ELECTION_NOT_NEEDED,
            f"{tp.topic}-{tp.partition} has a leader ({part.leader})",
        ), None
    delta = manager.partition_delta(tid, part, unclean_allowed=True)
    if delta is None or delta.leader is None:
        return ApiError(
            ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE,
            f"no replica of {tp.topic}-{tp.partition} ({list(part.replicas)}) is usable",
        ), None
    return OK, _record(tid, tp.partition, delta)


def alter_partition_reassignments(
    manager: _topics.ReplicationView, items: Sequence[ReassignmentRequest]
) -> ControllerResult[tuple[ReassignmentResult, ...]]:
    """Start (``replicas`` set) or cancel (``replicas`` None) reassignments.

    KRaft semantics: adding = target - original, removing = original - target; while
    it runs the replicas are target followed by removing; it completes when every
    adding replica is in the ISR. A new target for a partition already moving starts
    over from its original replicas. Cancel restores the original replica set (in
    the order they hold in the merged list, as Kafka does).
    """
    counts: dict[tuple[str, int], int] = {}
    for item in items:
        counts[(item.topic, item.partition)] = counts.get((item.topic, item.partition), 0) + 1
    records: list[MetadataRecord] = []
    results: list[ReassignmentResult] = []
    for item in items:
        if counts[(item.topic, item.partition)] > 1:
            error: ApiError = ApiError(
                ErrorCode.DUPLICATE_RESOURCE,
                f"{item.topic}-{item.partition} appears more than once in the request",
            )
            change = None
        else:
            error, change = _reassign_one(manager, item)
        results.append(ReassignmentResult(item.topic, item.partition, error))
        if change is not None:
            records.append(change)
    return ControllerResult(tuple(records), tuple(results))


def _reassign_one(
    manager: _topics.ReplicationView, item: ReassignmentRequest
) -> tuple[ApiError, MetadataRecord | None]:
    found = manager.lookup_partition(item.topic, item.partition)
    if isinstance(found, ApiError):
        return found, None
    tid, part = found
    name = f"{item.topic}-{item.partition}"
    if item.if_partition_epoch is not None and item.if_partition_epoch != part.partition_epoch:
        return ApiError(ErrorCode.CONDITION_FAILED,
                        f"{name} is at partition epoch {part.partition_epoch}, not "
                        f"{item.if_partition_epoch}: it changed since it was read"), None
    moving = bool(part.adding_replicas or part.removing_replicas)
    original = tuple(r for r in part.replicas if r not in part.adding_replicas)
    if item.replicas is None:
        if not moving:
            return ApiError(
                ErrorCode.NO_REASSIGNMENT_IN_PROGRESS,
                f"{name} has no reassignment in progress to cancel",
            ), None
        isr = tuple(r for r in part.isr if r in original)
        if not isr:
            return ApiError(
                ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE,
                f"cancelling the reassignment of {name} would leave no in-sync replica "
                f"(ISR {list(part.isr)}, original replicas {list(original)})",
            ), None
        delta = manager.partition_delta(
            tid, part, isr=isr, replicas=original, adding=(), removing=()
        )
        return OK, _record(tid, item.partition, delta)
    target = item.replicas
    error = _topics.check_replica_list(manager.cluster, target, f"reassignment of {name}")
    if not error.ok:
        return error, None
    if target == original and not moving:
        return OK, None
    adding = tuple(r for r in target if r not in original)
    removing = tuple(r for r in original if r not in target)
    if not adding and not set(part.isr) & set(target):
        return ApiError(
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            f"none of the target replicas {list(target)} of {name} is in the ISR "
            f"{list(part.isr)}; the partition would have no in-sync replica",
        ), None
    merged = target + removing
    delta = manager.partition_delta(
        tid, part, replicas=merged, adding=adding, removing=removing
    )
    return OK, _record(tid, item.partition, delta)



def _record(topic_id: str, partition_id: int, delta: PartitionDelta | None) -> MetadataRecord | None:
    return None if delta is None else change_record(topic_id, partition_id, delta)
