"""`MetadataDelta`: the records of committed batches on top of an image → next image.

Replay follows `controller.metadata.MetadataState` record by record (a property test
checks both give the same topics, partitions, brokers, configs and features), but
writes into persistent maps: the work per record is O(log n), never O(topics).
A topic's partitions are copied once per delta, when the delta first touches it,
and mutated in place inside the delta until `apply()` freezes them.

`build_image(records, offset)` is the bulk path for a snapshot: plain dicts first,
then one linear build of each persistent map. `build_image_from_bytes` is the same
from encoded records, with a fast path for the bulk of a snapshot (partition
records): one reused protobuf message, fields read once, no per-record envelope.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType

import attrs

from broker_agent.image import (
    ConfigResourceKey,
    MetadataImage,
    PartitionKey,
    TopicImage,
)
from broker_agent.pmap import PersistentMap
from controller.metadata.acls import AclEntry
from controller.records import (
    MetadataRecord,
    decode_record,
    partition_wire,
)
from controller.records import metadata_pb2 as pb
from controller.records.convert import broker_from_record, partition_from_record
from controller.records.dispatch import RecordHandler, dispatch
from controller.records.domain import (
    BrokerRegistration,
    PartitionRegistration,
)
from controller.security.acl import AclBinding

# Records that carry no metadata for the image (Raft control records, no-ops, the
# remote tier's bookkeeping).
_IGNORED = frozenset({"no_op", "leader_change", "snapshot_header", "snapshot_footer",
                      "remote_log_segment", "remote_log_segment_state_change",
                      "request_result", "voters"})
_TOPIC_RESOURCE = int(pb.CONFIG_RESOURCE_TYPE_TOPIC)
# Versions of the images' ACLs: a new number whenever they change or are loaded, never
# reused in this process (the authorizer caches its index by it).
_ACL_VERSIONS = itertools.count(1)


class DeltaReplayError(ValueError):
    """A committed record that does not fit the image (the log and image disagree)."""


@attrs.frozen(slots=True)
class ImageChanges:
    """What one delta changed, for the reconciler."""

    # Partitions created or changed (of topics present in the new image).
    changed_partitions: frozenset[PartitionKey]
    # Topics of the previous image that are gone (deleted), by id.
    removed_topics: frozenset[str]
    brokers_changed: bool

    @property
    def empty(self) -> bool:
        return not (self.changed_partitions or self.removed_topics or self.brokers_changed)


class MetadataDelta(RecordHandler):
    def __init__(self, base: MetadataImage) -> None:
        self.base = base
        self._topics = base.topics
        self._topic_ids = base.topic_ids
        self._brokers = base.brokers
        self._configs = base.configs
        self._features = base.features
        self._acls = base.acls
        self._acl_version = base.acl_version
        # Working copies of the partition maps of the topics this delta touched.
        self._parts: dict[str, dict[int, PartitionRegistration]] = {}
        self._changed: set[PartitionKey] = set()
        self._removed: set[str] = set()
        self._brokers_changed = False
        self._offset = base.offset

    def replay_batch(self, records: Iterable[MetadataRecord], base_offset: int) -> None:
        offset = base_offset
        for record in records:
            self.replay(record, offset)
            offset += 1

    def replay(self, record: MetadataRecord, offset: int) -> None:
        assert offset > self._offset, f"replay at {offset} after {self._offset}"
        dispatch(record, self, offset)
        self._offset = offset

    def unhandled(self, kind: str, offset: int) -> None:
        if kind not in _IGNORED:
            raise DeltaReplayError(f"record at offset {offset} has unknown type {kind!r}")

    # -- topics and partitions ---------------------------------------------------------

    def _working(self, topic_id: str) -> dict[int, PartitionRegistration]:
        parts = self._parts.get(topic_id)
        if parts is None:
            topic = self._topics.get(topic_id)
            if topic is None:
                raise DeltaReplayError(f"partition of unknown topic id {topic_id}")
            parts = self._parts[topic_id] = dict(topic.partitions)
        return parts

    def on_topic(self, record: pb.TopicRecord, offset: int) -> None:
        if record.name in self._topic_ids or record.topic_id in self._topics:
            raise DeltaReplayError(f"topic {record.name!r} ({record.topic_id}) already exists")
        self._topics = self._topics.set(record.topic_id, TopicImage(record.name, record.topic_id))
        self._topic_ids = self._topic_ids.set(record.name, record.topic_id)
        self._parts[record.topic_id] = {}

    def on_partition(self, record: pb.PartitionRecord, offset: int) -> None:
        parts = self._working(record.topic_id)
        parts[record.partition_id] = partition_from_record(record)
        self._changed.add((record.topic_id, record.partition_id))

    def on_partition_change(self, record: pb.PartitionChangeRecord, offset: int) -> None:
        parts = self._working(record.topic_id)
        old = parts.get(record.partition_id)
        if old is None:
            raise DeltaReplayError(
                f"change to unknown partition {record.partition_id} of {record.topic_id}")
        parts[record.partition_id] = old.merge(record)
        self._changed.add((record.topic_id, record.partition_id))

    def on_remove_topic(self, record: pb.RemoveTopicRecord, offset: int) -> None:
        topic = self._topics.get(record.topic_id)
        if topic is None:
            raise DeltaReplayError(f"cannot remove unknown topic id {record.topic_id}")
        self._topics = self._topics.delete(record.topic_id)
        self._topic_ids = self._topic_ids.delete(topic.name)
        self._configs = self._configs.delete((_TOPIC_RESOURCE, topic.name))
        self._parts.pop(record.topic_id, None)
        self._changed = {key for key in self._changed if key[0] != record.topic_id}
        if record.topic_id in self.base.topics:
            self._removed.add(record.topic_id)

    # -- brokers, configs, features ----------------------------------------------------

    def _set_broker(self, reg: BrokerRegistration) -> None:
        self._brokers = self._brokers.set(reg.broker_id, reg)
        self._brokers_changed = True

    def on_register_broker(self, record: pb.RegisterBrokerRecord, offset: int) -> None:
        self._set_broker(broker_from_record(record))

    def on_unregister_broker(self, record: pb.UnregisterBrokerRecord, offset: int) -> None:
        broker = self._brokers.get(record.broker_id)
        if broker is None or broker.broker_epoch != record.broker_epoch:
            raise DeltaReplayError(f"cannot unregister broker {record.broker_id} at epoch "
                                   f"{record.broker_epoch}")
        self._brokers = self._brokers.delete(record.broker_id)
        self._brokers_changed = True

    def on_broker_registration_change(self, record: pb.BrokerRegistrationChangeRecord,
                                      offset: int) -> None:
        broker = self._brokers.get(record.broker_id)
        if broker is None:
            raise DeltaReplayError(f"change for unregistered broker {record.broker_id}")
        # A change aimed at an older incarnation is ignored (as the controller does).
        if broker.broker_epoch == record.broker_epoch:
            self._set_broker(broker.apply(record))

    def on_config(self, record: pb.ConfigRecord, offset: int) -> None:
        resource: ConfigResourceKey = (int(record.resource_type), record.resource_name)
        values = dict(self._configs.get(resource, {}))
        if record.HasField("value"):
            values[record.name] = record.value
        else:
            values.pop(record.name, None)
        if values:
            self._configs = self._configs.set(resource, MappingProxyType(values))
        else:
            self._configs = self._configs.delete(resource)

    def on_access_control_entry(self, record: pb.AccessControlEntryRecord, offset: int) -> None:
        binding = AclEntry.from_record(record).binding()
        if binding is not None:  # a value this release does not know grants nothing
            self._acls = self._acls.set(record.id, binding)
            self._acl_version = next(_ACL_VERSIONS)

    def on_remove_access_control_entry(self, record: pb.RemoveAccessControlEntryRecord,
                                       offset: int) -> None:
        if record.id in self._acls:
            self._acls = self._acls.delete(record.id)
            self._acl_version = next(_ACL_VERSIONS)

    def on_feature_level(self, record: pb.FeatureLevelRecord, offset: int) -> None:
        # Level 0 removes the feature (metadata.proto).
        if record.feature_level == 0:
            self._features = self._features.delete(record.name)
        else:
            self._features = self._features.set(record.name, record.feature_level)

    # -- result ------------------------------------------------------------------------

    def apply(self) -> tuple[MetadataImage, ImageChanges]:
        """The next image and what changed. The delta must not be used afterwards."""
        topics = self._topics
        for topic_id, parts in self._parts.items():
            topic = topics[topic_id]
            topics = topics.set(topic_id, attrs.evolve(topic,
                                                       partitions=MappingProxyType(parts)))
        self._parts = {}
        image = MetadataImage(self._offset, topics, self._topic_ids, self._brokers,
                              self._configs, self._features, self._acls, self._acl_version)
        changes = ImageChanges(frozenset(self._changed), frozenset(self._removed),
                               self._brokers_changed)
        return image, changes


class _ImageBuilder(RecordHandler):
    """Plain dicts of a whole state, then one linear build of each persistent map."""

    def __init__(self) -> None:
        self.topics: dict[str, TopicImage] = {}
        self.parts: dict[str, dict[int, PartitionRegistration]] = {}
        self.topic_ids: dict[str, str] = {}
        self.brokers: dict[int, BrokerRegistration] = {}
        self.configs: dict[ConfigResourceKey, dict[str, str]] = {}
        self.features: dict[str, int] = {}
        self.acls: dict[str, AclBinding] = {}

    def add(self, record: MetadataRecord) -> None:
        dispatch(record, self, -1)  # a snapshot's records have no offsets of their own

    def unhandled(self, kind: str, offset: int) -> None:
        if kind not in _IGNORED:
            # A snapshot holds only whole-state records; anything else is a bug.
            raise DeltaReplayError(f"unexpected {kind!r} record in a snapshot")

    def on_partition(self, record: pb.PartitionRecord, offset: int) -> None:
        self.partition(record.topic_id, record.partition_id, partition_from_record(record))

    def on_topic(self, record: pb.TopicRecord, offset: int) -> None:
        self.topics[record.topic_id] = TopicImage(record.name, record.topic_id)
        self.topic_ids[record.name] = record.topic_id
        self.parts[record.topic_id] = {}

    def on_register_broker(self, record: pb.RegisterBrokerRecord, offset: int) -> None:
        reg = broker_from_record(record)
        self.brokers[reg.broker_id] = reg

    def on_config(self, record: pb.ConfigRecord, offset: int) -> None:
        if record.HasField("value"):
            self.configs.setdefault((int(record.resource_type), record.resource_name),
                                    {})[record.name] = record.value

    def on_feature_level(self, record: pb.FeatureLevelRecord, offset: int) -> None:
        if record.feature_level:
            self.features[record.name] = record.feature_level

    def on_access_control_entry(self, record: pb.AccessControlEntryRecord, offset: int) -> None:
        binding = AclEntry.from_record(record).binding()
        if binding is not None:
            self.acls[record.id] = binding

    def partition(self, topic_id: str, index: int, registration: PartitionRegistration) -> None:
        parts = self.parts.get(topic_id)
        if parts is None:
            raise DeltaReplayError(f"partition of unknown topic id {topic_id} in a snapshot")
        parts[index] = registration

    def image(self, offset: int) -> MetadataImage:
        parts = self.parts
        full = {tid: TopicImage(t.name, tid, MappingProxyType(parts[tid]))
                for tid, t in self.topics.items()}
        frozen_configs: Mapping[ConfigResourceKey, Mapping[str, str]] = {
            key: MappingProxyType(values) for key, values in self.configs.items()}
        return MetadataImage(offset, PersistentMap.from_mapping(full),
                             PersistentMap.from_mapping(self.topic_ids),
                             PersistentMap.from_mapping(self.brokers),
                             PersistentMap.from_mapping(frozen_configs),
                             PersistentMap.from_mapping(self.features),
                             PersistentMap.from_mapping(self.acls), next(_ACL_VERSIONS))


def build_image(records: Iterable[MetadataRecord], offset: int) -> MetadataImage:
    """An image from a whole state's records (a snapshot) covering up to `offset`."""
    builder = _ImageBuilder()
    for record in records:
        builder.add(record)
    return builder.image(offset)


