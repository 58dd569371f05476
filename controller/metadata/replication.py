"""Replication manager: topics, partitions, ISR, leaders, reassignments.

Durable state (timeline maps, registered with the shared registry):
- topic id -> ``Topic``; topic name -> topic id; topic id -> partition count;
- (topic id, partition index) -> ``PartitionRegistration``.
Derived indexes (broker -> partitions, offline and reassigning partitions) are kept
by replay in a ``PartitionIndex`` (partition_index.py) on the same registry.

The ISR shrinks when a broker is fenced, shuts down or goes away. How it grows
depends on metadata.version: from level 7 (replica-reported ISR) only by the
partition leader's AlterPartition (alter_partition.py), once the follower caught
up with its log (which is also how the adding replicas of a reassignment join the
ISR and complete it); below 7, a replica is taken to be in sync as soon as its
broker is usable and heartbeats (``ready_broker_changes``). Either way a returning
broker takes back the offline partitions whose ISR it is the last of.

Generation methods read the latest (uncommitted) state and change nothing; queries
take ``epoch`` to read at a committed offset (a live registry snapshot).
"""

from __future__ import annotations

from collections.abc import Callable, ItemsView, Iterable, Mapping, Sequence

import attrs

from controller.metadata import partition_requests as _requests
from controller.metadata import topics as _topics
from controller.metadata.alter_partition import (
    AlterPartitionRequest,
    AlterPartitionResult,
)
from controller.metadata.alter_partition import alter_partition as _alter_partition
from controller.metadata.cluster import ClusterControlManager
from controller.metadata.config_schema import ResourceType
from controller.metadata.configs import ConfigurationControlManager
from controller.metadata.errors import (
    OK,
    ApiError,
    ControllerResult,
    ErrorCode,
    MetadataReplayError,
)
from controller.metadata.levels import Feature, enabled, needs_level
from controller.metadata.partition_change import (
    Election,
    build_partition_change,
    change_record,
)
from controller.metadata.partition_index import PartitionIndex, PartKey
from controller.metadata.placement import RandomSource
from controller.metadata.registrations import partition_records, registration_of
from controller.metadata.topics import (
    CreatableTopic,
    CreatePartitionsResult,
    CreatePartitionsTopic,
    CreateTopicResult,
    DeleteTopicResult,
    ElectionType,
    ElectLeadersResult,
    OngoingReassignment,
    PartitionDescription,
    ReassignmentRequest,
    ReassignmentResult,
    TopicDescription,
    TopicListing,
    TopicPartition,
    collision_key,
)
from controller.records import (
    MetadataRecord,
    PartitionChangeRecord,
    PartitionRecord,
    RemoveTopicRecord,
    TopicRecord,
    make_record,
)
from controller.records.domain import (
    NO_LEADER,
    PartitionDelta,
    PartitionRegistration,
    Topic,
)
from timeline import SnapshotRegistry, TimelineHashMap

UNCLEAN_KEY = "unclean.leader.election.enable"
MIN_ISR_KEY = "min.insync.replicas"

# The most partition changes one broker event (fenced, shutting down, unregistered,
# back) writes in its own batch. A broker of a large cluster is a replica of hundreds
# of thousands of partitions: far more than a batch may hold (MAX_RECORDS_PER_BATCH),
# and generating them in one go would hold up every other request for seconds. Past
# this, the broker's own record commits alone and the controller moves its partitions
# in batches of this size between other requests (quorum_controller/partition_mover.py).
PARTITION_MOVES_PER_BATCH = 1_000


