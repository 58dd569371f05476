"""The table of record types and the envelope helpers built on it.

A record's type name is the name of its member in ``MetadataRecord``'s ``record``
oneof (``"register_broker"``, ``"partition_change"``, ...). ``RECORD_TYPES`` maps each
name to its payload message class and the newest payload version this code writes and
understands.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

import attrs

from controller.records import metadata_pb2 as pb

# Any payload message that can sit in the envelope's oneof.
RecordPayload = (
    pb.RegisterBrokerRecord
    | pb.UnregisterBrokerRecord
    | pb.BrokerRegistrationChangeRecord
    | pb.TopicRecord
    | pb.PartitionRecord
    | pb.PartitionChangeRecord
    | pb.RemoveTopicRecord
    | pb.ConfigRecord
    | pb.FeatureLevelRecord
    | pb.AccessControlEntryRecord
    | pb.RemoveAccessControlEntryRecord
    | pb.NoOpRecord
    | pb.RemoteLogSegmentRecord
    | pb.RemoteLogSegmentStateChangeRecord
    | pb.RequestResultRecord
    | pb.LeaderChangeRecord
    | pb.SnapshotHeaderRecord
    | pb.SnapshotFooterRecord
    | pb.VotersRecord
)


@attrs.frozen
class RecordType:
    """One member of the envelope's ``record`` oneof."""

    # The oneof member name, which is also the record's type name.
    name: str
    # The payload message class.
    payload_class: type[RecordPayload]
    # Newest payload version this code writes and can read.
    version: int
    # Raft control record: lives in control batches and is never replayed into the
    # metadata image.
    is_control: bool = False


_TABLE = (
    RecordType("register_broker", pb.RegisterBrokerRecord, 1),
    RecordType("unregister_broker", pb.UnregisterBrokerRecord, 1),
    RecordType("broker_registration_change", pb.BrokerRegistrationChangeRecord, 1),
    RecordType("topic", pb.TopicRecord, 1),
    RecordType("partition", pb.PartitionRecord, 1),
    RecordType("partition_change", pb.PartitionChangeRecord, 1),
    RecordType("remove_topic", pb.RemoveTopicRecord, 1),
    RecordType("config", pb.ConfigRecord, 1),
    RecordType("feature_level", pb.FeatureLevelRecord, 1),
    RecordType("access_control_entry", pb.AccessControlEntryRecord, 1),
    RecordType("remove_access_control_entry", pb.RemoveAccessControlEntryRecord, 1),
    RecordType("no_op", pb.NoOpRecord, 1),
    RecordType("remote_log_segment", pb.RemoteLogSegmentRecord, 1),
    RecordType("remote_log_segment_state_change", pb.RemoteLogSegmentStateChangeRecord, 1),
    RecordType("request_result", pb.RequestResultRecord, 1),
    RecordType("leader_change", pb.LeaderChangeRecord, 1, is_control=True),
    RecordType("snapshot_header", pb.SnapshotHeaderRecord, 1, is_control=True),
    RecordType("snapshot_footer", pb.SnapshotFooterRecord, 1, is_control=True),
    RecordType("voters", pb.VotersRecord, 1, is_control=True),
)

RECORD_TYPES: Mapping[str, RecordType] = MappingProxyType({t.name: t for t in _TABLE})

_BY_PAYLOAD_CLASS: Mapping[type[RecordPayload], RecordType] = MappingProxyType(
    {t.payload_class: t for t in _TABLE}
)


def record_type(rec: pb.MetadataRecord) -> str:
    """The record's type name (its oneof member); ValueError if none is set."""
    name = rec.WhichOneof("record")
    if name is None:
        raise ValueError("metadata record has no record type set (empty oneof)")
    return name


# The name docs/architecture.md uses for the same function.
which_record_type = record_type


def record_payload(rec: pb.MetadataRecord) -> RecordPayload:
    """The payload message inside the envelope; ValueError if none is set."""
    payload: RecordPayload = getattr(rec, record_type(rec))
    return payload


def is_control_record(rec: pb.MetadataRecord) -> bool:
    """True for Raft control records (leader change, snapshot header/footer)."""
    return RECORD_TYPES[record_type(rec)].is_control


def make_record(payload: RecordPayload, version: int | None = None) -> pb.MetadataRecord:
    """Wrap ``payload`` in an envelope, setting the oneof member matching its type.

    ``version`` defaults to the type's current version. The payload is copied.
    """
    kind = _BY_PAYLOAD_CLASS.get(type(payload))
    if kind is None:
        raise TypeError(f"{type(payload).__name__} is not a metadata record payload")
    rec = pb.MetadataRecord(version=kind.version if version is None else version)
    # getattr returns the (unset) submessage; CopyFrom alone would leave an empty
    # payload (NoOpRecord) unmarked, so SetInParent marks the member as present.
    member = getattr(rec, kind.name)
    member.SetInParent()
    member.CopyFrom(payload)
    return rec
