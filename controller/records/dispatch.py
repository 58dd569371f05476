"""The one record-type dispatch: a `MetadataRecord` to the handler method of its type.

Every consumer of records (the controller's state, the broker's delta and its
snapshot image builder) subclasses `RecordHandler` and overrides `on_<type>` for the
types it applies, each typed with its payload; `dispatch` calls the one the record
holds. A type a handler does not override goes to `unhandled`, which refuses it
(override `unhandled`, or the `on_<type>`, to skip types on purpose). A test checks
there is one method per record type of the schema.
"""

from __future__ import annotations

from controller.records import metadata_pb2 as pb
from controller.records.registry import RECORD_TYPES, record_type

_METHODS = {name: "on_" + name for name in RECORD_TYPES}


class UnhandledRecordError(ValueError):
    """A record of a type this handler does not apply."""


class RecordHandler:
    def unhandled(self, kind: str, offset: int) -> None:
        raise UnhandledRecordError(f"record at offset {offset} has unexpected type {kind!r}")

    def on_register_broker(self, record: pb.RegisterBrokerRecord, offset: int) -> None:
        self.unhandled("register_broker", offset)

    def on_unregister_broker(self, record: pb.UnregisterBrokerRecord, offset: int) -> None:
        self.unhandled("unregister_broker", offset)

    def on_broker_registration_change(self, record: pb.BrokerRegistrationChangeRecord, offset: int) -> None:
        self.unhandled("broker_registration_change", offset)

    def on_topic(self, record: pb.TopicRecord, offset: int) -> None:
        self.unhandled("topic", offset)

    def on_partition(self, record: pb.PartitionRecord, offset: int) -> None:
        self.unhandled("partition", offset)

    def on_partition_change(self, record: pb.PartitionChangeRecord, offset: int) -> None:
        self.unhandled("partition_change", offset)

    def on_remove_topic(self, record: pb.RemoveTopicRecord, offset: int) -> None:
        self.unhandled("remove_topic", offset)

    def on_config(self, record: pb.ConfigRecord, offset: int) -> None:
        self.unhandled("config", offset)

    def on_feature_level(self, record: pb.FeatureLevelRecord, offset: int) -> None:
        self.unhandled("feature_level", offset)

    def on_access_control_entry(self, record: pb.AccessControlEntryRecord, offset: int) -> None:
        self.unhandled("access_control_entry", offset)

    def on_remove_access_control_entry(self, record: pb.RemoveAccessControlEntryRecord, offset: int) -> None:
        self.unhandled("remove_access_control_entry", offset)

    def on_no_op(self, record: pb.NoOpRecord, offset: int) -> None:
        self.unhandled("no_op", offset)

    def on_remote_log_segment(self, record: pb.RemoteLogSegmentRecord, offset: int) -> None:
        self.unhandled("remote_log_segment", offset)

    def on_remote_log_segment_state_change(self, record: pb.RemoteLogSegmentStateChangeRecord, offset: int) -> None:
        self.unhandled("remote_log_segment_state_change", offset)

    def on_request_result(self, record: pb.RequestResultRecord, offset: int) -> None:
        self.unhandled("request_result", offset)

    def on_leader_change(self, record: pb.LeaderChangeRecord, offset: int) -> None:
        self.unhandled("leader_change", offset)

    def on_snapshot_header(self, record: pb.SnapshotHeaderRecord, offset: int) -> None:
        self.unhandled("snapshot_header", offset)

    def on_snapshot_footer(self, record: pb.SnapshotFooterRecord, offset: int) -> None:
        self.unhandled("snapshot_footer", offset)

    def on_voters(self, record: pb.VotersRecord, offset: int) -> None:
        self.unhandled("voters", offset)


def dispatch(record: pb.MetadataRecord, handler: RecordHandler, offset: int) -> None:
    """Call `handler`'s method for the record's type with its payload; ValueError if
    the record has no type set."""
    kind = record_type(record)
    getattr(handler, _METHODS[kind])(getattr(record, kind), offset)
