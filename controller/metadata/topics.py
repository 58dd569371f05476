"""Topic requests of the replication manager: create topics, delete topics, create
partitions; the request and response values of the replication API; topic-name rules.

Every batch request answers per item: one bad item never fails the others, and a bad
item contributes no record.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, ItemsView, Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

import attrs

from controller.logformat.batch import MAX_APPEND_BYTES, MAX_RECORDS_PER_BATCH
from controller.metadata.errors import (
    OK,
    ApiError,
    ControllerResult,
    ErrorCode,
    condition_failed,
)
from controller.metadata.levels import Feature, needs_level
from controller.metadata.placement import new_uuid, place_replicas
from controller.records import (
    MetadataRecord,
    RemoveTopicRecord,
    TopicRecord,
    encode_record,
    make_record,
)
from controller.records.domain import NO_LEADER, PartitionRegistration, Topic
from controller.records.partition_wire import encode_new_partitions

if TYPE_CHECKING:
    from controller.metadata.cluster import ClusterControlManager
    from controller.metadata.configs import ConfigurationControlManager
    from controller.metadata.partition_change import Election
    from controller.metadata.placement import RandomSource
    from controller.records.domain import PartitionDelta


class ReplicationView(Protocol):
    """What the request generators here and in `partition_requests` read of the
    replication manager (which implements it): a seam, so that the manager imports
    them and they do not import it back."""

    @property
    def cluster(self) -> ClusterControlManager: ...
    @property
    def configs(self) -> ConfigurationControlManager: ...
    @property
    def rng(self) -> RandomSource: ...
    def topic_exists(self, name: str, epoch: int | None = None) -> bool: ...
    def colliding_topic(self, name: str) -> str | None: ...
    def topic(self, topic_id: str, epoch: int | None = None) -> Topic | None: ...
    def topic_mod_offset(self, topic_id: str, epoch: int | None = None) -> int | None: ...
    def topic_id(self, name: str, epoch: int | None = None) -> str | None: ...
    def topic_name(self, topic_id: str) -> str: ...
    def partition_count(self, topic_id: str, epoch: int | None = None) -> int: ...
    def partition(self, topic_id: str, partition_id: int,
                  epoch: int | None = None) -> PartitionRegistration | None: ...
    def partition_items(self) -> ItemsView[tuple[str, int], PartitionRegistration]: ...
    def lookup_partition(self, topic: str,
                         partition: int) -> tuple[str, PartitionRegistration] | ApiError: ...
    def partition_delta(
        self, topic_id: str, part: PartitionRegistration, *,
        usable: Callable[[int], bool] | None = None, unclean_allowed: bool | None = None,
        isr: tuple[int, ...] | None = None, replicas: tuple[int, ...] | None = None,
        adding: tuple[int, ...] | None = None, removing: tuple[int, ...] | None = None,
        election: Election = ...,
    ) -> PartitionDelta | None: ...

MAX_TOPIC_NAME_LENGTH = 249
# A topic's creation (and an addition of partitions) is one atomic batch, at most
# MAX_RECORDS_PER_BATCH records and MAX_APPEND_BYTES bytes. These two limits keep every
# one that passes validation inside it, so none is refused later (worst case: a
# partition record is ~42 bytes + 10 per replica with the largest broker ids, plus
# framing; 9,000 partitions x 50 + 45,000 replicas x 10 < 1 MiB - the topic and its
# configs). They are the only partition limits; docs/operations.md states them.
MAX_PARTITIONS_PER_TOPIC = 9_000
MAX_REPLICAS_PER_TOPIC = 45_000  # partitions x replication factor
assert MAX_PARTITIONS_PER_TOPIC < MAX_RECORDS_PER_BATCH - 1 - 100  # topic + configs
assert MAX_PARTITIONS_PER_TOPIC * 50 + MAX_REPLICAS_PER_TOPIC * 10 < MAX_APPEND_BYTES - 65_536
_LEGAL_NAME = re.compile(r"[a-zA-Z0-9._-]+")


# -- values ----------------------------------------------------------------------------


@attrs.frozen
class CreatableTopic:
    name: str
    # -1: the cluster default (num.partitions / default.replication.factor).
    num_partitions: int = -1
    replication_factor: int = -1
    # Explicit replica lists, one per partition (then both counts must be -1).
    assignments: tuple[tuple[int, ...], ...] = ()
    configs: tuple[tuple[str, str], ...] = ()


@attrs.frozen
class CreateTopicResult:
    name: str
    error: ApiError
    topic_id: str = ""
    num_partitions: int = -1
    replication_factor: int = -1


@attrs.frozen
class DeleteTopicResult:
    name: str
    error: ApiError
    topic_id: str = ""


@attrs.frozen
class CreatePartitionsTopic:
    name: str
    # The new total partition count.
    count: int
    # Replica lists for the new partitions only (count - current of them), or empty.
    assignments: tuple[tuple[int, ...], ...] = ()
    # Only if the topic's mod offset is this (None: no condition).
    if_mod_offset: int | None = None


@attrs.frozen
class CreatePartitionsResult:
    name: str
    error: ApiError


@attrs.frozen
class TopicPartition:
    topic: str
    partition: int


class ElectionType(enum.StrEnum):
    PREFERRED = "PREFERRED"
    UNCLEAN = "UNCLEAN"


@attrs.frozen
class ElectLeadersResult:
    topic: str
    partition: int
    error: ApiError


@attrs.frozen
class ReassignmentRequest:
    topic: str
    partition: int
    # The target replicas; None cancels the partition's reassignment.
    replicas: tuple[int, ...] | None
    # Only if the partition's partition epoch is this (None: no condition).
    if_partition_epoch: int | None = None


@attrs.frozen
class ReassignmentResult:
    topic: str
    partition: int
    error: ApiError


@attrs.frozen
class OngoingReassignment:
    topic: str
    partition: int
    replicas: tuple[int, ...]
    adding: tuple[int, ...]
    removing: tuple[int, ...]


@attrs.frozen
class TopicListing:
    name: str
    topic_id: str


@attrs.frozen
class PartitionDescription:
    partition_id: int
    registration: PartitionRegistration


@attrs.frozen
class TopicDescription:
    name: str
    error: ApiError
    topic_id: str = ""
    partitions: tuple[PartitionDescription, ...] = ()
    # The log offset of the topic's last change (created, partitions added).
    mod_offset: int = -1


# -- validation ------------------------------------------------------------------------


def topic_name_error(name: str) -> ApiError:
    """Kafka's topic-name rules: [a-zA-Z0-9._-], 1..249 characters, not '.' or '..'."""
    if not name:
        return ApiError(ErrorCode.INVALID_TOPIC_EXCEPTION, "topic name must not be empty")
    if name in (".", ".."):
        return ApiError(ErrorCode.INVALID_TOPIC_EXCEPTION, f"topic name cannot be {name!r}")
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        return ApiError(
            ErrorCode.INVALID_TOPIC_EXCEPTION,
            f"topic name is {len(name)} characters long; the limit is {MAX_TOPIC_NAME_LENGTH}",
        )
    if not _LEGAL_NAME.fullmatch(name):
        bad = sorted({c for c in name if not _LEGAL_NAME.fullmatch(c)})
        return ApiError(
            ErrorCode.INVALID_TOPIC_EXCEPTION,
            f"topic name {name!r} contains {bad}; only ASCII letters, digits, '.', '_' and "
            "'-' are allowed",
        )
    return OK


