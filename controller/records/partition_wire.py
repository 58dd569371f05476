"""Partition records on the wire without protobuf objects on the hot paths.

Creating a 100-partition topic writes 100 PartitionRecords, every controller
replays them, and a snapshot writes one per partition of the cluster: building a
protobuf message per record, and reading it back field by field, cost more than the
replay itself. But a PartitionRecord is two per-partition fields followed by the
registration, and registrations are few distinct values (replica sets over the
brokers, epochs 0 when new), so:

- `encode_partitions` writes `08 <version> 72 <len>` + `08 <partition_id>` (absent
  when 0) + `12 <len> <topic_id>` + the registration's fields 3..11, the last part
  serialised by protobuf once per registration and cached. Protobuf writes fields in
  number order and omits proto3 defaults, so the bytes equal ``encode_record`` of the
  same record (tests/unit/records/test_partition_wire.py checks it);
- `split_partition` reads that layout back, strictly (anything else: None, and the
  caller takes the protobuf path, which raises the proper error on bad bytes), and
  `registration_from_tail` maps the trailing bytes to a shared registration through
  a cache keyed by those bytes (exact: equal bytes decode to equal registrations).

PartitionChangeRecords get the same reading: a fenced broker's partitions all change
(hundreds of thousands of records, replayed by every controller), yet the changes are
few distinct values (an ISR and a leader over the brokers). `split_partition_change`
splits an envelope the same way, and `delta_from_tail` maps fields 3..9 to a shared
``PartitionDelta``; `encode_change` writes one from cached parts (fields 3..9
serialised by protobuf once per distinct delta).

Caches stop growing at `_CACHE_LIMIT` entries (cleared then; a miss is the slow path).

Why process-wide: every cache below memoises a pure function of its key (bytes to
the value they state, or a value to its bytes), so an entry is right for any state
that asks, and sharing is the point: the leader's generate, every replay, the
snapshot writer and the snapshot loader hit the same few distinct registrations.
Measured when they came (docs/benchmarks.md, "Replay from bytes"): decode + replay
of a 100-partition topic 1.07 -> 0.3-0.4 ms, generate + encode 0.27 -> 0.13 ms, a
snapshot of 300k partitions 1.5 -> 0.3-0.4 CPU s. Bounded, so their memory is at
most `_CACHE_LIMIT` entries each whatever runs in the process.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Any, TypeVar

from controller.records import metadata_pb2 as pb
from controller.records.convert import change_to_record, partition_from_record
from controller.records.domain import PartitionDelta, PartitionRegistration
from controller.records.registry import RECORD_TYPES

VERSION = RECORD_TYPES["partition"].version
CHANGE_VERSION = RECORD_TYPES["partition_change"].version
_ENVELOPE_TAG = 0x72  # MetadataRecord field 14 (partition), wire type 2
_CHANGE_ENVELOPE_TAG = 0x7A  # MetadataRecord field 15 (partition_change), wire type 2
_CACHE_LIMIT = 50_000
_K = TypeVar("_K", bound=Hashable)
_V = TypeVar("_V")
# id(registration) -> (registration, its fields 3..11 serialised). Keyed by id, not
# by value: hashing a registration hashes all its fields; the entry keeps the object
# alive, so its id cannot be reused while cached.
_TAILS: dict[int, tuple[PartitionRegistration, bytes]] = {}
# (replicas, ISR) of a new partition -> its fields 3..11 serialised.
_NEW_TAILS: dict[tuple[tuple[int, ...], tuple[int, ...]], bytes] = {}
# Fields 3..10 serialised -> the registration they state.
_REGISTRATIONS: dict[bytes, PartitionRegistration] = {}
# A PartitionChangeRecord's fields 3..9 serialised -> the delta they state, and back.
_DELTAS: dict[bytes, PartitionDelta] = {}
_CHANGE_TAILS: dict[PartitionDelta, bytes] = {}
# Topic id -> its field 2 serialised (a broker's partitions span a few thousand topics).
_TOPIC_FIELDS: dict[str, bytes] = {}

assert VERSION < 0x80 and CHANGE_VERSION < 0x80, "the envelope's version is one varint byte"


def _varint(value: int) -> bytes:
    """A non-negative int as a protobuf varint."""
    assert value >= 0
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def registration_tail(part: PartitionRegistration) -> bytes:
    """``part``'s PartitionRecord fields after topic_id (3..11), as protobuf writes them."""
    entry = _TAILS.get(id(part))
    if entry is not None and entry[0] is part:
        return entry[1]
    tail = pb.PartitionRecord(
        replicas=part.replicas,
        isr=part.isr,
        removing_replicas=part.removing_replicas,
        adding_replicas=part.adding_replicas,
        leader=part.leader,
        leader_recovery_state=int(part.leader_recovery_state),  # type: ignore[arg-type]
        leader_epoch=part.leader_epoch,
        partition_epoch=part.partition_epoch,
        eligible_leader_replicas=part.elr,
    ).SerializeToString(deterministic=True)
    _remember(_TAILS, id(part), (part, tail))
    return tail


