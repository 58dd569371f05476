"""The metadata record schema (``metadata.proto``) and what goes with it.

- wire classes: ``MetadataRecord`` (the envelope) and one message per record type,
  generated into ``metadata_pb2`` (regenerate with ``scripts/gen_proto.py``);
- ``encode_record`` / ``decode_record`` (``codec``), ``record_to_dict`` (``jsonify``);
- ``RECORD_TYPES``, ``make_record``, ``record_type`` (``registry``);
- attrs domain classes (``domain``) and their conversions (``convert``).
"""

from controller.records.codec import (
    RecordDecodeError,
    RecordEncodeError,
    decode_record,
    encode_record,
)
from controller.records.jsonify import record_from_dict, record_to_dict
from controller.records.metadata_pb2 import (
    AccessControlEntryRecord,
    BrokerFeature,
    BrokerIdList,
    BrokerRegistrationChangeRecord,
    ConfigRecord,
    FeatureLevelRecord,
    LeaderChangeRecord,
    Listener,
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
)
from controller.records.registry import (
    RECORD_TYPES,
    RecordPayload,
    RecordType,
    is_control_record,
    make_record,
    record_payload,
    record_type,
    which_record_type,
)

__all__ = [
    "RECORD_TYPES",
    "AccessControlEntryRecord",
    "BrokerFeature",
    "BrokerIdList",
    "BrokerRegistrationChangeRecord",
    "ConfigRecord",
    "FeatureLevelRecord",
    "LeaderChangeRecord",
    "Listener",
    "MetadataRecord",
    "NoOpRecord",
    "PartitionChangeRecord",
    "PartitionRecord",
    "RecordDecodeError",
    "RecordEncodeError",
    "RecordPayload",
    "RecordType",
    "RegisterBrokerRecord",
    "RemoteLogSegmentRecord",
    "RemoteLogSegmentStateChangeRecord",
    "RemoveAccessControlEntryRecord",
    "RemoveTopicRecord",
    "RequestResultRecord",
    "SnapshotFooterRecord",
    "SnapshotHeaderRecord",
    "TopicRecord",
    "UnregisterBrokerRecord",
    "VotersRecord",
    "decode_record",
    "encode_record",
    "is_control_record",
    "make_record",
    "record_from_dict",
    "record_payload",
    "record_to_dict",
    "record_type",
    "which_record_type",
]
