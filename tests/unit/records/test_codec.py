"""Envelope, encode/decode and JSON view of every record type."""

from __future__ import annotations

import json

import pytest
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from hypothesis import given
from hypothesis import strategies as st

from controller.records import (
    RECORD_TYPES,
    MetadataRecord,
    NoOpRecord,
    PartitionChangeRecord,
    RecordDecodeError,
    RecordEncodeError,
    TopicRecord,
    decode_record,
    encode_record,
    is_control_record,
    make_record,
    record_from_dict,
    record_payload,
    record_to_dict,
    record_type,
    which_record_type,
)
from controller.records import metadata_pb2 as pb
from tests.unit.records.strategies import PAYLOADS, any_payload


def test_record_types_table_matches_the_oneof() -> None:
    oneof = pb.MetadataRecord.DESCRIPTOR.oneofs_by_name["record"]
    from_schema = {
        field.name: field.message_type.full_name
        for field in oneof.fields
        if field.message_type is not None
    }
    assert len(from_schema) == len(oneof.fields), "every oneof member is a message"
    from_table = {name: t.payload_class.DESCRIPTOR.full_name for name, t in RECORD_TYPES.items()}
    assert from_table == from_schema
    assert set(PAYLOADS) == set(from_schema), "every record type needs a test strategy"


def test_control_records_are_flagged() -> None:
    control = {name for name, t in RECORD_TYPES.items() if t.is_control}
    assert control == {"leader_change", "snapshot_header", "snapshot_footer", "voters"}
    assert is_control_record(make_record(pb.LeaderChangeRecord(leader_id=1)))
    assert not is_control_record(make_record(NoOpRecord()))


@given(any_payload)
def test_every_record_type_round_trips(payload: pb.NoOpRecord) -> None:
    rec = make_record(payload)
    name = record_type(rec)
    assert RECORD_TYPES[name].payload_class is type(payload)
    assert rec.version == RECORD_TYPES[name].version
    decoded = decode_record(encode_record(rec))
    assert decoded == rec
    assert which_record_type(decoded) == name
    assert record_payload(decoded) == payload


@given(any_payload)
def test_decode_accepts_bytearray_and_memoryview(payload: pb.NoOpRecord) -> None:
    data = encode_record(make_record(payload))
    assert decode_record(bytearray(data)) == decode_record(memoryview(data))


@given(any_payload)
def test_record_to_dict_is_json_and_inverts(payload: pb.NoOpRecord) -> None:
    rec = make_record(payload)
    view = record_to_dict(rec)
    assert view["type"] == record_type(rec)
    assert view["version"] == rec.version
    assert json.loads(json.dumps(view)) == view
    assert record_from_dict(view) == rec


def test_record_to_dict_is_readable() -> None:
    rec = make_record(
        pb.BrokerRegistrationChangeRecord(
            broker_id=3, broker_epoch=2**40, fenced=pb.FENCE_CHANGE_FENCE
        )
    )
    assert record_to_dict(rec) == {
        "type": "broker_registration_change",
        "version": 1,
        "fields": {
            "broker_id": 3,
            "broker_epoch": 2**40,  # a JSON number, not protobuf's quoted int64
            "fenced": "FENCE_CHANGE_FENCE",
            "in_controlled_shutdown": "CONTROLLED_SHUTDOWN_CHANGE_UNCHANGED",
        },
    }


def test_record_to_dict_keeps_absent_distinct_from_empty() -> None:
    change = PartitionChangeRecord(partition_id=0, topic_id="t", isr=pb.BrokerIdList(ids=[]))
    fields = record_to_dict(make_record(change))["fields"]
    assert fields["isr"] == {"ids": []}
    assert "leader" not in fields
    assert "replicas" not in fields


def test_make_record_marks_an_empty_payload_present() -> None:
    rec = make_record(NoOpRecord())
    assert record_type(rec) == "no_op"
    assert decode_record(encode_record(rec)) == rec


def test_make_record_rejects_non_payloads() -> None:
    with pytest.raises(TypeError, match="Listener is not a metadata record payload"):
        make_record(pb.Listener())  # type: ignore[arg-type]


def test_record_type_of_an_empty_envelope_is_an_error() -> None:
    with pytest.raises(ValueError, match="no record type"):
        record_type(MetadataRecord())


# --- errors --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "data",
    [
        b"\xff\xff\xff",  # field 0 / bad varint
        b"\x0a\x05abc",  # length-delimited field longer than the data
        b"\x08",  # varint missing
        b"\x82\x01\x03\xff\xfe\xfd",  # remove_topic (field 16) holding a broken varint
    ],
)
def test_decode_rejects_garbage(data: bytes) -> None:
    with pytest.raises(RecordDecodeError, match="malformed metadata record"):
        decode_record(data)