# A partition as the snapshot states it (the topic without its partitions).
SnapshotPartition = tuple[TopicImage, int, PartitionRegistration]
_LOCAL_CHUNK = 2000


def build_image_from_bytes(records: Iterable[bytes], offset: int, local_broker: int = -1,
                           on_local: Callable[[list[SnapshotPartition]], None] | None = None
                           ) -> MetadataImage:
    """`build_image` of encoded records: equal result, and `decode_record`'s errors.

    Partition records (nearly all of a snapshot) are read by the controller's own
    PartitionRecord decoder (`controller.records.partition_wire`: the layout the
    controller writes, split on the wire, one shared registration per distinct
    value); anything else, or anything unusual (a parse error, no or an unknown
    record type, an unsupported version, an unknown recovery state), goes through
    `decode_record` and the general path, which raise the usual errors.

    `on_local` gets, in chunks while decoding goes on, the partitions that have
    `local_broker` among their replicas (the broker agent prewrites their local
    state meanwhile)."""
    builder = _ImageBuilder()
    topics = builder.topics
    local: list[SnapshotPartition] = []
    add_partition = builder.partition
    # The controller's PartitionRecord decoder (`partition_wire`): the layout it writes
    # split on the wire, registrations shared through its cache; anything else goes
    # through `decode_record`.
    split_partition = partition_wire.split_partition
    registrations = partition_wire.registration_cache()
    topic_key, topic_id = b"", ""
    for data in records:
        split = split_partition(data)
        if split is not None:
            index, key, tail = split
            registration = registrations.get(tail) or partition_wire.registration_from_tail(tail)
            if registration is not None:
                if key != topic_key:
                    try:
                        topic_id, topic_key = key.decode("utf-8"), key
                    except UnicodeDecodeError:
                        topic_key = b""
                if topic_key == key:
                    add_partition(topic_id, index, registration)
                    if local_broker in registration.replicas and on_local is not None:
                        local.append((topics[topic_id], index, registration))
                        if len(local) >= _LOCAL_CHUNK:
                            on_local(local)
                            local = []
                    continue
        builder.add(decode_record(data))
    if local and on_local is not None:
        on_local(local)
    return builder.image(offset)
