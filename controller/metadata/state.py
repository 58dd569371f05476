"""``MetadataState``: the registry, the control managers, replay and snapshots.

The one place records become state: ``replay(record, offset)`` dispatches on the
record type to the manager owning it. Managers only generate. Everything durable is in
timeline structures registered with ``self.registry``, so the controller can
``registry.create_snapshot(offset)`` after each batch and ``revert_to_snapshot`` to the
last committed offset; reads at a committed offset pass ``epoch=offset``.

``snapshot_records(epoch)`` writes the whole state as records, in the fixed order
features, brokers, topics and partitions, configs, ACLs, remote tier objects; replaying them into a fresh
``MetadataState`` gives an equal ``to_image()``, which is plain attrs/tuple data built
structure by structure, so two states compare with ``==`` and a test failure shows
which structure differs.
"""

from __future__ import annotations

from collections.abc import Iterable

import attrs

from controller.metadata.acls import AclControlManager, AclEntry
from controller.metadata.cluster import ClusterControlManager
from controller.metadata.configs import ConfigurationControlManager
from controller.metadata.errors import MetadataReplayError
from controller.metadata.features import METADATA_VERSION, FeatureControlManager
from controller.metadata.levels import LATEST_METADATA_VERSION, Feature, enabled
from controller.metadata.placement import RandomSource
from controller.metadata.replication import ReplicationControlManager
from controller.metadata.requests import RequestControlManager
from controller.metadata.tier import RemoteLogControlManager, RemoteObject
from controller.records import (
    AccessControlEntryRecord,
    BrokerRegistrationChangeRecord,
    ConfigRecord,
    FeatureLevelRecord,
    LeaderChangeRecord,
    MetadataRecord,
    NoOpRecord,
    PartitionChangeRecord,
    PartitionRecord,
    RegisterBrokerRecord,
    RemoteLogSegmentRecord,
    RemoteLogSegmentStateChangeRecord,
    RemoveAccessControlEntryRecord,
    RemoveTopicRecord,
    RequestResultRecord,
    SnapshotFooterRecord,
    SnapshotHeaderRecord,
    TopicRecord,
    UnregisterBrokerRecord,
    VotersRecord,
    decode_record,
    make_record,
    partition_wire,
)
from controller.records.dispatch import RecordHandler, UnhandledRecordError, dispatch
from controller.records.domain import (
    NO_LEADER,
    BrokerRegistration,
    PartitionDelta,
    PartitionRegistration,
)
from timeline import SnapshotRegistry, TimelineLong, TimelineObject

DEFAULT_SESSION_TIMEOUT_MS = 9_000
# Records accepted and ignored by the metadata image (Raft control records, no-ops).


@attrs.frozen
class TopicImage:
    name: str
    topic_id: str
    partitions: tuple[PartitionRegistration, ...]


@attrs.frozen
class MetadataImage:
    """The whole durable state as plain comparable values (no offsets, no soft state)."""

    features: tuple[tuple[str, int], ...]
    brokers: tuple[BrokerRegistration, ...]
    topics: tuple[TopicImage, ...]
    # (resource type, resource name, key, value), sorted.
    configs: tuple[tuple[int, str, str, str], ...]
    acls: tuple[AclEntry, ...]
    # What the remote tier holds (objects by kind and offset).
    remote_objects: tuple[RemoteObject, ...] = ()
    # The recent admin writes, in eviction order: (principal, request id, method,
    # time, response, result dropped) -- not their offsets, which a snapshot moves.
    requests: tuple[tuple[str, str, str, int, bytes, bool], ...] = ()