class ReplicationControlManager:
    def __init__(
        self,
        registry: SnapshotRegistry,
        *,
        cluster: ClusterControlManager,
        configs: ConfigurationControlManager,
        rng: RandomSource,
    ) -> None:
        self.cluster = cluster
        self.configs = configs
        self.rng = rng
        self._topics: TimelineHashMap[str, Topic] = TimelineHashMap(registry)
        self._topic_ids: TimelineHashMap[str, str] = TimelineHashMap(registry)
        self._counts: TimelineHashMap[str, int] = TimelineHashMap(registry)
        # Name with '.' replaced by '_' -> name: Kafka refuses names that collide so
        # (its metric names cannot tell them apart).
        self._collision_keys: TimelineHashMap[str, str] = TimelineHashMap(registry)
        self._partitions: TimelineHashMap[PartKey, PartitionRegistration] = TimelineHashMap(
            registry
        )
        # Its latest state, read at C speed (replay and the partition mover look up a
        # partition per change).
        self._latest_partitions = self._partitions.latest()
        self._index = PartitionIndex(registry)
        # The log offset of the record being replayed (``MetadataState`` sets it), and
        # topic id -> the offset of the last record that changed the topic or its
        # partitions. Not history, just a conservative hint for ``partitions_at``: a
        # topic last changed at or before an epoch reads the same at that epoch as now
        # (reverts only go back to offsets at or above any epoch still read).
        self.replay_offset = -1
        self._mod_floor: Callable[[int | None], int | None] = lambda _epoch: None
        # The last TopicRecord replayed and its offset: a snapshot's partitions come
        # right after their topic at the same offset and do not move its mod offset.
        self._topic_replayed_at: tuple[str, int] = ("", -1)
        self._changed_at: dict[str, int] = {}
        # Topics without an entry last changed at or before this offset.
        self._changed_floor = -1
        # Brokers whose partition changes were too many to write with their own event
        # (see PARTITION_MOVES_PER_BATCH): hints for the active controller's partition
        # mover, which takes them. Not state: an active controller that starts finds
        # leaving brokers by itself, and a broker that is back asks on every heartbeat.
        self.deferred_leaving: set[int] = set()
        self.deferred_ready: set[int] = set()

    # -- requests (generation; see topics.py for topic creation and deletion) ---------

    def create_topics(
        self, topics: Sequence[CreatableTopic], *, validate_only: bool = False
    ) -> ControllerResult[tuple[CreateTopicResult, ...]]:
        return _topics.create_topics(self, topics, validate_only=validate_only)

    def delete_topics(
        self, names: Sequence[str], if_mod_offsets: Mapping[str, int] | None = None
    ) -> ControllerResult[tuple[DeleteTopicResult, ...]]:
        return _topics.delete_topics(self, names, if_mod_offsets)

    def create_partitions(
        self, items: Sequence[CreatePartitionsTopic], *, validate_only: bool = False
    ) -> ControllerResult[tuple[CreatePartitionsResult, ...]]:
        return _topics.create_partitions(self, items, validate_only=validate_only)

    def elect_leaders(
        self,
        partitions: Sequence[TopicPartition] | None,
        election_type: ElectionType = ElectionType.PREFERRED,
    ) -> ControllerResult[tuple[ElectLeadersResult, ...]]:
        """Per-partition results. ``None`` means every partition that needs it (its
        leader is not the preferred one, or, for UNCLEAN, it has no leader)."""
        return _requests.elect_leaders(self, partitions, election_type)

    def alter_partition(self, request: AlterPartitionRequest
                        ) -> ControllerResult[tuple[AlterPartitionResult, ...]]:
        """A partition leader's ISR report (alter_partition.py). Below metadata.version
        7 the ISR is the brokers that heartbeat, and the request is refused."""
        if not self.replica_reported_isr():
            error = ApiError(ErrorCode.UNSUPPORTED_VERSION,
                             needs_level(Feature.REPLICA_REPORTED_ISR,
                                         self.cluster.metadata_version()))
            return ControllerResult((), tuple(
                AlterPartitionResult(i.topic_id, i.partition, error) for i in request.items))
        return _alter_partition(self, request)

    def elr_cleared_by(self, records: Sequence[MetadataRecord]) -> list[MetadataRecord]:
        """KIP-966: once `records` change min.insync.replicas of a topic, or a default
        that topics inherit, the ELR of the partitions concerned is dropped. Its members
        were known to hold every record below the HW only because the HW could not move
        while fewer than the old min ISR were in the ISR; under a lower one it moves
        without them (Kafka clears it on any change of the config, as here)."""
        topics: set[str] = set()
        every = False
        for record in records:
            if record.WhichOneof("record") != "config" or record.config.name != MIN_ISR_KEY:
                continue
            if int(record.config.resource_type) == ResourceType.TOPIC:
                topics.add(record.config.resource_name)
            else:
                every = True
        if every:
            keys: Iterable[PartKey] = sorted(k for k, p in self._latest_partitions.items()
                                             if p.elr)
        else:
            keys = [(tid, i) for tid in sorted(filter(None, map(self._topic_ids.get, topics)))
                    for i in range(self._counts[tid])]
        return [change_record(key[0], key[1], PartitionDelta(elr=()))
                for key in keys if self._latest_partitions[key].elr]

    def replica_reported_isr(self) -> bool:
        """metadata.version 7+: the ISR grows only by AlterPartition."""
        return enabled(Feature.REPLICA_REPORTED_ISR, self.cluster.metadata_version())

    def alter_partition_reassignments(
        self, items: Sequence[ReassignmentRequest]
    ) -> ControllerResult[tuple[ReassignmentResult, ...]]:
        """Start (``replicas`` set) or cancel (``replicas`` None) reassignments; see
        ``partition_requests.alter_partition_reassignments``."""
        return _requests.alter_partition_reassignments(self, items)

    # -- hooks for the cluster manager ----------------------------------------------

    def leaving_brokers_changes(self, broker_ids: frozenset[int]) -> list[MetadataRecord]:
        """Every change at once when the brokers are replicas of at most
        `PARTITION_MOVES_PER_BATCH` partitions; else none, and the brokers are noted in
        `deferred_leaving`: the controller moves them a batch at a time after the
        broker's own record (`PartitionMover`)."""
        if sum(len(self._index.replica_of.get(b, ())) for b in broker_ids) \
                > PARTITION_MOVES_PER_BATCH:
            self.deferred_leaving |= broker_ids
            return []
        records: list[MetadataRecord] = []
        for key in self.leaving_keys(broker_ids):
            delta = self.leaving_delta(key, broker_ids)
            if delta is not None:
                records.append(change_record(key[0], key[1], delta))
        return records

    def leaving_keys(self, broker_ids: frozenset[int]) -> list[PartKey]:
        """The partitions `broker_ids` are replicas of, those they lead first (moving a
        leadership is what restores availability), each group in key order."""
        keys: set[PartKey] = set()
        for broker_id in broker_ids:
            keys.update(self._index.replica_of.get(broker_id, ()))
        ordered = sorted(keys)
        partitions = self._partitions
        led = [k for k in ordered if partitions[k].leader in broker_ids]
        return led + [k for k in ordered if partitions[k].leader not in broker_ids]

    def replica_keys(self, broker_id: int) -> list[PartKey]:
        """The partitions `broker_id` is a replica of, in no particular order (a copy
        of the index: cheap at any size)."""
        return list(self._index.replica_of.get(broker_id, ()))

    def leader_of(self, key: PartKey) -> int:
        """Partition `key`'s leader (NO_LEADER if it has none or is gone)."""
        part = self._latest_partitions.get(key)
        return NO_LEADER if part is None else part.leader

    def leaving_delta(self, key: PartKey, broker_ids: frozenset[int]) -> PartitionDelta | None:
        """The change taking `broker_ids` out of partition `key`'s ISR and leadership,
        computed as if they were gone; None if there is nothing to change (or the
        partition is gone)."""
        part = self._latest_partitions.get(key)
        if part is None:
            return None
        isr = tuple([r for r in part.isr if r not in broker_ids])
        if part.leader not in broker_ids and len(isr) == len(part.isr):
            return None
        return self.partition_delta(
            key[0], part, isr=isr,
            usable=lambda b: b not in broker_ids and self.cluster.is_usable(b))

    def ready_broker_changes(self, broker_id: int) -> list[MetadataRecord]:
        """Like `leaving_brokers_changes`: all at once up to `PARTITION_MOVES_PER_BATCH`
        candidate partitions; else none, the broker noted in `deferred_ready`."""
        keys = self.ready_keys(broker_id, PARTITION_MOVES_PER_BATCH)
        if keys is None:
            self.deferred_ready.add(broker_id)
            return []
        records: list[MetadataRecord] = []
        for key in keys:
            delta = self.ready_delta(key, broker_id)
            if delta is not None:
                records.append(change_record(key[0], key[1], delta))
        return records

    def ready_keys(self, broker_id: int, limit: int | None = None,
                   ordered: bool = True) -> list[PartKey] | None:
        """The partitions a usable `broker_id` may rejoin (out of their ISR) or lead
        (offline ones it is a replica of), the offline ones first, each group in key
        order (in no particular order if not `ordered`); None if there are more than
        `limit`."""
        # With replica-reported ISRs a returning broker only takes back offline
        # partitions here; the leaders add it to their ISRs once it caught up.
        out_of_isr = () if self.replica_reported_isr() else \
            self._index.out_of_isr.get(broker_id, ())
        if limit is not None and len(out_of_isr) > limit:
            return None
        # Offline partitions it is a replica of: walk the smaller of the two sets (this
        # runs on every heartbeat).
        replica_of = self._index.replica_of.get(broker_id, ())
        leaderless = self._index.leaderless
        if len(leaderless) <= len(replica_of):
            offline = {k for k in leaderless if k in replica_of}
        else:
            offline = {k for k in replica_of if k in leaderless}
        if limit is not None and len(offline) + len(out_of_isr) > limit:
            return None
        if not ordered:
            return [*offline, *(k for k in out_of_isr if k not in offline)]
        return sorted(offline) + sorted(k for k in out_of_isr if k not in offline)

    def ready_delta(self, key: PartKey, broker_id: int) -> PartitionDelta | None:
        """The change adding a usable `broker_id` back to partition `key`'s ISR, or
        electing it where the partition has no leader; None if nothing changes."""
        part = self._latest_partitions.get(key)
        if part is None or broker_id not in part.replicas:
            return None
        isr = part.isr
        # Only a partition with a leader can bring a replica back in sync; an
        # offline one waits for an in-sync replica (or an unclean election). With
        # replica-reported ISRs only its leader can (AlterPartition).
        if part.leader != NO_LEADER and broker_id not in isr and \
                not self.replica_reported_isr():
            isr = (*isr, broker_id)
        return self.partition_delta(
            key[0], part, isr=isr,
            usable=lambda b: b == broker_id or self.cluster.is_usable(b))

    def replica_brokers(self) -> list[int]:
        """Every broker id that is a replica of some partition."""
        return [b for b, keys in self._index.replica_of.items() if keys]

    def leads_any(self, broker_id: int) -> bool:
        return broker_id in self._index.led_count

    def partition_delta(
        self,
        topic_id: str,
        part: PartitionRegistration,
        *,
        usable: Callable[[int], bool] | None = None,
        unclean_allowed: bool | None = None,
        isr: tuple[int, ...] | None = None,
        replicas: tuple[int, ...] | None = None,
        adding: tuple[int, ...] | None = None,
        removing: tuple[int, ...] | None = None,
        election: Election = Election.KEEP,
    ) -> PartitionDelta | None:
        """``build_partition_change`` of a partition of ``topic_id`` with this
        cluster's usable brokers and the topic's unclean-election config (unless
        given)."""

        def unclean() -> bool:
            if unclean_allowed is None:
                return self.configs.topic_flag(self._topics[topic_id].name, UNCLEAN_KEY)
            return unclean_allowed

        def min_isr() -> int:
            return self.configs.topic_int(self._topics[topic_id].name, MIN_ISR_KEY)

        return build_partition_change(
            part,
            is_usable=self.cluster.is_usable if usable is None else usable,
            unclean_allowed=unclean,
            isr=isr,
            replicas=replicas,
            adding=adding,
            removing=removing,
            election=election,
            min_isr=min_isr if self.replica_reported_isr() else None,
            bump_epoch_on_removal=self.replica_reported_isr(),
        )

    def lookup_partition(
        self, topic: str, partition: int
    ) -> tuple[str, PartitionRegistration] | ApiError:
        tid = self._topic_ids.get(topic)
        part = None if tid is None else self._partitions.get((tid, partition))
        if tid is None or part is None:
            return ApiError(
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                f"partition {topic}-{partition} does not exist",
            )
        return tid, part

    # -- replay ------------------------------------------------------------------------

    def replay_topic(self, record: TopicRecord) -> None:
        if record.name in self._topic_ids or record.topic_id in self._topics:
            raise MetadataReplayError(f"topic {record.name!r} ({record.topic_id}) already exists")
        mod_offset = record.mod_offset if record.HasField("mod_offset") else self.replay_offset
        self._topics[record.topic_id] = Topic(record.name, record.topic_id, mod_offset)
        self._topic_replayed_at = (record.topic_id, self.replay_offset)
        self._topic_ids[record.name] = record.topic_id
        self._counts[record.topic_id] = 0
        self._changed_at[record.topic_id] = self.replay_offset
        self._collision_keys[collision_key(record.name)] = record.name

    def replay_partition(self, record: PartitionRecord) -> None:
        topic_id = record.topic_id
        if topic_id not in self._counts:
            raise MetadataReplayError(
                f"partition {record.partition_id} of unknown topic id {topic_id}"
            )
        self.replay_registration(topic_id, record.partition_id, registration_of(record))

    def replay_registration(
        self, topic_id: str, partition_id: int, new: PartitionRegistration
    ) -> None:
        """A PartitionRecord's replay from its parts."""
        self.replay_registrations(topic_id, ((partition_id, new),))

    def replay_registrations(
        self, topic_id: str, parts: Sequence[tuple[int, PartitionRegistration]]
    ) -> None:
        """PartitionRecords of one topic in a row, replayed in order (the wire fast
        path, ``MetadataState.replay_encoded``, decodes them from the bytes): the same
        as one ``replay_partition`` each, with the index adds of new partitions done
        per broker, not per partition."""
        count = self._counts.get(topic_id)
        if count is None:
            if parts:
                raise MetadataReplayError(
                    f"partition {parts[0][0]} of unknown topic id {topic_id}"
                )
            return
        partitions = self._partitions
        current = partitions.latest().get
        # New partitions not yet written (distinct keys, absent from the map).
        fresh: list[tuple[PartKey, PartitionRegistration]] = []
        fresh_ids: set[int] = set()
        top = count
        # Ids from here up are in no map yet: a topic's partitions are the ids below
        # its count (a snapshot's load and a creation skip the map lookup for each).
        absent_from = count
        for partition_id, new in parts:
            key = (topic_id, partition_id)
            if partition_id >= top:
                top = partition_id + 1
            if partition_id not in fresh_ids and (partition_id >= absent_from
                                                  or current(key) is None):
                fresh.append((key, new))
                fresh_ids.add(partition_id)
                continue
            # In log order: the new partitions before this one are written and
            # indexed first (one of them may be this very key).
            self._put_fresh(fresh)
            fresh = []
            fresh_ids.clear()
            absent_from = top
            old = current(key)
            partitions[key] = new
            self._index.reindex(key, old, new)
        self._put_fresh(fresh)
        if top != count:
            self._counts[topic_id] = top
            if (topic_id, self.replay_offset) != self._topic_replayed_at:
                # Partitions added (its creation's too, one by one or as a run: the
                # last one's offset either way), but not a snapshot's, replayed at
                # its TopicRecord's offset, which says the mod offset.
                topic = self._topics[topic_id]
                self._topics[topic_id] = attrs.evolve(topic, mod_offset=self.replay_offset)
        self._changed_at[topic_id] = self.replay_offset

    def replay_partition_change(self, record: PartitionChangeRecord) -> None:
        self.replay_partition_delta(record.topic_id, record.partition_id,
                                    PartitionDelta.of(record))

    def replay_partition_delta(self, topic_id: str, partition_id: int,
                               delta: PartitionDelta) -> None:
        """A PartitionChangeRecord's replay from its parts (the wire fast path,
        ``MetadataState.replay_encoded``, reads them from the bytes)."""
        key = (topic_id, partition_id)
        old = self._latest_partitions.get(key)
        if old is None:
            raise MetadataReplayError(
                f"change to unknown partition {partition_id} of topic id {topic_id}"
            )
        new = old.apply(delta)
        self._partitions[key] = new
        self._changed_at[topic_id] = self.replay_offset
        self._index.reindex(key, old, new)

    def replay_remove_topic(self, record: RemoveTopicRecord) -> str:
        """Removes the topic and its partitions; returns its name (for its configs)."""
        topic = self._topics.get(record.topic_id)
        if topic is None:
            raise MetadataReplayError(f"cannot remove unknown topic id {record.topic_id}")
        self._changed_at[record.topic_id] = self.replay_offset
        for partition_id in range(self._counts[record.topic_id]):
            key = (record.topic_id, partition_id)
            old = self._partitions.pop(key, None)
            if old is not None:
                self._index.reindex(key, old, None)
        del self._topics[record.topic_id]
        del self._topic_ids[topic.name]
        if self._collision_keys.get(collision_key(topic.name)) == topic.name:
            del self._collision_keys[collision_key(topic.name)]
        del self._counts[record.topic_id]
        return topic.name

    def _put_fresh(self, fresh: list[tuple[PartKey, PartitionRegistration]]) -> None:
        """New partitions (distinct keys, none present): written and indexed."""
        if fresh:
            self._partitions.put_all(fresh)
            self._index.add_new(fresh)

    def check_indexes(self) -> None:
        """Assert the derived indexes agree with the partitions (for tests)."""
        self._index.check(self._partitions.items())
        assert sum(self._counts.values()) == len(self._partitions)

    # -- queries -----------------------------------------------------------------------

    def topic_id(self, name: str, epoch: int | None = None) -> str | None:
        return self._topic_ids.get(name, None, epoch=epoch)

    def topic(self, topic_id: str, epoch: int | None = None) -> Topic | None:
        return self._topics.get(topic_id, None, epoch=epoch)

    def topic_name(self, topic_id: str) -> str:
        """The name of an existing topic (latest state)."""
        return self._topics[topic_id].name

    def partition_items(self) -> ItemsView[PartKey, PartitionRegistration]:
        """Every (topic id, index) -> partition, latest state."""
        return self._partitions.items()

    def colliding_topic(self, name: str) -> str | None:
        """An existing topic whose name differs from ``name`` only by '.' vs '_'."""
        other = self._collision_keys.get(collision_key(name))
        return None if other is None or other == name else other

    def topic_exists(self, name: str, epoch: int | None = None) -> bool:
        return self._topic_ids.contains(name, epoch)

    def partition_count(self, topic_id: str, epoch: int | None = None) -> int:
        return self._counts.get(topic_id, 0, epoch=epoch)

    def partition(
        self, topic_id: str, partition_id: int, epoch: int | None = None
    ) -> PartitionRegistration | None:
        return self._partitions.get((topic_id, partition_id), None, epoch=epoch)

    def partitions(
        self, topic_id: str, epoch: int | None = None
    ) -> tuple[PartitionRegistration, ...]:
        found = []
        for partition_id in range(self.partition_count(topic_id, epoch)):
            part = self.partition(topic_id, partition_id, epoch)
            assert part is not None, f"partition {partition_id} of {topic_id} is missing"
            found.append(part)
        return tuple(found)

    def partitions_at(self, topic_id: str, epoch: int) -> tuple[PartitionRegistration, ...]:
        """``partitions(topic_id, epoch)``, read from the latest state when the topic
        has not changed since ``epoch``. Reading a key at a past epoch walks every
        registry snapshot after it, and a snapshot file being written keeps all of
        those alive: reading a million partitions that way grows with the writes
        made meanwhile. This does not."""
        changed = self._changed_at.get(topic_id, self._changed_floor)
        if changed > epoch or topic_id not in self._counts:
            return self.partitions(topic_id, epoch)
        latest = self._partitions.latest()
        return tuple(map(latest.__getitem__,
                         [(topic_id, i) for i in range(self._counts[topic_id])]))

    def forget_changes_up_to(self, offset: int) -> None:
        """Drop the change hints at or below ``offset``, which no later
        ``partitions_at`` goes below (it only tells apart changes after its epoch)."""
        if offset > self._changed_floor:
            self._changed_floor = offset
            self._changed_at = {t: o for t, o in self._changed_at.items() if o > offset}

    def list_topics(self, epoch: int | None = None) -> tuple[TopicListing, ...]:
        return tuple(
            TopicListing(name, tid) for name, tid in sorted(self._topic_ids.items(epoch=epoch))
        )

    def describe_topics(
        self, names: Iterable[str] | None = None, epoch: int | None = None
    ) -> tuple[TopicDescription, ...]:
        """Per-name descriptions (every topic by name when ``names`` is None)."""
        wanted = [t.name for t in self.list_topics(epoch)] if names is None else list(names)
        results = []
        for name in wanted:
            tid = self.topic_id(name, epoch)
            if tid is None:
                error = ApiError(
                    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist"
                )
                results.append(TopicDescription(name, error))
                continue
            parts = tuple(
                PartitionDescription(i, p) for i, p in enumerate(self.partitions(tid, epoch))
            )
            mod_offset = self.topic_mod_offset(tid, epoch)
            results.append(TopicDescription(name, OK, tid, parts,
                                            -1 if mod_offset is None else mod_offset))
        return tuple(results)

    def list_reassignments(self, epoch: int | None = None) -> tuple[OngoingReassignment, ...]:
        found = []
        for tid, partition_id in self._index.reassigning.elements(epoch):
            topic = self.topic(tid, epoch)
            part = self.partition(tid, partition_id, epoch)
            assert topic is not None and part is not None
            found.append(
                OngoingReassignment(
                    topic.name,
                    partition_id,
                    part.replicas,
                    part.adding_replicas,
                    part.removing_replicas,
                )
            )
        return tuple(sorted(found, key=lambda r: (r.topic, r.partition)))

    def offline_partition_count(self, epoch: int | None = None) -> int:
        return self._index.leaderless.size(epoch)

    def under_replicated_partition_count(self, epoch: int | None = None) -> int:
        return self._index.under_replicated_count(epoch)

    def preferred_imbalance_count(self, epoch: int | None = None) -> int:
        """Partitions led by another replica than their preferred (first) one."""
        return self._index.not_preferred.size(epoch)

    def total_partition_count(self, epoch: int | None = None) -> int:
        return self._partitions.size(epoch)

    def topic_mod_offset(self, topic_id: str, epoch: int | None = None) -> int | None:
        """The offset of the topic's last change (created, partitions added); None
        below metadata.version 8, which has no mod offsets."""
        floor = self._mod_floor(epoch)
        topic = self._topics.get(topic_id, None, epoch=epoch)
        if floor is None or topic is None:
            return None
        return max(topic.mod_offset, floor)

    def bind_mod_floor(self, mod_floor: Callable[[int | None], int | None]) -> None:
        """``FeatureControlManager.mod_floor``: None below metadata.version 8."""
        self._mod_floor = mod_floor

    def topic_snapshot_record(self, listing: TopicListing, epoch: int | None) -> MetadataRecord:
        """A topic's record in a snapshot at `epoch` (with its mod offset from 8 on)."""
        record = TopicRecord(name=listing.name, topic_id=listing.topic_id)
        mod_offset = self.topic_mod_offset(listing.topic_id, epoch)
        if mod_offset is not None:
            record.mod_offset = mod_offset
        return make_record(record)

    def snapshot_records(self, epoch: int | None = None) -> list[MetadataRecord]:
        records = []
        for listing in self.list_topics(epoch):
            records.append(self.topic_snapshot_record(listing, epoch))
            records += partition_records(listing.topic_id, self.partitions(listing.topic_id, epoch))
        return records