def encode_partitions(
    topic_id: str, parts: Sequence[PartitionRegistration], first_id: int = 0
) -> list[bytes]:
    """``encode_record(make_record(partition_to_record(part, ...)))`` for each of
    ``parts`` (numbered from ``first_id``): equal bytes, built without messages."""
    tails, tail_of = _TAILS, registration_tail
    out: list[bytes] = []
    for part in parts:
        entry = tails.get(id(part))
        out.append(entry[1] if entry is not None and entry[0] is part else tail_of(part))
    return _envelopes(topic_id, first_id, out)


def encode_new_partitions(
    topic_id: str, first_id: int, placements: Sequence[tuple[tuple[int, ...], tuple[int, ...]]]
) -> list[bytes]:
    """`encode_partitions` of new partitions given as (replicas, ISR) pairs: the first
    of the ISR leads, epochs 0 (what creating topics and partitions writes)."""
    tails = _NEW_TAILS
    out: list[bytes] = []
    for placement in placements:
        tail = tails.get(placement)
        if tail is None:
            replicas, isr = placement
            tail = registration_tail(PartitionRegistration(replicas, isr, leader=isr[0]))
            _remember(tails, placement, tail)
        out.append(tail)
    return _envelopes(topic_id, first_id, out)


def encode_change(topic_id: str, partition_id: int, delta: PartitionDelta) -> bytes:
    """``encode_record(make_record(change_to_record(delta, ...)))``: equal bytes, built
    from cached parts (the partition mover writes one per partition of a fenced
    broker)."""
    assert partition_id >= 0
    tail = _CHANGE_TAILS.get(delta)
    if tail is None:
        tail = change_to_record(delta, topic_id="", partition_id=0).SerializeToString(
            deterministic=True)
        _remember(_CHANGE_TAILS, delta, tail)
    topic_field = _TOPIC_FIELDS.get(topic_id)
    if topic_field is None:
        topic_field = _topic_field(topic_id)
        _remember(_TOPIC_FIELDS, topic_id, topic_field)
    pid = _PID_FIELDS[partition_id] if partition_id < 0x80 else b"\x08" + _varint(partition_id)
    size = len(pid) + len(topic_field) + len(tail)
    head = (_CHANGE_HEADS[size] if size < 0x80
            else _CHANGE_HEADS[0][:3] + _varint(size))
    return b"".join((head, pid, topic_field, tail))


def _topic_field(topic_id: str) -> bytes:
    """Field 2 (topic_id) as protobuf writes it: absent when empty."""
    tid = topic_id.encode("utf-8")
    return b"\x12" + _varint(len(tid)) + tid if tid else b""


def _envelopes(topic_id: str, first_id: int, tails: list[bytes]) -> list[bytes]:
    """The envelopes of PartitionRecords of ``topic_id`` numbered from ``first_id``,
    each with its registration's fields (``tails``)."""
    assert first_id >= 0
    topic_field = _topic_field(topic_id)
    heads, pids, join = _HEADS, _PID_FIELDS, b"".join
    out: list[bytes] = []
    append = out.append
    for partition_id, tail in enumerate(tails, first_id):
        pid = pids[partition_id] if partition_id < 0x80 else b"\x08" + _varint(partition_id)
        size = len(pid) + len(topic_field) + len(tail)
        head = heads[size] if size < 0x80 else _HEADS[0][:3] + _varint(size)
        append(join((head, pid, topic_field, tail)))
    return out