class MetadataState(RecordHandler):
    def __init__(
        self,
        *,
        cluster_id: str,
        rng: RandomSource,
        session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS,
        controller_ids: frozenset[int] = frozenset(),
    ) -> None:
        registry = self.registry = SnapshotRegistry()
        self.features = FeatureControlManager(registry)
        self.cluster = ClusterControlManager(
            registry,
            cluster_id=cluster_id,
            session_timeout_ms=session_timeout_ms,
            features=self.features,
            controller_ids=controller_ids,
        )
        self.configs = ConfigurationControlManager(registry)
        self.replication = ReplicationControlManager(
            registry, cluster=self.cluster, configs=self.configs, rng=rng
        )
        self.cluster.bind_partitions(self.replication)
        self.configs.bind_topics(self.replication.topic_exists)
        self.replication.bind_mod_floor(self.features.mod_floor)
        self.configs.bind_mod_floor(self.features.mod_floor, self.cluster.metadata_version)
        self.features.bind_brokers(self.cluster.brokers)
        self.access = AclControlManager(registry, rng=rng)
        self.tier = RemoteLogControlManager(registry)
        self.requests = RequestControlManager(registry)
        self.features.bind_state_needing(self.needing_level_above)
        self._last_offset = TimelineLong(registry, -1)
        # The last VotersRecord replayed (None: a static quorum, or none yet).
        self.quorum_voters: TimelineObject[VotersRecord | None] = TimelineObject(registry, None)

    def needing_level_above(self, level: int) -> list[str]:
        """What the state holds that metadata.version `level` cannot keep (what a safe
        downgrade to it would lose): each newer feature's remaining data."""
        out = []
        if not enabled(Feature.REMOTE_TIER, level) and self.tier.objects():
            out.append(f"the remote tier holds {len(self.tier.objects())} objects "
                       f"(metadata.version {Feature.REMOTE_TIER.level})")
        hashed = sum(1 for o in self.tier.objects() if o.manifest_sha256)
        if enabled(Feature.REMOTE_TIER, level) and not enabled(Feature.TIER_HASH_CHAIN,
                                                                level) and hashed:
            out.append(f"the remote tier holds {hashed} objects with manifest hashes "
                       f"(metadata.version {Feature.TIER_HASH_CHAIN.level})")
        if not enabled(Feature.REQUEST_RESULTS, level) and self.requests.size():
            out.append(f"the request-result table holds {self.requests.size()} entries "
                       f"(metadata.version {Feature.REQUEST_RESULTS.level})")
        return out

    def voters_snapshot_records(self, epoch: int | None = None) -> list[MetadataRecord]:
        """The voter set in force (for a snapshot, which carries it first)."""
        voters = self.quorum_voters.get(epoch)
        return [] if voters is None else [make_record(voters)]

    # -- replay ------------------------------------------------------------------------

    def replay(self, record: MetadataRecord, offset: int) -> None:
        """Apply one committed-or-about-to-be record at log ``offset``.

        Offsets never go back; equal offsets are allowed because a snapshot's records
        are all replayed at the snapshot's offset. Raises MetadataReplayError (state
        unchanged) for a record that does not fit the state or has an unknown type.
        """
        last = self._last_offset.get()
        if offset < last:
            raise MetadataReplayError(f"replay at offset {offset} after offset {last}")
        self.replication.replay_offset = offset
        try:
            dispatch(record, self, offset)
        except UnhandledRecordError as exc:
            raise MetadataReplayError(str(exc)) from exc
        except ValueError as exc:  # no record type set
            if record.WhichOneof("record") is not None:
                raise
            raise MetadataReplayError(f"record at offset {offset}: {exc}") from exc
        if offset != last:
            self._last_offset.set(offset)

    # What each record type does to the state (`dispatch` calls these; replay only).

    def on_partition(self, record: PartitionRecord, offset: int) -> None:
        self.replication.replay_partition(record)

    def on_partition_change(self, record: PartitionChangeRecord, offset: int) -> None:
        self.replication.replay_partition_change(record)

    def on_topic(self, record: TopicRecord, offset: int) -> None:
        self.replication.replay_topic(record)

    def on_remove_topic(self, record: RemoveTopicRecord, offset: int) -> None:
        self.configs.remove_topic_configs(self.replication.replay_remove_topic(record))

    def on_register_broker(self, record: RegisterBrokerRecord, offset: int) -> None:
        self.cluster.replay_register(record)

    def on_unregister_broker(self, record: UnregisterBrokerRecord, offset: int) -> None:
        self.cluster.replay_unregister(record)

    def on_broker_registration_change(self, record: BrokerRegistrationChangeRecord,
                                      offset: int) -> None:
        self.cluster.replay_change(record)

    def on_config(self, record: ConfigRecord, offset: int) -> None:
        self.configs.replay(record, offset)

    def on_feature_level(self, record: FeatureLevelRecord, offset: int) -> None:
        self.features.replay(record, offset)

    def on_access_control_entry(self, record: AccessControlEntryRecord, offset: int) -> None:
        self.access.replay_create(record)

    def on_remove_access_control_entry(self, record: RemoveAccessControlEntryRecord,
                                       offset: int) -> None:
        self.access.replay_remove(record)

    def on_remote_log_segment(self, record: RemoteLogSegmentRecord, offset: int) -> None:
        self.tier.replay_segment(record)

    def on_remote_log_segment_state_change(self, record: RemoteLogSegmentStateChangeRecord,
                                           offset: int) -> None:
        self.tier.replay_state_change(record)

    def on_request_result(self, record: RequestResultRecord, offset: int) -> None:
        self.requests.replay(record, offset)

    # No state: liveness and Raft's own records.
    def on_no_op(self, record: NoOpRecord, offset: int) -> None:
        pass

    def on_leader_change(self, record: LeaderChangeRecord, offset: int) -> None:
        pass

    def on_snapshot_header(self, record: SnapshotHeaderRecord, offset: int) -> None:
        pass

    def on_snapshot_footer(self, record: SnapshotFooterRecord, offset: int) -> None:
        pass

    def on_voters(self, record: VotersRecord, offset: int) -> None:
        # The Raft layer acts on it; kept here only so a snapshot carries the voter set
        # in force at its offset (the first record after its header).
        self.quorum_voters.set(record)

    def replay_batch(self, records: Iterable[MetadataRecord], base_offset: int) -> int:
        """Replay records at consecutive offsets from ``base_offset``; returns the next
        offset. ``replay`` record by record: on an error the records before the bad one
        stay applied. The controller replays its batches encoded (``replay_encoded``);
        this plain path is what the tests check that one against."""
        offset = base_offset
        for record in records:
            self.replay(record, offset)
            offset += 1
        return offset

    def replay_encoded(self, records: Iterable[bytes], base_offset: int, *,
                       step: int = 1) -> int:
        """``replay_batch`` of the decoded ``records``, which is how the controller
        replays a batch it appends or that commits, and loads a snapshot (``step=0``:
        every record at ``base_offset``). Returns the next offset.

        PartitionRecords in the layout the controller writes skip protobuf
        (``partition_wire``: the registration comes from a cache keyed by its bytes),
        and a topic's run of them is replayed in one call
        (``replay_registrations``); PartitionChangeRecords skip it the same way (the
        delta comes from a cache keyed by its bytes); every other record, and any bytes the fast path
        does not take, is decoded (``RecordDecodeError`` if unreadable) and replayed
        as usual. On an error the records before the bad one stay applied."""
        last = self._last_offset.get()
        if base_offset < last:
            raise MetadataReplayError(f"replay at offset {base_offset} after offset {last}")
        offset = base_offset
        replay = self.replay
        split_partition = partition_wire.split_partition
        split_change = partition_wire.split_partition_change
        registrations = partition_wire.registration_cache()
        deltas = partition_wire.delta_cache()
        # The run of fast-path PartitionRecords not yet replayed, all of `topic_id`
        # (decoded from `topic_key`; one str per topic keeps a million keys small).
        run: list[tuple[int, PartitionRegistration]] = []
        topic_key, topic_id = b"", ""
        for data in records:
            split = split_partition(data)
            if split is not None:
                pid, key, tail = split
                new = registrations.get(tail) or partition_wire.registration_from_tail(tail)
                if new is not None:
                    if key != topic_key:
                        if run:
                            self._replay_run(topic_id, run, offset - step)
                            run = []
                        topic_id = _topic_id(key)
                        topic_key = key if topic_id else b""
                    if topic_id:
                        run.append((pid, new))
                        offset += step
                        continue
            elif (split := split_change(data)) is not None:
                pid, key, tail = split
                delta = deltas.get(tail) or partition_wire.delta_from_tail(tail)
                if delta is not None:
                    if run:
                        self._replay_run(topic_id, run, offset - step)
                        run = []
                    if key != topic_key:
                        topic_id = _topic_id(key)
                        topic_key = key if topic_id else b""
                    if topic_id:
                        self._replay_delta(topic_id, pid, delta, offset)
                        offset += step
                        continue
            if run:
                self._replay_run(topic_id, run, offset - step)
                run = []
            replay(decode_record(data), offset)
            offset += step
        if run:
            self._replay_run(topic_id, run, offset - step)
        return offset

    def _replay_delta(self, topic_id: str, partition_id: int, delta: PartitionDelta,
                      offset: int) -> None:
        """A fast-path PartitionChangeRecord at ``offset``: ``replay`` without the
        protobuf message."""
        self.replication.replay_offset = offset
        self.replication.replay_partition_delta(topic_id, partition_id, delta)
        if self._last_offset.get() != offset:
            self._last_offset.set(offset)

    def _replay_run(self, topic_id: str, run: list[tuple[int, PartitionRegistration]],
                    last_offset: int) -> None:
        """A run of one topic's PartitionRecords ending at ``last_offset``."""
        self.replication.replay_offset = last_offset
        self.replication.replay_registrations(topic_id, run)
        if self._last_offset.get() != last_offset:
            self._last_offset.set(last_offset)

    def revert_to_committed(self, committed_offset: int) -> None:
        """On losing leadership: durable state back to ``committed_offset`` (a live
        registry snapshot) and the heartbeat soft state dropped."""
        self.registry.revert_to_snapshot(committed_offset)
        self.cluster.clear_soft_state()
        assert self.last_applied_offset() <= committed_offset

    def last_applied_offset(self, epoch: int | None = None) -> int:
        """The offset of the last replayed record (-1 before any)."""
        return self._last_offset.get(epoch)

    # -- snapshots and images ---------------------------------------------------------

    def snapshot_records(self, epoch: int | None = None) -> list[MetadataRecord]:
        """The whole state (at ``epoch`` if given) as records, in the fixed order."""
        records = self.voters_snapshot_records(epoch)
        records += self.features.snapshot_records(epoch)
        records += self.cluster.snapshot_records(epoch)
        records += self.replication.snapshot_records(epoch)
        return records + self.tail_snapshot_records(epoch)

    def tail_snapshot_records(self, epoch: int | None = None, *, with_tier: bool = True
                              ) -> list[MetadataRecord]:
        """The records a snapshot ends with. It asks the level table too: after an
        unsafe downgrade, what the level no longer allows is left out (dropped for
        whoever loads the snapshot). `with_tier=False`: without the tier's objects (a
        restored cluster starts with a tier of its own)."""
        records = self.configs.snapshot_records(epoch) + self.access.snapshot_records(epoch)
        # 0: not finalized yet (before the bootstrap records): nothing to leave out.
        level = self.features.finalized_level(METADATA_VERSION, epoch) or LATEST_METADATA_VERSION
        if with_tier and enabled(Feature.REMOTE_TIER, level):
            records += self.tier.snapshot_records(
                epoch, with_hashes=enabled(Feature.TIER_HASH_CHAIN, level))
        if enabled(Feature.REQUEST_RESULTS, level):
            records += self.requests.snapshot_records(epoch)
        return records

    def to_image(self, epoch: int | None = None) -> MetadataImage:
        replication = self.replication
        topics = tuple(
            TopicImage(t.name, t.topic_id, replication.partitions(t.topic_id, epoch))
            for t in replication.list_topics(epoch)
        )
        return MetadataImage(
            features=tuple(self.features.finalized_levels(epoch).items()),
            brokers=self.cluster.brokers(epoch),
            topics=topics,
            configs=tuple((*key, value) for key, value in self.configs.all_configs(epoch).items()),
            acls=self.access.entries(epoch),
            remote_objects=tuple(self.tier.objects(epoch)),
            requests=tuple((p, r, o.method, o.time_ms, o.response, o.result_dropped)
                           for (p, r), o in self.requests.entries(epoch)),
        )

    def check_invariants(self, epoch: int | None = None) -> list[str]:
        """Violations of the replication invariants (empty when all hold):
        leader in ISR, ISR non-empty and within the replicas, no duplicate replicas,
        adding/removing within the replicas and disjoint, leaders usable brokers."""
        problems: list[str] = []
        brokers = {b.broker_id: b for b in self.cluster.brokers(epoch)}
        for topic in self.to_image(epoch).topics:
            for i, part in enumerate(topic.partitions):
                where = f"{topic.name}-{i}"
                replicas = set(part.replicas)
                if len(replicas) != len(part.replicas):
                    problems.append(f"{where}: duplicate replicas {part.replicas}")
                if not part.isr or not set(part.isr) <= replicas:
                    problems.append(
                        f"{where}: ISR {part.isr} not a non-empty subset of {part.replicas}"
                    )
                if part.leader != NO_LEADER:
                    broker = brokers.get(part.leader)
                    if part.leader not in part.isr:
                        problems.append(f"{where}: leader {part.leader} not in ISR {part.isr}")
                    if broker is None or broker.fenced or broker.in_controlled_shutdown:
                        problems.append(f"{where}: leader {part.leader} is not a usable broker")
                moving = set(part.adding_replicas) | set(part.removing_replicas)
                if not moving <= replicas or set(part.adding_replicas) & set(
                    part.removing_replicas
                ):
                    problems.append(f"{where}: bad reassignment state {part}")
        return problems


def _topic_id(key: bytes) -> str:
    """A fast-path record's topic id bytes as text; "" if they are not UTF-8 (the
    protobuf path then refuses the record)."""
    try:
        return key.decode("utf-8")
    except UnicodeDecodeError:
        return ""
