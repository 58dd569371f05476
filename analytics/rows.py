"""One record's bytes -> the record-level columns of a row (key columns and JSON).

`record_columns(data)` returns `(record_type, version, topic_id, topic_name,
partition_id, broker_id, resource_type, resource_name, record_json, partition_fields,
event_fields)`, where `partition_fields` is None except on Partition and
PartitionChange records: `(leader, isr, replicas, adding_replicas, removing_replicas,
leader_recovery_state, leader_epoch, partition_epoch, eligible_leader_replicas)` as the
record sets them (None =
not set by a change record; id lists are tuples), and `event_fields` is None except
on broker and config records: `(broker_epoch, incarnation_id, fenced,
in_controlled_shutdown, config_key, config_value)` (see `analytics.schema`). The
reader turns them into typed columns, so the audit reads partition state, broker
events and config changes without parsing JSON. Records with equal bytes share one
`partition_fields` object (the caches below), which the reader uses to build those
columns once per distinct value.

Why not `record_to_dict` + `json.dumps` for every record: protobuf's `MessageToDict`
costs tens of microseconds a record, which alone would cap a scan near 50k records/s
per core. The hot record types (the ones a busy log is made of: partition changes,
fencing, no-ops, ...) get hand-written JSON here that is equal, key for key, to
`json.dumps(record_to_dict(rec))` (tests/analytics/test_reader.py checks every record
of the scripted log, and the fast paths against the protobuf path on edge cases);
rare types take the generic path.

`rows_of(records)` is the reader's loop: PartitionChange records are decoded from
the wire directly and the rest is looked up in caches of exact results (see "the
fast paths" below); anything else, and anything unexpected, takes the protobuf path.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from controller.records import metadata_pb2 as pb
from controller.records.codec import RecordDecodeError
from controller.records.jsonify import record_to_dict
from controller.records.registry import RECORD_TYPES

Ids = tuple[int, ...]
# leader, isr, replicas, adding, removing, recovery state, leader epoch, partition epoch,
# eligible leader replicas.
PartitionFields = tuple[
    int | None, Ids | None, Ids | None, Ids | None, Ids | None, str | None, int | None,
    int | None, Ids | None
]
# broker_epoch, incarnation_id, fenced, in_controlled_shutdown, config_key, config_value.
EventFields = tuple[int | None, str | None, bool | None, bool | None, str | None, str | None]
RecordColumns = tuple[
    str, int, str | None, str | None, int | None, int | None, str | None, str | None,
    str | None, PartitionFields | None, EventFields | None
]
# Positions in PartitionFields of the BrokerIdList fields of a PartitionChangeRecord.
_LIST_SLOT = {"isr": 1, "replicas": 2, "adding_replicas": 3, "removing_replicas": 4,
              "eligible_leader_replicas": 8}

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
_FENCED_AFTER = {pb.FENCE_CHANGE_FENCE: True, pb.FENCE_CHANGE_UNFENCE: False}
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
    "eligible_leader_replicas": ',"eligible_leader_replicas":{"ids":',
}


_CHANGE_KEYS = frozenset({"partition_id", "topic_id"})


def _change_tail(p: pb.PartitionChangeRecord, *,
                 keys_allowed: bool) -> tuple[str, PartitionFields] | None:
    """The JSON of a PartitionChangeRecord's fields after topic_id, and those fields
    typed; None for a field this code does not print (an unknown recovery state, or
    partition_id/topic_id when not `keys_allowed`: the wire fast path has already
    read them, and a restated one would override them)."""
    parts: list[str] = []
    typed: list[Any] = [None] * 9
    # ListFields: one C call listing just the present fields, in field-number order
    # (cheaper than a HasField per optional field on the hottest record type).
    for field, value in p.ListFields():
        name = field.name
        prefix = _ID_LISTS.get(name)
        if prefix is not None:
            parts.append(prefix + _ids(value.ids) + "}")
            slot = _LIST_SLOT.get(name)
            if slot is not None:
                typed[slot] = tuple(value.ids)
        elif name == "leader":
            parts.append(f',"leader":{value}')
            typed[0] = value
        elif name == "leader_recovery_state" and value in _RECOVERY:
            parts.append(f',"leader_recovery_state":"{_RECOVERY[value]}"')
            typed[5] = _RECOVERY[value]
        elif not (keys_allowed and name in _CHANGE_KEYS):
            return None
    return "".join(parts), _partition_fields(typed)


def _partition_change(rec: pb.MetadataRecord, version: int) -> RecordColumns:
    p = rec.partition_change
    tail = _change_tail(p, keys_allowed=True)
    if tail is None:
        raise RecordDecodeError(f"partition_change: unknown leader_recovery_state "
                                f"{p.leader_recovery_state}")
    text = (f'{_head("partition_change", version)}{{"partition_id":{p.partition_id},'
            f'"topic_id":{_q(p.topic_id)}{tail[0]}}}}}')
    return ("partition_change", version, p.topic_id, None, p.partition_id, None, None, None,
            text, tail[1], None)


def _partition(rec: pb.MetadataRecord, version: int) -> RecordColumns:
    p = rec.partition
    text = (_head("partition", version)
            + f'{{"partition_id":{p.partition_id},"topic_id":{_q(p.topic_id)}'
            f',"replicas":{_ids(p.replicas)},"isr":{_ids(p.isr)}'
            f',"removing_replicas":{_ids(p.removing_replicas)}'
            f',"adding_replicas":{_ids(p.adding_replicas)},"leader":{p.leader}'
            f',"leader_recovery_state":"{_RECOVERY[p.leader_recovery_state]}"'
            f',"leader_epoch":{p.leader_epoch},"partition_epoch":{p.partition_epoch}'
            f',"eligible_leader_replicas":{_ids(p.eligible_leader_replicas)}}}}}')
    typed: PartitionFields = (
        p.leader, tuple(p.isr), tuple(p.replicas), tuple(p.adding_replicas),
        tuple(p.removing_replicas), _RECOVERY[p.leader_recovery_state], p.leader_epoch,
        p.partition_epoch, tuple(p.eligible_leader_replicas))
    return ("partition", version, p.topic_id, None, p.partition_id, None, None, None, text,
            typed, None)


def _partition_fields(values: list[Any]) -> PartitionFields:
    leader, isr, replicas, adding, removing, recovery, leader_epoch, partition_epoch, elr = values
    return (leader, isr, replicas, adding, removing, recovery, leader_epoch, partition_epoch,
            elr)


def _registration_change(rec: pb.MetadataRecord, version: int) -> RecordColumns:
    c = rec.broker_registration_change
    text = (_head("broker_registration_change", version)
            + f'{{"broker_id":{c.broker_id},"broker_epoch":{c.broker_epoch}'
            f',"fenced":"{_FENCE[c.fenced]}"'
            f',"in_controlled_shutdown":"{_SHUTDOWN[c.in_controlled_shutdown]}"}}}}')
    # A change sets a flag (True/False) or leaves it as it is (None).
    fenced = _FENCED_AFTER.get(c.fenced)
    shutdown = True if c.in_controlled_shutdown == pb.CONTROLLED_SHUTDOWN_CHANGE_ENTER else None
    return ("broker_registration_change", version, None, None, None, c.broker_id, None, None,
            text, None, (c.broker_epoch, None, fenced, shutdown, None, None))


def _no_op(rec: pb.MetadataRecord, version: int) -> RecordColumns:
    return ("no_op", version, None, None, None, None, None, None,
            _head("no_op", version) + "{}}", None, None)


def _topic(rec: pb.MetadataRecord, version: int) -> RecordColumns:
    t = rec.topic
    text = _head("topic", version) + f'{{"name":{_dumps(t.name)},"topic_id":{_q(t.topic_id)}}}}}'
    return ("topic", version, t.topic_id, t.name, None, None, None, None, text, None, None)


def _remove_topic(rec: pb.MetadataRecord, version: int) -> RecordColumns:
    tid = rec.remove_topic.topic_id
    text = _head("remove_topic", version) + f'{{"topic_id":{_q(tid)}}}}}'
    return ("remove_topic", version, tid, None, None, None, None, None, text, None, None)


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
    event: EventFields = (None, None, None, None, c.name,
                          c.value if c.HasField("value") else None)
    return ("config", version, None, topic_name, None, broker_id, kind, c.resource_name, text,
            None, event)


def _register_broker(rec: pb.MetadataRecord, version: int) -> RecordColumns:
    r = rec.register_broker
    return ("register_broker", version, None, None, None, r.broker_id, None, None,
            _generic(rec), None,
            (r.broker_epoch, r.incarnation_id, r.fenced, r.in_controlled_shutdown, None, None))


def _unregister_broker(rec: pb.MetadataRecord, version: int) -> RecordColumns:
    u = rec.unregister_broker
    return ("unregister_broker", version, None, None, None, u.broker_id, None, None,
            _generic(rec), None, (u.broker_epoch, None, None, None, None, None))


def _feature_level(rec: pb.MetadataRecord, version: int) -> RecordColumns:
    name = rec.feature_level.name
    return ("feature_level", version, None, None, None, None, "feature", name, _generic(rec),
            None, None)


def _acl(rec: pb.MetadataRecord, version: int) -> RecordColumns:
    a = rec.access_control_entry
    return ("access_control_entry", version, None, None, None, None,
            "acl_" + _ACL_RESOURCE.get(a.resource_type, "unspecified"), a.resource_name,
            _generic(rec), None, None)


def _plain(field: str) -> Callable[[pb.MetadataRecord, int], RecordColumns]:
    def columns(rec: pb.MetadataRecord, version: int) -> RecordColumns:
        return (field, version, None, None, None, None, None, None, _generic(rec), None, None)
    return columns


_BY_TYPE: dict[str, Callable[[pb.MetadataRecord, int], RecordColumns]] = {
    "partition_change": _partition_change,
    "partition": _partition,
    "broker_registration_change": _registration_change,
    "no_op": _no_op,
    "topic": _topic,
    "remove_topic": _remove_topic,
    "config": _config,
    "register_broker": _register_broker,
    "unregister_broker": _unregister_broker,
    "feature_level": _feature_level,
    "access_control_entry": _acl,
    "remove_access_control_entry": _plain("remove_access_control_entry"),
    "remote_log_segment": _plain("remote_log_segment"),
    "remote_log_segment_state_change": _plain("remote_log_segment_state_change"),
    "request_result": _plain("request_result"),
    "leader_change": _plain("leader_change"),
    "snapshot_header": _plain("snapshot_header"),
    "snapshot_footer": _plain("snapshot_footer"),
    "voters": _plain("voters"),
}
assert set(_BY_TYPE) == set(RECORD_TYPES), "a record type without a row mapping"


def _slow_columns(data: bytes) -> RecordColumns:
    """The general path: parse with protobuf, then the per-type mapping above."""
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
    cols = _BY_TYPE[kind](rec, version)
    if kind in _MEMO_KINDS and len(_MEMO) < _CACHE_LIMIT:
        _MEMO[data] = cols
    return cols


# ------------------------------------------------------------------ the fast paths
#
# Columns depend only on a record's bytes, so caching them is exact. Two caches keep
# the per-record Python small without betting on the data:
# - `_MEMO`: whole records of the types whose distinct values are few in any log
#   (no-ops, fencing/unfencing and shutdown changes, leader changes, ...);
# - PartitionChange records (most of a busy log) are split on the wire: the envelope
#   `08 <version> 7a <len>` and the payload's leading `partition_id` / `topic_id`
#   fields are read directly (strictly validated; anything unexpected takes the
#   protobuf path), and the JSON of the remaining fields (ISR, leader, replicas,
#   ...) is cached by their bytes (`_FRAGMENTS`): those are combinations of broker
#   ids, few in any cluster. Topic ids are cached by their bytes (`_TOPIC_IDS`).
# Each cache stops growing at `_CACHE_LIMIT` entries (a miss is just the slow path).

_CACHE_LIMIT = 100_000
_MEMO_KINDS = frozenset({"no_op", "broker_registration_change", "unregister_broker",
                         "feature_level", "leader_change"})
_MEMO: dict[bytes, RecordColumns] = {}
# The JSON of a change's fields after topic_id, and those fields typed.
_FRAGMENTS: dict[bytes, tuple[str, PartitionFields]] = {}
_TOPIC_IDS: dict[bytes, tuple[str, str]] = {}
# The newest PartitionChange version, and the JSON of such a record up to its
# partition id, per version.
PC_VERSION = _VERSIONS["partition_change"]
PC_JSON_HEADS = [f'{_head("partition_change", v)}{{"partition_id":'
                 for v in range(PC_VERSION + 1)]


def _change_fragment(rest: bytes) -> tuple[str, PartitionFields] | None:
    """JSON of a PartitionChangeRecord's fields after topic_id and those fields typed,
    or None (slow path)."""
    try:
        p = pb.PartitionChangeRecord.FromString(rest)
    except Exception:  # malformed: the slow path raises the proper error
        return None
    out = _change_tail(p, keys_allowed=False)
    if out is None:
        return None
    if len(_FRAGMENTS) < _CACHE_LIMIT:
        _FRAGMENTS[rest] = out
    return out


def rows_of(records: Sequence[bytes], *, change_json: bool = True) -> list[RecordColumns]:
    """`record_columns` of each record: the reader's per-record loop.

    `change_json=False` leaves `record_json` None on PartitionChange records (their
    fields are all in the typed partition columns): for readers that would drop it,
    building and shipping the JSON of most of a busy log's records is wasted work.

    PartitionChange records in the usual wire layout are decoded inline (one function
    call per record costs as much as the rest of the work): `08 <version> 7a <len>`
    then the payload's `08 <partition_id>` (absent when 0; one or two varint bytes)
    and `12 <len> <topic_id>`; every other shape, and any check that fails, takes
    the protobuf path (which raises `RecordDecodeError` on unreadable records).
    """
    out: list[RecordColumns] = []
    append = out.append
    memo, topics, fragments = _MEMO.get, _TOPIC_IDS.get, _FRAGMENTS.get
    heads, max_version = PC_JSON_HEADS, PC_VERSION
    for data in records:
        n = len(data)
        if 6 < n < 132 and data[2] == 0x7A and data[0] == 0x08 and data[3] == n - 4:
            version = data[1]
            if data[4] == 0x08:
                pid = data[5]
                i = 6
                if pid & 0x80:
                    second = data[6]
                    pid = -1 if second & 0x80 else (pid & 0x7F) | (second << 7)
                    i = 7
            else:
                pid, i = 0, 4
            if (1 <= version <= max_version and pid >= 0 and n > i + 1 and data[i] == 0x12
                    and not data[i + 1] & 0x80 and (end := i + 2 + data[i + 1]) <= n):
                key = data[i + 2:end]
                topic = topics(key) or _topic_id(key)
                rest = data[end:]
                fragment = fragments(rest)
                if fragment is None:
                    fragment = _change_fragment(rest)
                if topic is not None and fragment is not None:
                    append(("partition_change", version, topic[0], None, pid, None, None,
                            None, f'{heads[version]}{pid},"topic_id":{topic[1]}{fragment[0]}}}}}'
                            if change_json else None, fragment[1], None))
                    continue
        cols = memo(data) or _slow_columns(data)
        if not change_json and cols[0] == "partition_change":
            cols = (*cols[:8], None, *cols[9:])
        append(cols)
    return out


def _topic_id(key: bytes) -> tuple[str, str] | None:
    try:
        tid = key.decode("utf-8")
    except UnicodeDecodeError:
        return None  # the protobuf path reports it
    topic = (tid, _dumps(tid))
    if len(_TOPIC_IDS) < _CACHE_LIMIT:
        _TOPIC_IDS[key] = topic
    return topic


def cached_topic_id(key: bytes) -> tuple[str, str] | None:
    """A PartitionChange's topic id field (bytes) -> (the id, the id as JSON); None if
    it is not UTF-8 (the protobuf path reports that)."""
    return _TOPIC_IDS.get(key) or _topic_id(key)


def cached_change_fragment(rest: bytes) -> tuple[str, PartitionFields] | None:
    """A PartitionChange's fields after topic_id (bytes) -> (their JSON, typed), or
    None for anything `rows_of`'s inline path would not take (the protobuf path)."""
    return _FRAGMENTS.get(rest) or _change_fragment(rest)


def record_columns(data: bytes, *, change_json: bool = True) -> RecordColumns:
    """The record-level columns of one record; `RecordDecodeError` if it is unreadable.

    The checks are `decode_record`'s (one type set, a version this code knows),
    inlined: this runs once per record of the log.
    """
    return rows_of((data,), change_json=change_json)[0]