def test_decode_rejects_empty_record() -> None:
    with pytest.raises(RecordDecodeError, match="no record type set"):
        decode_record(b"")
    with pytest.raises(RecordDecodeError, match="no record type set"):
        decode_record(MetadataRecord(version=1).SerializeToString())


@given(any_payload, st.data())
def test_decode_rejects_every_truncation(payload: pb.NoOpRecord, data: st.DataObject) -> None:
    encoded = encode_record(make_record(payload))
    cut = data.draw(st.integers(0, len(encoded) - 1))
    # The payload is the last, length-delimited field, so no strict prefix is valid.
    with pytest.raises(RecordDecodeError):
        decode_record(encoded[:cut])


def test_decode_rejects_invalid_utf8() -> None:
    bad = make_record(TopicRecord(name="x", topic_id="y")).SerializeToString()
    bad = bad.replace(b"\x01x", b"\x01\xff")
    with pytest.raises(RecordDecodeError, match="malformed"):
        decode_record(bad)


def _future_schema_record_bytes() -> bytes:
    """Bytes written by a newer schema whose oneof has a member we do not know."""
    file_proto = descriptor_pb2.FileDescriptorProto()
    pb.DESCRIPTOR.CopyToProto(file_proto)
    file_proto.name = "future/metadata.proto"
    new_type = file_proto.message_type.add(name="QuotaRecord")
    new_type.field.add(
        name="entity", number=1, type=descriptor_pb2.FieldDescriptorProto.TYPE_STRING
    )
    envelope = next(m for m in file_proto.message_type if m.name == "MetadataRecord")
    envelope.field.add(
        name="quota",
        number=99,
        type=descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE,
        type_name=".metakraft.metadata.v1.QuotaRecord",
        oneof_index=0,
    )
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file_proto)
    future_envelope = message_factory.GetMessageClass(
        pool.FindMessageTypeByName("metakraft.metadata.v1.MetadataRecord")
    )
    future_quota = message_factory.GetMessageClass(
        pool.FindMessageTypeByName("metakraft.metadata.v1.QuotaRecord")
    )
    data: bytes = future_envelope(version=1, quota=future_quota(entity="user")).SerializeToString()
    return data


def test_unknown_record_type_from_a_future_schema_is_refused() -> None:
    with pytest.raises(RecordDecodeError, match=r"unknown record type: .*number\(s\) 99 "):
        decode_record(_future_schema_record_bytes())


def test_unknown_fields_inside_a_known_record_survive() -> None:
    # A newer schema may add fields to an existing record: readers keep them and
    # writing the record back preserves them.
    topic = make_record(TopicRecord(name="t", topic_id="u"))
    extra_field = b"\x18\x07"  # field 3, varint 7: not in TopicRecord today
    payload = topic.topic.SerializeToString() + extra_field
    data = b"\x08\x01" + b"\x6a" + bytes([len(payload)]) + payload  # field 13 = topic
    decoded = decode_record(data)
    assert decoded.topic.name == "t"
    assert extra_field in encode_record(decoded)


@pytest.mark.parametrize("version", [0, 2])
def test_unsupported_versions_are_refused(version: int) -> None:
    rec = make_record(NoOpRecord(), version=version)
    with pytest.raises(RecordDecodeError, match=f"unsupported version {version} of record type"):
        decode_record(rec.SerializeToString())
    with pytest.raises(RecordEncodeError, match="unsupported version"):
        encode_record(rec)


def test_encode_refuses_an_empty_envelope() -> None:
    with pytest.raises(RecordEncodeError, match="no record type set"):
        encode_record(MetadataRecord(version=1))


def test_record_from_dict_errors() -> None:
    with pytest.raises(RecordDecodeError, match="unknown record type 'quota'"):
        record_from_dict({"type": "quota", "version": 1, "fields": {}})
    with pytest.raises(RecordDecodeError, match="lacks"):
        record_from_dict({"type": "no_op"})
    with pytest.raises(RecordDecodeError, match="bad fields"):
        record_from_dict({"type": "topic", "version": 1, "fields": {"nope": 1}})


def test_the_record_handler_has_one_method_per_record_type() -> None:
    from controller.records.dispatch import RecordHandler, UnhandledRecordError, dispatch

    methods = {name[3:] for name in vars(RecordHandler) if name.startswith("on_")}
    assert methods == set(RECORD_TYPES)
    with pytest.raises(UnhandledRecordError, match="unexpected type 'no_op'"):
        dispatch(make_record(pb.NoOpRecord()), RecordHandler(), 7)