def collision_key(name: str) -> str:
    """Topic names equal under this collide ('.' and '_' are the same in metric names)."""
    return name.replace(".", "_")


def check_replica_list(
    cluster: ClusterControlManager, replicas: Sequence[int], what: str
) -> ApiError:
    """A replica list must be non-empty, without duplicates, of registered brokers."""
    if not replicas:
        return ApiError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"{what}: the replica list is empty")
    duplicates = sorted({r for r in replicas if list(replicas).count(r) > 1})
    if duplicates:
        return ApiError(
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            f"{what}: replicas {list(replicas)} name broker(s) {duplicates} more than once",
        )
    unknown = [r for r in replicas if not cluster.is_registered(r)]
    if unknown:
        return ApiError(
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            f"{what}: broker(s) {unknown} are not registered",
        )
    return OK


def _check_assignments(
    cluster: ClusterControlManager, assignments: Sequence[tuple[int, ...]], first: int
) -> ApiError:
    width = len(assignments[0])
    for offset, replicas in enumerate(assignments):
        what = f"partition {first + offset}"
        if len(replicas) != width:
            return ApiError(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"{what} has {len(replicas)} replicas but partition {first} has {width}; all "
                "partitions need the same replication factor",
            )
        error = check_replica_list(cluster, replicas, what)
        if not error.ok:
            return error
        if not any(cluster.is_usable(r) for r in replicas):
            return ApiError(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"{what}: none of brokers {list(replicas)} is usable (all are fenced or "
                "shutting down), so it could have no leader",
            )
    return OK