# The envelope up to the payload for each one-byte payload size, and the
# partition_id field for each one-byte id (absent for 0, the proto3 default).
_HEADS = [bytes((0x08, VERSION, _ENVELOPE_TAG, size)) for size in range(0x80)]
_CHANGE_HEADS = [bytes((0x08, CHANGE_VERSION, _CHANGE_ENVELOPE_TAG, size))
                 for size in range(0x80)]
_PID_FIELDS = [b"", *(bytes((0x08, pid)) for pid in range(1, 0x80))]


def split_partition(data: bytes) -> tuple[int, bytes, bytes] | None:
    """(partition_id, topic id bytes, fields 3..11) of a PartitionRecord envelope in
    the layout `encode_partitions` writes, with a version this code reads; None for
    anything else (the caller decodes it with protobuf)."""
    return _split(data, _ENVELOPE_TAG, VERSION)


def split_partition_change(data: bytes) -> tuple[int, bytes, bytes] | None:
    """(partition_id, topic id bytes, fields 3..9) of a PartitionChangeRecord envelope
    as protobuf writes it (the same leading fields as a PartitionRecord's), with a
    version this code reads; None for anything else."""
    return _split(data, _CHANGE_ENVELOPE_TAG, CHANGE_VERSION)


def _split(data: bytes, tag: int, version: int) -> tuple[int, bytes, bytes] | None:
    """`split_partition` of envelope member ``tag`` (either record's field 1 is the
    partition id, field 2 the topic id)."""
    n = len(data)
    if n < 6 or data[0] != 0x08 or data[2] != tag or not 1 <= data[1] <= version:
        return None
    size = data[3]
    i = 4
    if size & 0x80:
        size = (size & 0x7F) | (data[4] << 7)
        i = 5
        if data[4] & 0x80 or size < 0x80:
            return None
    if i + size != n:
        return None
    pid = 0
    if data[i] == 0x08:
        i += 1
        shift = 0
        while True:  # a non-negative int32: at most 5 varint bytes
            if i >= n or shift > 28:
                return None
            byte = data[i]
            pid |= (byte & 0x7F) << shift
            i += 1
            if not byte & 0x80:
                break
            shift += 7
        if pid == 0 or pid >= 1 << 31:
            return None  # proto3 never writes a default; a negative is 10 bytes
    if i + 2 > n or data[i] != 0x12 or data[i + 1] & 0x80:
        return None
    end = i + 2 + data[i + 1]
    if end > n or end == i + 2:
        return None
    return pid, data[i + 2:end], data[end:]


def registration_cache() -> dict[bytes, PartitionRegistration]:
    """The tail -> registration cache itself, for a hot loop's first lookup (a miss
    goes through `registration_from_tail`)."""
    return _REGISTRATIONS


def registration_from_tail(tail: bytes) -> PartitionRegistration | None:
    """The registration that PartitionRecord fields 3..11 (``tail``) state, or None if
    they are not only those fields or do not decode (the protobuf path decides)."""
    return _from_tail(tail, _REGISTRATIONS, pb.PartitionRecord, partition_from_record)


def delta_cache() -> dict[bytes, PartitionDelta]:
    """The tail -> delta cache itself, for a hot loop's first lookup (a miss goes
    through `delta_from_tail`)."""
    return _DELTAS


def delta_from_tail(tail: bytes) -> PartitionDelta | None:
    """The delta that PartitionChangeRecord fields 3..9 (``tail``) state, or None if
    they are not only those fields or do not decode (the protobuf path decides)."""
    return _from_tail(tail, _DELTAS, pb.PartitionChangeRecord, PartitionDelta.of)


def _from_tail(tail: bytes, cache: dict[bytes, _V], message: Any,
               convert: Callable[[Any], _V]) -> _V | None:
    """``convert`` of ``tail`` parsed as ``message`` (a record whose fields 1 and 2
    are the partition and topic ids, split off), through ``cache``."""
    found = cache.get(tail)
    if found is not None:
        return found
    try:
        msg = message.FromString(tail)
        if msg.partition_id != 0 or msg.topic_id:
            return None  # a repeated field 1 or 2: protobuf's last-one-wins applies
        found = convert(msg)
    except Exception:  # malformed, or an unknown recovery state: the slow path says
        return None
    _remember(cache, tail, found)
    return found


def _remember(cache: dict[_K, _V], key: _K, value: _V) -> None:
    if len(cache) >= _CACHE_LIMIT:
        cache.clear()
    cache[key] = value
