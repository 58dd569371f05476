"""What a watcher sees of one committed record, and which records a watch wants.

`changes_of(batch)` decodes a batch once into `Change`s (what the record is about,
and its JSON as `metakraft log dump` prints it); the hub caches them, so a hundred
watchers of the live tail decode each batch once. `WatchSpec.select` then picks the
changes one watch wants, names their topics (`TopicNames`: a watch learns names as
it reads topic records, starting from the topics that exist when it starts) and
builds the wire events. Pure: no I/O, no clock.
"""

from __future__ import annotations

import enum
import functools
import json
from collections.abc import Callable, Iterable, Iterator, Mapping

import attrs

from controller.api import admin_pb2 as apb
from controller.logformat import RecordBatch
from controller.records import decode_record
from controller.records import metadata_pb2 as pb
from controller.records.jsonify import record_to_dict
from controller.records.registry import record_payload, record_type


class Kind(enum.Enum):
    """What a record is about (WatchResourceType on the wire)."""

    TOPIC = apb.WATCH_RESOURCE_TYPE_TOPIC
    PARTITION = apb.WATCH_RESOURCE_TYPE_PARTITION
    CONFIG = apb.WATCH_RESOURCE_TYPE_CONFIG
    BROKER = apb.WATCH_RESOURCE_TYPE_BROKER
    ACL = apb.WATCH_RESOURCE_TYPE_ACL
    QUORUM = apb.WATCH_RESOURCE_TYPE_QUORUM
    FEATURE = apb.WATCH_RESOURCE_TYPE_FEATURE
    INTERNAL = apb.WATCH_RESOURCE_TYPE_INTERNAL


# What an empty resource_types list asks for.
DEFAULT_KINDS = frozenset(Kind) - {Kind.INTERNAL}
# The kinds a topic filter can match (the others are about no topic).
TOPIC_KINDS = frozenset({Kind.TOPIC, Kind.PARTITION, Kind.CONFIG})

_KIND_OF_RECORD: Mapping[str, Kind] = {
    "topic": Kind.TOPIC, "remove_topic": Kind.TOPIC,
    "partition": Kind.PARTITION, "partition_change": Kind.PARTITION,
    "config": Kind.CONFIG,
    "register_broker": Kind.BROKER, "unregister_broker": Kind.BROKER,
    "broker_registration_change": Kind.BROKER,
    "access_control_entry": Kind.ACL, "remove_access_control_entry": Kind.ACL,
    "voters": Kind.QUORUM, "leader_change": Kind.QUORUM,
    "feature_level": Kind.FEATURE,
}
_CONFIG_TYPES = {pb.CONFIG_RESOURCE_TYPE_TOPIC: "TOPIC", pb.CONFIG_RESOURCE_TYPE_BROKER: "BROKER",
                 pb.CONFIG_RESOURCE_TYPE_CLUSTER: "CLUSTER"}


@attrs.frozen(slots=False)
class Change:
    """One committed record, decoded (shared by every watch that reads it). Its JSON
    is rendered when a watch first selects it (most of a record's cost)."""

    offset: int
    append_time_ms: int
    leader_epoch: int
    principal: str
    request_id: str
    kind: Kind
    record_type: str
    # The topic's id for topic and partition records ("" otherwise); the topic's
    # name when the record itself names it (topic records, topic configs).
    topic_id: str
    topic_name: str
    partition: int
    # What it is about when that is not a topic (broker id, config resource, ACL).
    resource_name: str
    record: pb.MetadataRecord = attrs.field(eq=False, repr=False)
    # A remove_topic record (the name tracker forgets the topic after it).
    removes_topic: bool = False

    @property
    def about_topic(self) -> bool:
        return bool(self.topic_id or self.topic_name)

    @functools.cached_property
    def record_json(self) -> str:
        """The record as `metakraft log dump` prints it."""
        return json.dumps(record_to_dict(self.record), separators=(",", ":"))

    def event(self, resource_name: str) -> apb.WatchEvent:
        """The wire event (`resource_name`: what the watch calls it, see `select`)."""
        return apb.WatchEvent(
            offset=self.offset, append_time_ms=self.append_time_ms,
            leader_epoch=self.leader_epoch, principal=self.principal,
            request_id=self.request_id, resource_type=self.kind.value,
            record_type=self.record_type, resource_name=resource_name,
            topic_id=self.topic_id, partition=self.partition, record_json=self.record_json)

    def wire(self, resource_name: str) -> bytes:
        """`event` serialized, once for every watch that names it so."""
        cache: dict[str, bytes] = self.__dict__.setdefault("_wire", {})
        found = cache.get(resource_name)
        if found is None:
            found = cache[resource_name] = self.event(resource_name).SerializeToString()
        return found


