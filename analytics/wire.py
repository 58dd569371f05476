"""PartitionChange records decoded in bulk: numpy over a file's bytes.

A busy log is mostly PartitionChange records (ISR shrinks and expands, leader
moves), and `analytics.rows.rows_of` spends about a microsecond and a half of
Python on each. Here every record of an Arrow batch is classified and split with a
few numpy operations over the file's bytes, and Python runs once per *distinct*
topic id and once per distinct rest of a record (the fields after the topic id:
combinations of broker ids, few in any cluster) in the batch.

The wire layout taken is the one `rows_of` decodes inline, checked as strictly;
a record that differs in any way is left to `rows_of` (which takes the protobuf
path and reports what is wrong with it):

    08 <version> 7a <len = size - 4>     MetadataRecord.version, partition_change
    [08 <partition_id: 1-2 varint bytes>]  absent when 0
    12 <len < 128> <topic_id>
    <rest>                               every other field, parsed by protobuf once per
                                         distinct value (`cached_change_fragment`)
"""

from __future__ import annotations

import attrs
import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from analytics.rows import (
    PC_JSON_HEADS,
    PC_VERSION,
    PartitionFields,
    cached_change_fragment,
    cached_topic_id,
)

Positions = npt.NDArray[np.int64]

# Longest record the layout check takes (one-byte length after the 0x7a tag).
_MAX_RECORD_BYTES = 131
_NO_FIELDS: PartitionFields = (None,) * 9


@attrs.frozen
class PartitionChanges:
    """The records decoded here, as columns (one entry per decoded record)."""

    rows: Positions  # which records (positions in the arrays given), ascending
    version: pa.Array  # int32
    partition_id: pa.Array  # int32
    topic_id: pa.Array  # string
    record_json: pa.Array | None  # string; None when not asked for
    fields: list[PartitionFields]  # the distinct typed fields...
    field_index: Positions  # ...and each record's entry in it


def decode_partition_changes(buf: npt.NDArray[np.uint8], starts: Positions, ends: Positions,
                             *, change_json: bool) -> PartitionChanges:
    """The PartitionChange records among `buf[starts[i]:ends[i]]` in the usual layout.

    `change_json`: also build `record_json`, equal to `rows_of`'s.
    """
    size = ends - starts
    if not len(buf):
        buf = np.zeros(1, np.uint8)  # no record has a byte: every check fails
    last = len(buf) - 1

    def byte(at: Positions) -> Positions:
        # Clipped to the buffer: a short record's "bytes" past its end belong to
        # whatever follows, and the length checks reject it anyway.
        return buf[np.minimum(at, last)].astype(np.int64)

    b0, version, b2, b3, b4, b5, b6 = (byte(starts + k) for k in range(7))
    ok = ((size > 6) & (size <= _MAX_RECORD_BYTES) & (b0 == 0x08) & (b2 == 0x7A)
          & (b3 == size - 4) & (version >= 1) & (version <= PC_VERSION))
    has_pid = b4 == 0x08
    two_bytes = has_pid & (b5 >= 0x80)
    ok &= ~(two_bytes & (b6 >= 0x80))  # a partition id past two varint bytes
    pid = np.where(two_bytes, (b5 & 0x7F) | (b6 << 7), np.where(has_pid, b5, 0))
    at = np.where(two_bytes, 7, np.where(has_pid, 6, 4))  # where topic_id's tag is
    ok &= size > at + 1
    key_len = byte(starts + at + 1)
    ok &= (byte(starts + at) == 0x12) & (key_len < 0x80)
    rest_at = at + 2 + key_len
    ok &= rest_at <= size

    rows = np.flatnonzero(ok)
    begin = starts[rows]
    keys = _gather(buf, begin + at[rows] + 2, key_len[rows]).dictionary_encode()
    rests = _gather(buf, begin + rest_at[rows], ends[rows] - begin - rest_at[rows]
                    ).dictionary_encode()
    topics = [cached_topic_id(k) for k in keys.dictionary.to_pylist()]
    fragments = [cached_change_fragment(r) for r in rests.dictionary.to_pylist()]
    key_index = keys.indices.to_numpy().astype(np.int64)
    rest_index = rests.indices.to_numpy().astype(np.int64)
    # A topic id that is not UTF-8, or a rest that `rows_of` would not take: left to it.
    good = (np.array([t is not None for t in topics], bool)[key_index]
            & np.array([f is not None for f in fragments], bool)[rest_index])
    if not good.all():
        rows, key_index, rest_index = rows[good], key_index[good], rest_index[good]
    key_take, rest_take = pa.array(key_index), pa.array(rest_index)
    versions = pa.array(version[rows].astype(np.int32))
    partition_ids = pa.array(pid[rows].astype(np.int32))
    json = None
    if change_json:
        json = pc.binary_join_element_wise(
            pa.array(PC_JSON_HEADS, pa.string()).take(versions),
            pc.cast(partition_ids, pa.string()), pa.scalar(',"topic_id":'),
            pa.array([t[1] if t else "" for t in topics], pa.string()).take(key_take),
            pa.array([f[0] if f else "" for f in fragments], pa.string()).take(rest_take),
            pa.scalar("}}"), pa.scalar(""))
    return PartitionChanges(
        rows=rows, version=versions, partition_id=partition_ids,
        topic_id=pa.array([t[0] if t else "" for t in topics], pa.string()).take(key_take),
        record_json=json, fields=[f[1] if f else _NO_FIELDS for f in fragments],
        field_index=rest_index)


def _gather(buf: npt.NDArray[np.uint8], starts: Positions, lengths: Positions) -> pa.Array:
    """`buf[starts[i]:starts[i] + lengths[i]]` for each i, as one Arrow binary array."""
    offsets = np.zeros(len(lengths) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    # Byte j of the result comes from buf[start of its value + (j - offset of its value)].
    index = np.repeat(starts - offsets[:-1], lengths) + np.arange(offsets[-1])
    return pa.Array.from_buffers(pa.binary(), len(lengths), [
        None, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(buf[index])])
