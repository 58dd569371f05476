"""PartitionRecord <-> PartitionRegistration, for replay and for snapshots.

Both directions run once per partition when a snapshot is written or loaded (a
million of them): records are built straight into their envelope, and equal
registrations are shared rather than converted afresh.
"""

from __future__ import annotations

from collections.abc import Sequence

from controller.records import RECORD_TYPES, MetadataRecord, PartitionRecord
from controller.records.convert import partition_from_record
from controller.records.domain import LeaderRecoveryState, PartitionRegistration

# Registrations are frozen values, and a new partition's is one of few: (replicas,
# ISR, leader) over the brokers, epochs 0. Replay shares one object per distinct
# value instead of converting every PartitionRecord afresh (creating a 100-partition
# topic replays 100 of them on every controller; a snapshot load a million). Cleared
# past the bound so odd values never pile up.
_REGISTRATIONS: dict[tuple[object, ...], PartitionRegistration] = {}
_REGISTRATIONS_MAX = 50_000
_RECOVERED = int(LeaderRecoveryState.RECOVERED)
_PARTITION_VERSION = RECORD_TYPES["partition"].version


def partition_records(
    topic_id: str, parts: Sequence[PartitionRegistration], first_id: int = 0
) -> list[MetadataRecord]:
    """``make_record(partition_to_record(part, ...))`` for each of ``parts`` (numbered
    from ``first_id``), built field by field into the envelope: snapshots write a
    million of these."""
    records: list[MetadataRecord] = []
    append = records.append
    version = _PARTITION_VERSION
    for partition_id, part in enumerate(parts, first_id):
        record = MetadataRecord(version=version)
        msg = record.partition
        msg.partition_id = partition_id
        msg.topic_id = topic_id
        msg.replicas.extend(part.replicas)
        msg.isr.extend(part.isr)
        if part.removing_replicas:
            msg.removing_replicas.extend(part.removing_replicas)
        if part.adding_replicas:
            msg.adding_replicas.extend(part.adding_replicas)
        msg.leader = part.leader
        if part.leader_recovery_state != _RECOVERED:
            msg.leader_recovery_state = int(part.leader_recovery_state)  # type: ignore[assignment]
        msg.leader_epoch = part.leader_epoch
        msg.partition_epoch = part.partition_epoch
        if part.elr:
            msg.eligible_leader_replicas.extend(part.elr)
        append(record)
    return records


def registration_of(record: PartitionRecord) -> PartitionRegistration:
    """``partition_from_record(record)``, shared with equal earlier ones."""
    if (record.removing_replicas or record.adding_replicas
            or record.leader_recovery_state != _RECOVERED or record.eligible_leader_replicas):
        return partition_from_record(record)
    key = (tuple(record.replicas[:]), tuple(record.isr[:]), record.leader,
           record.leader_epoch, record.partition_epoch)
    found = _REGISTRATIONS.get(key)
    if found is None:
        if len(_REGISTRATIONS) >= _REGISTRATIONS_MAX:
            _REGISTRATIONS.clear()
        found = _REGISTRATIONS[key] = partition_from_record(record)
    return found