def _check_replicas(partitions: int, factor: int) -> ApiError:
    """The second partition limit (see MAX_REPLICAS_PER_TOPIC)."""
    if partitions * factor > MAX_REPLICAS_PER_TOPIC:
        return ApiError(
            ErrorCode.INVALID_PARTITIONS,
            f"{partitions} partitions x replication factor {factor} = {partitions * factor} "
            f"replicas in one topic (or one addition); the limit is {MAX_REPLICAS_PER_TOPIC}",
        )
    return OK


def _check_replication_factor(cluster: ClusterControlManager, factor: int) -> ApiError:
    usable = cluster.usable_broker_ids()
    if factor <= 0:
        return ApiError(
            ErrorCode.INVALID_REPLICATION_FACTOR, f"replication factor must be > 0, got {factor}"
        )
    if factor > len(usable):
        return ApiError(
            ErrorCode.INVALID_REPLICATION_FACTOR,
            f"replication factor {factor} is larger than the {len(usable)} usable brokers "
            f"{list(usable)}",
        )
    return OK


def _partition_bytes(
    topic_id: str,
    first_id: int,
    assignments: Sequence[tuple[int, ...]],
    cluster: ClusterControlManager,
) -> list[bytes]:
    """New PartitionRecords numbered from ``first_id``, as bytes: the ISR is the
    usable replicas, the first of them leads. This runs for every partition of every
    topic created: the bytes are written directly (``encode_new_partitions``), which
    costs less than building each message."""
    usable = frozenset(cluster.usable_broker_ids())
    placements: list[tuple[tuple[int, ...], tuple[int, ...]]] = []
    for replicas in assignments:
        isr = replicas if usable.issuperset(replicas) else tuple(
            r for r in replicas if r in usable)
        assert isr, "assignments were checked to have a usable replica"
        placements.append((replicas, isr))
    return encode_new_partitions(topic_id, first_id, placements)


