"""In-memory domain model built by replaying records: immutable attrs classes.

These are what the control managers and broker images hold. They know nothing about
bytes or protobuf encoding (conversions live in ``controller.records.convert``); the
one exception is ``PartitionDelta.of``, which reads a PartitionChangeRecord because
that record *is* the delta.
"""

from __future__ import annotations

import enum

import attrs

from controller.records import metadata_pb2 as pb

# Leader id of a partition that has no leader.
NO_LEADER = -1


class LeaderRecoveryState(enum.IntEnum):
    """Whether a partition's leader holds all committed data (values = wire values)."""

    # Elected cleanly from the ISR.
    RECOVERED = pb.LEADER_RECOVERY_STATE_RECOVERED
    # Elected uncleanly; still recovering.
    RECOVERING = pb.LEADER_RECOVERY_STATE_RECOVERING


@attrs.frozen
class Listener:
    """A network endpoint of a broker."""

    name: str
    host: str
    port: int
    security_protocol: str


@attrs.frozen
class FeatureRange:
    """A feature's supported level range, both ends inclusive."""

    name: str
    min_version: int
    max_version: int


@attrs.frozen
class BrokerRegistration:
    """A registered broker, as its latest registration (and changes) left it."""

    broker_id: int
    # Uuid of the broker process incarnation; a restart registers a new one.
    incarnation_id: str
    # Offset of the registration record in the log.
    broker_epoch: int
    listeners: tuple[Listener, ...] = ()
    rack: str | None = None
    fenced: bool = True
    in_controlled_shutdown: bool = False
    supported_features: tuple[FeatureRange, ...] = ()

    def apply(self, change: pb.BrokerRegistrationChangeRecord) -> BrokerRegistration:
        """The registration after ``change``; flags marked UNCHANGED stay as they are.

        The caller checks ``change.broker_epoch`` against ``broker_epoch`` (a change
        aimed at an older incarnation must be ignored, which is a replay decision).
        """
        fenced = self.fenced
        if change.fenced == pb.FENCE_CHANGE_FENCE:
            fenced = True
        elif change.fenced == pb.FENCE_CHANGE_UNFENCE:
            fenced = False
        shutting_down = self.in_controlled_shutdown or (
            change.in_controlled_shutdown == pb.CONTROLLED_SHUTDOWN_CHANGE_ENTER
        )
        return attrs.evolve(self, fenced=fenced, in_controlled_shutdown=shutting_down)


@attrs.frozen
class Topic:
    """A topic: its name and its identity."""

    name: str
    # Uuid; a topic deleted and re-created under the same name gets a new one.
    topic_id: str
    # The log offset of the topic's last change (created, partitions added): its
    # version for conditional writes. Not part of its identity.
    mod_offset: int = attrs.field(default=-1, eq=False)


@attrs.frozen
class PartitionRegistration:
    """The replication state of one partition (keyed elsewhere by topic id + index)."""

    # All replicas in preference order; the first is the preferred leader.
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    removing_replicas: tuple[int, ...] = ()
    adding_replicas: tuple[int, ...] = ()
    leader: int = NO_LEADER
    leader_recovery_state: LeaderRecoveryState = LeaderRecoveryState.RECOVERED
    # Incremented when the leader changes.
    leader_epoch: int = 0
    # Incremented on every change.
    partition_epoch: int = 0
    # Eligible leader replicas (KIP-966): out of the ISR, but holding every record
    # below the high watermark (they left while the ISR was below min ISR).
    # Invariant: disjoint from the ISR, within the replicas.
    elr: tuple[int, ...] = ()

    @property
    def has_leader(self) -> bool:
        return self.leader != NO_LEADER

    def merge(self, change: pb.PartitionChangeRecord) -> PartitionRegistration:
        """The registration after replaying ``change`` (``apply`` of its delta)."""
        return self.apply(PartitionDelta.of(change))

    def apply(self, delta: PartitionDelta) -> PartitionRegistration:
        """The registration after a PartitionChangeRecord stating ``delta``.

        Only the fields the delta sets are applied. Like Kafka's KRaft, the record
        carries no epochs; replay derives them so every replica of the log computes
        the same ones:
        - ``partition_epoch`` + 1, always (every record is a change);
        - ``leader_epoch`` + 1 when the record states a leader, as Kafka's replay:
          a new one, or the current one again, which only a change removing a
          replica writes (metadata.version 7+, `partition_change`), so that the
          removed replica and any leader that missed the removal see a new epoch.
          Below level 7 no writer states the current leader.
        """
        leader = self.leader if delta.leader is None else delta.leader
        return PartitionRegistration(
            replicas=self.replicas if delta.replicas is None else delta.replicas,
            isr=self.isr if delta.isr is None else delta.isr,
            removing_replicas=(self.removing_replicas if delta.removing_replicas is None
                               else delta.removing_replicas),
            adding_replicas=(self.adding_replicas if delta.adding_replicas is None
                             else delta.adding_replicas),
            leader=leader,
            leader_recovery_state=(self.leader_recovery_state
                                   if delta.leader_recovery_state is None
                                   else delta.leader_recovery_state),
            leader_epoch=self.leader_epoch + (delta.leader is not None),
            partition_epoch=self.partition_epoch + 1,
            elr=self.elr if delta.elr is None else delta.elr,
        )


@attrs.frozen
class PartitionDelta:
    """What one PartitionChangeRecord states; None: unchanged. A list that is set and
    empty is cleared, which is why the record wraps its lists (absent != empty)."""

    isr: tuple[int, ...] | None = None
    leader: int | None = None
    replicas: tuple[int, ...] | None = None
    removing_replicas: tuple[int, ...] | None = None
    adding_replicas: tuple[int, ...] | None = None
    leader_recovery_state: LeaderRecoveryState | None = None
    elr: tuple[int, ...] | None = None

    @classmethod
    def of(cls, change: pb.PartitionChangeRecord) -> PartitionDelta:
        """``change``'s delta; ValueError for a recovery state this code does not know."""
        has = change.HasField
        return cls(
            isr=tuple(change.isr.ids) if has("isr") else None,
            leader=change.leader if has("leader") else None,
            replicas=tuple(change.replicas.ids) if has("replicas") else None,
            removing_replicas=(tuple(change.removing_replicas.ids)
                               if has("removing_replicas") else None),
            adding_replicas=(tuple(change.adding_replicas.ids)
                             if has("adding_replicas") else None),
            leader_recovery_state=(LeaderRecoveryState(change.leader_recovery_state)
                                   if has("leader_recovery_state") else None),
            elr=(tuple(change.eligible_leader_replicas.ids)
                 if has("eligible_leader_replicas") else None),
        )
