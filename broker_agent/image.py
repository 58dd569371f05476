"""`MetadataImage`: the broker's immutable view of the committed metadata.

An image is built from committed records only (a snapshot, then batch deltas: see
`delta.py`). Every collection is a `PersistentMap`, and a topic's partitions are a
small dict that is copied only when that topic changes, so the next image after a
one-partition change shares everything else with the previous one: its cost does
not grow with the number of topics. Readers (the reconciler, the status RPC) may
hold an old image as long as they like.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from types import MappingProxyType

import attrs

from broker_agent.pmap import PersistentMap
from controller.records.domain import BrokerRegistration, PartitionRegistration
from controller.security.acl import AclBinding

# The listener name a broker registers its replication listener under
# (`[data] replication_listen`): followers fetch there.
REPLICATION_LISTENER = "REPLICATION"

# (topic id, partition index): how partitions are named across the broker agent.
PartitionKey = tuple[str, int]
# (resource type wire value, resource name) -> {config key: value}.
ConfigResourceKey = tuple[int, str]

_NO_PARTITIONS: Mapping[int, PartitionRegistration] = MappingProxyType({})


@attrs.frozen(slots=True)
class TopicImage:
    name: str
    topic_id: str
    # Partition index -> registration; read-only (a new TopicImage gets a new dict).
    partitions: Mapping[int, PartitionRegistration] = _NO_PARTITIONS


@attrs.frozen(slots=True, eq=False)
class MetadataImage:
    # Offset of the last committed record this image includes (-1: none).
    offset: int
    topics: PersistentMap[str, TopicImage]
    topic_ids: PersistentMap[str, str]
    brokers: PersistentMap[int, BrokerRegistration]
    configs: PersistentMap[ConfigResourceKey, Mapping[str, str]]
    features: PersistentMap[str, int]
    # ACL entry id -> binding (what the data plane authorizes with); `acl_version`
    # changes whenever they do (the authorizer's cache key).
    acls: PersistentMap[str, AclBinding] = attrs.field(factory=PersistentMap)
    acl_version: int = 0

    @classmethod
    def empty(cls) -> MetadataImage:
        return cls(-1, PersistentMap(), PersistentMap(), PersistentMap(), PersistentMap(),
                   PersistentMap())


    def topic_by_name(self, name: str) -> TopicImage | None:
        topic_id = self.topic_ids.get(name)
        return None if topic_id is None else self.topics.get(topic_id)

    def partition(self, key: PartitionKey) -> PartitionRegistration | None:
        topic = self.topics.get(key[0])
        return None if topic is None else topic.partitions.get(key[1])

    def broker_address(self, broker_id: int) -> str:
        """"host:port" of the broker's first listener ("" if unknown)."""
        registration = self.brokers.get(broker_id)
        if registration is None or not registration.listeners:
            return ""
        listener = registration.listeners[0]
        return f"{listener.host}:{listener.port}"

    def replication_address(self, broker_id: int) -> str:
        """Where followers fetch from the broker: its REPLICATION listener if it has one
        (`[data] replication_listen`), else its first ("" if unknown)."""
        registration = self.brokers.get(broker_id)
        for listener in () if registration is None else registration.listeners:
            if listener.name == REPLICATION_LISTENER:
                return f"{listener.host}:{listener.port}"
        return self.broker_address(broker_id)

    def partition_count(self) -> int:
        return sum(len(t.partitions) for t in self.topics.values())

    def iter_partitions(self) -> Iterator[tuple[TopicImage, int, PartitionRegistration]]:
        for topic in self.topics.values():
            for index, part in topic.partitions.items():
                yield topic, index, part

    def comparable(self) -> tuple[object, ...]:
        """Topics, partitions, brokers, configs and features as plain sorted values, in
        the shape of `controller.metadata.MetadataImage` (tests compare the two)."""
        topics = tuple(
            (t.name, t.topic_id, tuple(t.partitions[i] for i in sorted(t.partitions)))
            for t in sorted(self.topics.values(), key=lambda t: t.name))
        brokers = tuple(sorted(self.brokers.values(), key=lambda b: b.broker_id))
        configs = tuple(sorted((kind, name, key, value)
                               for (kind, name), values in self.configs.items()
                               for key, value in values.items()))
        return tuple(sorted(self.features.items())), brokers, topics, configs

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MetadataImage):
            return NotImplemented
        return self.offset == other.offset and self.comparable() == other.comparable()

    __hash__ = None  # type: ignore[assignment]


def topic_image(name: str, topic_id: str,
                partitions: Iterable[tuple[int, PartitionRegistration]] = ()) -> TopicImage:
    return TopicImage(name, topic_id, MappingProxyType(dict(partitions)))