def _counts(names: Sequence[str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for name in names:
        counts[name] = counts.get(name, 0) + 1
    return counts


def _duplicate(name: str, what: str) -> ApiError:
    return ApiError(
        ErrorCode.DUPLICATE_RESOURCE,
        f"{what} {name!r} appears more than once in the request; send it once",
    )


# -- requests ----------------------------------------------------------------------------


def create_topics(
    manager: ReplicationView, topics: Sequence[CreatableTopic], *, validate_only: bool
) -> ControllerResult[tuple[CreateTopicResult, ...]]:
    counts = _counts([t.name for t in topics])
    used_ids: set[str] = set()
    # Collision key -> name, for topics created earlier in this request.
    created: dict[str, str] = {}
    encoded: list[bytes] = []
    results: list[CreateTopicResult] = []
    for topic in topics:
        if counts[topic.name] > 1:
            results.append(CreateTopicResult(topic.name, _duplicate(topic.name, "topic")))
            continue
        other = created.get(collision_key(topic.name))
        if other is not None:
            error = ApiError(
                ErrorCode.INVALID_TOPIC_EXCEPTION,
                f"topic {topic.name!r} collides with {other!r}, created earlier in this request "
                "('.' and '_' are interchangeable in topic metric names)",
            )
            results.append(CreateTopicResult(topic.name, error))
            continue
        result, topic_bytes = _create_one(manager, topic, used_ids)
        results.append(result)
        if result.error.ok:
            created[collision_key(topic.name)] = topic.name
        encoded += topic_bytes
    if validate_only:
        return ControllerResult((), tuple(results))
    # Bytes only: a million partitions are written without building their messages.
    return ControllerResult(response=tuple(results), encoded=tuple(encoded))


def _create_one(
    manager: ReplicationView, topic: CreatableTopic, used_ids: set[str]
) -> tuple[CreateTopicResult, list[bytes]]:
    """The result of creating ``topic`` and its records' bytes."""
    cluster = manager.cluster

    def failed(error: ApiError) -> tuple[CreateTopicResult, list[bytes]]:
        return CreateTopicResult(topic.name, error), []

    error = topic_name_error(topic.name)
    if not error.ok:
        return failed(error)
    if manager.topic_exists(topic.name):
        return failed(
            ApiError(ErrorCode.TOPIC_ALREADY_EXISTS, f"topic {topic.name!r} already exists")
        )
    other = manager.colliding_topic(topic.name)
    if other is not None:
        return failed(
            ApiError(
                ErrorCode.INVALID_TOPIC_EXCEPTION,
                f"topic {topic.name!r} collides with existing topic {other!r} ('.' and '_' "
                "are interchangeable in topic metric names); choose another name",
            )
        )
    if topic.assignments:
        if topic.num_partitions != -1 or topic.replication_factor != -1:
            return failed(
                ApiError(
                    ErrorCode.INVALID_REQUEST,
                    "give either replica assignments or partition count and replication "
                    "factor, not both (leave the counts at -1)",
                )
            )
        error = _check_assignments(cluster, topic.assignments, 0)
        if error.ok:
            error = _check_replicas(len(topic.assignments), len(topic.assignments[0]))
        if not error.ok:
            return failed(error)
        assignments = list(topic.assignments)
    else:
        partitions = topic.num_partitions
        if partitions == -1:
            partitions = manager.configs.cluster_int("num.partitions")
        factor = topic.replication_factor
        if factor == -1:
            factor = manager.configs.cluster_int("default.replication.factor")
        if partitions <= 0 or partitions > MAX_PARTITIONS_PER_TOPIC:
            return failed(
                ApiError(
                    ErrorCode.INVALID_PARTITIONS,
                    f"number of partitions must be in [1, {MAX_PARTITIONS_PER_TOPIC}], got "
                    f"{partitions}",
                )
            )
        error = _check_replication_factor(cluster, factor)
        if error.ok:
            error = _check_replicas(partitions, factor)
        if not error.ok:
            return failed(error)
        assignments = []  # placed below, after the configs are known to be valid
    error, config_records = manager.configs.new_topic_config_records(topic.name, topic.configs)
    if not error.ok:
        return failed(error)
    if not assignments:
        racks = cluster.racks(cluster.usable_broker_ids())
        assignments = place_replicas(
            racks, partitions=partitions, replication_factor=factor, rng=manager.rng
        )
    topic_id = new_uuid(manager.rng)
    while manager.topic(topic_id) is not None or topic_id in used_ids:
        topic_id = new_uuid(manager.rng)
    used_ids.add(topic_id)
    records = [make_record(TopicRecord(name=topic.name, topic_id=topic_id)), *config_records]
    encoded = [encode_record(r) for r in records]
    encoded += _partition_bytes(topic_id, 0, assignments, cluster)
    result = CreateTopicResult(topic.name, OK, topic_id, len(assignments), len(assignments[0]))
    return result, encoded


def topic_condition(manager: ReplicationView, name: str, topic_id: str,
                    expected: int | None) -> ApiError:
    """OK unless `expected` (a mod offset) is given and not the topic's."""
    if expected is None:
        return OK
    mod_offset = manager.topic_mod_offset(topic_id)
    if mod_offset is None:
        return ApiError(ErrorCode.UNSUPPORTED_VERSION, needs_level(
            Feature.MOD_OFFSETS, manager.cluster.metadata_version()))
    if mod_offset != expected:
        return condition_failed(f"topic {name!r}", mod_offset, expected)
    return OK


def delete_topics(
    manager: ReplicationView, names: Sequence[str],
    if_mod_offsets: Mapping[str, int] | None = None,
) -> ControllerResult[tuple[DeleteTopicResult, ...]]:
    """`if_mod_offsets`: a topic named there is deleted only if its mod offset is
    that (CONDITION_FAILED otherwise)."""
    counts = _counts(names)
    conditions = if_mod_offsets or {}
    records: list[MetadataRecord] = []
    results: list[DeleteTopicResult] = []
    for name in names:
        topic_id = manager.topic_id(name)
        if counts[name] > 1:
            results.append(DeleteTopicResult(name, _duplicate(name, "topic")))
        elif topic_id is None:
            error = ApiError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist")
            results.append(DeleteTopicResult(name, error))
        elif not (error := topic_condition(manager, name, topic_id,
                                           conditions.get(name))).ok:
            results.append(DeleteTopicResult(name, error))
        else:
            records.append(make_record(RemoveTopicRecord(topic_id=topic_id)))
            results.append(DeleteTopicResult(name, OK, topic_id))
    return ControllerResult(tuple(records), tuple(results))


def create_partitions(
    manager: ReplicationView,
    items: Sequence[CreatePartitionsTopic],
    *,
    validate_only: bool,
) -> ControllerResult[tuple[CreatePartitionsResult, ...]]:
    counts = _counts([item.name for item in items])
    records: list[MetadataRecord] = []
    results: list[CreatePartitionsResult] = []
    for item in items:
        item_records: list[MetadataRecord] = []
        if counts[item.name] > 1:
            error = _duplicate(item.name, "topic")
        else:
            error, item_records = _create_partitions_one(manager, item)
        results.append(CreatePartitionsResult(item.name, error))
        records += item_records
    return ControllerResult(() if validate_only else tuple(records), tuple(results))


def _create_partitions_one(
    manager: ReplicationView, item: CreatePartitionsTopic
) -> tuple[ApiError, list[MetadataRecord]]:
    cluster = manager.cluster
    topic_id = manager.topic_id(item.name)
    if topic_id is None:
        return ApiError(
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {item.name!r} does not exist"
        ), []
    condition = topic_condition(manager, item.name, topic_id, item.if_mod_offset)
    if not condition.ok:
        return condition, []
    current = manager.partition_count(topic_id)
    if item.count <= current:
        return ApiError(
            ErrorCode.INVALID_PARTITIONS,
            f"topic {item.name!r} has {current} partitions; the new count {item.count} must be "
            "larger (partitions can only be added)",
        ), []
    if item.count > MAX_PARTITIONS_PER_TOPIC:
        return ApiError(
            ErrorCode.INVALID_PARTITIONS,
            f"a topic may have at most {MAX_PARTITIONS_PER_TOPIC} partitions, asked for {item.count}",
        ), []
    added = item.count - current
    if item.assignments:
        if len(item.assignments) != added:
            return ApiError(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"{len(item.assignments)} replica lists given for {added} new partitions",
            ), []
        error = _check_assignments(cluster, item.assignments, current)
        if error.ok:
            error = _check_replicas(added, len(item.assignments[0]))
        if not error.ok:
            return error, []
        assignments = list(item.assignments)
    else:
        first = manager.partition(topic_id, 0)
        assert first is not None, "a topic has at least one partition"
        factor = len(first.replicas) - len(first.removing_replicas)
        error = _check_replication_factor(cluster, factor)
        if error.ok:
            error = _check_replicas(added, factor)
        if not error.ok:
            return error, []
        racks = cluster.racks(cluster.usable_broker_ids())
        assignments = place_replicas(
            racks,
            partitions=added,
            replication_factor=factor,
            rng=manager.rng,
            first_partition=current,
        )
    parse = MetadataRecord.FromString
    records = [parse(data) for data in _partition_bytes(topic_id, current, assignments, cluster)]
    assert len(records) == added and all(r.partition.leader != NO_LEADER for r in records)
    return OK, records