def changes_of(batch: RecordBatch) -> tuple[Change, ...]:
    """Every record of a committed batch as a Change (`RecordDecodeError` on a record
    this version cannot decode: the log holds only records it wrote or knows)."""
    out = []
    origin = batch.origin
    for index, raw in enumerate(batch.records):
        rec = decode_record(raw)
        name = record_type(rec)
        payload = record_payload(rec)
        kind = _KIND_OF_RECORD.get(name, Kind.INTERNAL)
        topic_id = topic_name = resource_name = ""
        partition = -1
        if isinstance(payload, pb.TopicRecord):
            topic_id, topic_name = payload.topic_id, payload.name
        elif isinstance(payload, pb.RemoveTopicRecord):
            topic_id = payload.topic_id
        elif isinstance(payload, (pb.PartitionRecord, pb.PartitionChangeRecord)):
            topic_id, partition = payload.topic_id, payload.partition_id
        elif isinstance(payload, pb.ConfigRecord):
            if payload.resource_type == pb.CONFIG_RESOURCE_TYPE_TOPIC:
                topic_name = payload.resource_name
            else:
                resource_name = (f"{_CONFIG_TYPES.get(payload.resource_type, '?')}:"
                                 f"{payload.resource_name}")
        elif isinstance(payload, (pb.RegisterBrokerRecord, pb.UnregisterBrokerRecord,
                                  pb.BrokerRegistrationChangeRecord)):
            resource_name = str(payload.broker_id)
        elif isinstance(payload, pb.AccessControlEntryRecord):
            resource_name = (f"{pb.AclResourceType.Name(payload.resource_type)[18:]}:"
                             f"{pb.AclPatternType.Name(payload.pattern_type)[17:]}:"
                             f"{payload.resource_name}")
        elif isinstance(payload, pb.RemoveAccessControlEntryRecord):
            resource_name = payload.id
        elif isinstance(payload, pb.FeatureLevelRecord):
            resource_name = payload.name
        out.append(Change(
            offset=batch.base_offset + index, append_time_ms=batch.append_time_ms,
            leader_epoch=batch.epoch, principal=origin.principal,
            request_id=origin.request_id, kind=kind, record_type=name, topic_id=topic_id,
            topic_name=topic_name, partition=partition, resource_name=resource_name,
            record=rec, removes_topic=isinstance(payload, pb.RemoveTopicRecord)))
    return tuple(out)


class TopicNames:
    """Topic id -> name as one watch has seen them: every topic record it reads (a
    removed topic keeps its name until the watch has passed its removal, so its last
    records are still named), else `lookup`, the controller's topics now (an id's
    name never changes). A topic created before the watch's start and deleted before
    the watch began has no name here."""

    def __init__(self, lookup: Callable[[str], str | None]) -> None:
        self._names: dict[str, str] = {}
        self._lookup = lookup

    def name(self, change: Change) -> str:
        if change.topic_name:
            return change.topic_name
        name = self._names.get(change.topic_id)
        if name is None:
            name = self._lookup(change.topic_id) or ""
        return name

    def learn(self, change: Change) -> None:
        if change.record_type == "topic":
            self._names[change.topic_id] = change.topic_name

    def forget(self, change: Change) -> None:
        if change.removes_topic:
            self._names.pop(change.topic_id, None)


@attrs.frozen
class WatchSpec:
    """What one watch asks for (validated from a WatchRequest)."""

    kinds: frozenset[Kind] = DEFAULT_KINDS
    topic: str = ""
    topic_prefix: str = ""

    @property
    def topic_filtered(self) -> bool:
        return bool(self.topic or self.topic_prefix)

    def wants_topic(self, name: str) -> bool:
        if self.topic:
            return name == self.topic
        return name.startswith(self.topic_prefix)

    def select(self, changes: Iterable[Change], from_offset: int, names: TopicNames,
               may_describe_topic: Callable[[str], bool], may_describe_cluster: bool
               ) -> Iterator[tuple[Change, str]]:
        """The changes at or above `from_offset` this watch wants and may see
        (`may_describe_*`: the caller's permissions, asked per change since ACLs
        change while a watch runs), with the resource name to show; `names` learns
        as it goes."""
        for change in changes:
            if change.offset < from_offset:
                continue
            names.learn(change)
            try:
                if change.kind not in self.kinds:
                    continue
                if change.about_topic:
                    topic = names.name(change)
                    if self.topic_filtered and not self.wants_topic(topic):
                        continue
                    if not may_describe_topic(topic):
                        continue
                    yield change, topic
                elif not self.topic_filtered and may_describe_cluster:
                    yield change, change.resource_name
            finally:
                names.forget(change)


def spec_from_request(request: apb.WatchRequest) -> WatchSpec:
    """ValueError naming what is wrong with the request."""
    kinds: set[Kind] = set()
    for value in request.resource_types:
        try:
            kinds.add(Kind(value))
        except ValueError:
            raise ValueError(f"unknown resource type {value} (1..{len(Kind)})") from None
    if request.topic and request.topic_prefix:
        raise ValueError("give a topic or a topic prefix, not both")
    spec = WatchSpec(frozenset(kinds) if kinds else DEFAULT_KINDS, request.topic,
                     request.topic_prefix)
    if spec.topic_filtered and not spec.kinds & TOPIC_KINDS:
        raise ValueError("a topic filter matches only topic, partition and config changes, "
                         "and none of those resource types is asked for")
    return spec
