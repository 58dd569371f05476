"""One record's bytes -> the record-level columns of a row (key columns and JSON).

`record_columns(data)` returns `(record_type, version, topic_id, topic_name,
partition_id, broker_id, resource_type, resource_name, record_json)`.

Why not `record_to_dict` + `json.dumps` for every record: protobuf's `MessageToDict`
costs tens of microseconds a record, which alone would cap a scan near 50k records/s
per core. The hot record types (the ones a busy log is made of: partition changes,
fencing, no-ops, ...) get hand-written JSON here that is equal, key for key, to
`json.dumps(record_to_dict(rec))` (tests/analytics/test_rows.py checks every record
of the scripted log); rare types take the generic path.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from controller.records import metadata_pb2 as pb
from controller.records.codec import RecordDecodeError
from controller.records.jsonify import record_to_dict
from controller.records.registry import RECORD_TYPES

RecordColumns = tuple[
    str, int, str | None, str | None, int | None, int | None, str | None, str | None, str
]

_dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode
_VERSIONS = {name: t.version for name, t in RECORD_TYPES.items()}

_CONFIG_RESOURCE = {
    pb.CONFIG_RESOURCE_TYPE_TOPIC: "topic",
    pb.CONFIG_RESOURCE_TYPE_BROKER: "broker",
    pb.CONFIG_RESOURCE_TYPE_CLUSTER: "cluster",
}
_ACL_RESOURCE = {
    v: name.removeprefix("ACL_RESOURCE_TYPE_").lower()
    for name, v in pb.AclResourceType.items()
}
_FENCE = {v: name for name, v in pb.FenceChange.items()}
_SHUTDOWN = {v: name for name, v in pb.ControlledShutdownChange.items()}
_RECOVERY = {v: name for name, v in pb.LeaderRecoveryState.items()}
_CONFIG_TYPE_NAMES = {v: name for name, v in pb.ConfigResourceType.items()}

# Quoted JSON strings of topic ids: a busy log names the same few thousand topics
# over and over, and quoting is a measurable share of a partition change's cost.
_quoted: dict[str, str] = {}


def _q(text: str) -> str:
    out = _quoted.get(text)
    if out is None:
        out = _dumps(text)
        if len(_quoted) < 100_000:
            _quoted[text] = out
    return out


def _ids(values: Any) -> str:
    # repr of a list of ints is one C call; JSON wants no spaces.
    return repr(list(values)).replace(" ", "")


_HEADS: dict[tuple[str, int], str] = {}


def _head(kind: str, version: int) -> str:
    head = _HEADS.get((kind, version))
    if head is None:
        head = _HEADS[(kind, version)] = f'{{"type":"{kind}","version":{version},"fields":'
    return head


def _generic(rec: pb.MetadataRecord) -> str:
    return _dumps(record_to_dict(rec))


# Field name -> JSON key prefix of a PartitionChangeRecord's BrokerIdList fields.
_ID_LISTS = {
    "isr": ',"isr":{"ids":',
    "replicas": ',"replicas":{"ids":',
    "removing_replicas": ',"removing_replicas":{"ids":',
    "adding_replicas": ',"adding_replicas":{"ids":',
}


def _partition_change(rec: pb.MetadataRecord, version: int) -> RecordColumns:
    p = rec.partition_change
    parts = [_head("partition_change", version),
             f'{{"partition_id":{p.partition_id},"topic_id":{_q(p.topic_id)}']
    # ListFields: one C call listing just the present fields, in field-number order
    # (cheaper than a HasField per optional field on the hottest record type).
    for field, value in p.ListFields():
        name = field.name
        prefix = _ID_LISTS.get(name)
        if prefix is not None:
            parts.append(prefix + _ids(value.ids) + "}")
        elif name == "leader":
            parts.append(f',"leader":{value}')
        elif name == "leader_recovery_state":
            parts.append(f',"leader_recovery_state":"{_RECOVERY[value]}"')
    parts.append("}}")
    return ("partition_change", version, p.topic_id, None, p.partition_id, None, None, None,
            "".join(parts))


def _partition(rec: pb.MetadataRecord, version: int) -> RecordColumns:
    p = rec.partition
    text = (_head("partition", version)
            + f'{{"partition_id":{p.partition_id},"topic_id":{_q(p.topic_id)}'
            f',"replicas":{_ids(p.replicas)},"isr":{_ids(p.isr)}'
            f',"removing_replicas":{_ids(p.removing_replicas)}'
            f',"adding_replicas":{_ids(p.adding_replicas)},"leader":{p.leader}'
            f',"leader_recovery_state":"{_RECOVERY[p.leader_recovery_state]}"'
            f',"leader_epoch":{p.leader_epoch},"partition_epoch":{p.partition_epoch}}}}}')
    return ("partition", version, p.topic_id, None, p.partition_id, None, None, None, text)


def _registration_change(rec: pb.MetadataRecord, version: int) -> RecordColumns:
    c = rec.broker_registration_change
    text = (_head("broker_registration_change", version)
            + f'{{"broker_id":{c.broker_id},"broker_epoch":{c.broker_epoch}'
            f',"fenced":"{_FENCE[c.fenced]}"'
            f',"in_controlled_shutdown":"{_SHUTDOWN[c.in_controlled_shutdown]}"}}}}')
    return ("broker_registration_change", version, None, None, None, c.broker_id, None, None,
            text)


def _no_op(rec: pb.MetadataRecord, version: int) -> RecordColumns:
    return ("no_op", version, None, None, None, None, None, None,
            _head("no_op", version) + "{}}")


def _topic(rec: pb.MetadataRecord, version: int) -> RecordColumns:
    t = rec.topic
    text = _head("topic", version) + f'{{"name":{_dumps(t.name)},"topic_id":{_q(t.topic_id)}}}}}'
    return ("topic", version, t.topic_id, t.name, None, None, None, None, text)


def _remove_topic(rec: pb.MetadataRecord, version: int) -> RecordColumns:
    tid = rec.remove_topic.topic_id
    text = _head("remove_topic", version) + f'{{"topic_id":{_q(tid)}}}}}'
    return ("remove_topic", version, tid, None, None, None, None, None, text)


def _config(rec: pb.MetadataRecord, version: int) -> RecordColumns:
    c = rec.config
    kind = _CONFIG_RESOURCE.get(c.resource_type)
    value = f',"value":{_dumps(c.value)}' if c.HasField("value") else ""
    text = (_head("config", version)
            + f'{{"resource_type":"{_CONFIG_TYPE_NAMES[c.resource_type]}"'
            f',"resource_name":{_dumps(c.resource_name)},"name":{_dumps(c.name)}{value}}}}}')
    topic_name = c.resource_name if kind == "topic" else None
    broker_id = (int(c.resource_name) if kind == "broker" and c.resource_name.isdigit()
                 else None)
    return ("config", version, None, topic_name, None, broker_id, kind, c.resource_name, text)


def _broker_only(field: str) -> Callable[[pb.MetadataRecord, int], RecordColumns]:
    def columns(rec: pb.MetadataRecord, version: int) -> RecordColumns:
        payload = getattr(rec, field)
        return (field, version, None, None, None, payload.broker_id, None, None, _generic(rec))
    return columns


def _feature_level(rec: pb.MetadataRecord, version: int) -> RecordColumns:
    name = rec.feature_level.name
    return ("feature_level", version, None, None, None, None, "feature", name, _generic(rec))


def _acl(rec: pb.MetadataRecord, version: int) -> RecordColumns:
    a = rec.access_control_entry
    return ("access_control_entry", version, None, None, None, None,
            "acl_" + _ACL_RESOURCE.get(a.resource_type, "unspecified"), a.resource_name,
            _generic(rec))


def _plain(field: str) -> Callable[[pb.MetadataRecord, int], RecordColumns]:
    def columns(rec: pb.MetadataRecord, version: int) -> RecordColumns:
        return (field, version, None, None, None, None, None, None, _generic(rec))
    return columns


_BY_TYPE: dict[str, Callable[[pb.MetadataRecord, int], RecordColumns]] = {
    "partition_change": _partition_change,
    "partition": _partition,
    "broker_registration_change": _registration_change,
    "no_op": _no_op,
    "topic": _topic,
    "remove_topic": _remove_topic,
    "config": _config,
    "register_broker": _broker_only("register_broker"),
    "unregister_broker": _broker_only("unregister_broker"),
    "feature_level": _feature_level,
    "access_control_entry": _acl,
    "remove_access_control_entry": _plain("remove_access_control_entry"),
    "leader_change": _plain("leader_change"),
    "snapshot_header": _plain("snapshot_header"),
    "snapshot_footer": _plain("snapshot_footer"),
}
assert set(_BY_TYPE) == set(RECORD_TYPES), "a record type without a row mapping"


def record_columns(data: bytes) -> RecordColumns:
    """The record-level columns of one record; `RecordDecodeError` if it is unreadable.

    The checks are `decode_record`'s (one type set, a version this code knows),
    inlined: this runs once per record of the log.
    """
    rec = pb.MetadataRecord()
    try:
        rec.ParseFromString(data)
    except Exception as exc:  # protobuf raises DecodeError (and, on some inputs, others)
        raise RecordDecodeError(f"malformed metadata record ({len(data)} bytes): {exc}") from exc
    kind = rec.WhichOneof("record")
    if kind is None:
        raise RecordDecodeError(f"no record type set ({len(data)} bytes; newer schema?)")
    version = rec.version
    if not 1 <= version <= _VERSIONS[kind]:
        raise RecordDecodeError(f"unsupported version {version} of record type {kind!r}")
    return _BY_TYPE[kind](rec, version)
