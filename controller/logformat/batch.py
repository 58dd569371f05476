"""Record batches: the unit the log stores and Raft replicates.

Layout (big-endian, fixed 40-byte header, then variable parts)::

    0  base_offset        int64   offset of the first record
    8  batch_length       int32   bytes that follow this field (total size - 12)
   12  crc                uint32  CRC-32C (Castagnoli) of every byte from offset 16 to the end
   16  magic              uint8   format version, `MAGIC`
   17  attributes         uint8   bit 0: control batch (Raft control records)
   18  epoch              int32   Raft epoch of the leader that appended the batch
   22  record_count       int32   n >= 1; the batch covers [base_offset, base_offset + n)
   26  append_time_ms     int64   leader's wall clock when it appended the batch
   34  principal_len      uint16  \
   36  client_address_len uint16   > the batch origin, UTF-8, in this order after the header
   38  request_id_len     uint16  /
   40  origin bytes, then a table of n uint32 record lengths, then the n record bodies.

The length table sits before the bodies (rather than a prefix per record) so
decoding reads all lengths with one `struct.unpack_from` call and then slices the
bodies: per-record work stays in C, which is what makes >500k records/s possible
in CPython. Records stay opaque `bytes` here; turning them into protobuf is the
caller's job (controller.records).

The origin is encoded here, not as a protobuf, so the header never depends on
the record schema.
"""

from __future__ import annotations

import struct
from itertools import accumulate
from typing import NamedTuple

import attrs
import crc32c

from controller.logformat.errors import BatchTooLargeError, CorruptBatchError, TruncatedBatchError

MAGIC = 1
ATTR_CONTROL = 0x01
_KNOWN_ATTRS = ATTR_CONTROL

# What the format allows: a decoder refuses a batch past either bound.
MAX_BATCH_BYTES = 8 * 1024 * 1024
MAX_RECORDS_PER_BATCH = 10_000
# The largest batch a leader appends (one request's records, atomically): well under
# the format's bound, so a fetch answer carries several and no single batch holds a
# snapshot or a follower up for long. The Raft core refuses larger proposals and the
# controller refuses larger requests before replaying them; both read it here.
MAX_APPEND_BYTES = 1024 * 1024
MAX_ORIGIN_FIELD_BYTES = 0xFFFF

_HEADER = struct.Struct(">qiIBBiiqHHH")
HEADER_SIZE = _HEADER.size
# base_offset + batch_length: the part not counted in batch_length.
LOG_OVERHEAD = 12
# The CRC covers everything after the CRC field.
CRC_START = 16
_CRC_FIELD = struct.Struct(">I")
_SINGLE_LENGTH = _CRC_FIELD
assert HEADER_SIZE == 40


@attrs.frozen(slots=True)
class BatchOrigin:
    """Who caused a batch: the admin request behind it (empty strings when internal)."""

    principal: str = ""
    client_address: str = ""
    request_id: str = ""


EMPTY_ORIGIN = BatchOrigin()


@attrs.frozen(slots=True)
class RecordBatch:
    """A decoded batch. `records` are the encoded records, opaque at this layer."""

    base_offset: int
    epoch: int
    append_time_ms: int
    is_control: bool
    origin: BatchOrigin
    records: tuple[bytes, ...]

    @property
    def record_count(self) -> int:
        return len(self.records)

    @property
    def last_offset(self) -> int:
        return self.base_offset + len(self.records) - 1

    @property
    def next_offset(self) -> int:
        return self.base_offset + len(self.records)


class BatchHeader(NamedTuple):
    """The fixed header of a stored batch, read without touching the records.

    A NamedTuple rather than an attrs class: recovery builds one per stored
    batch, and tuple construction is several times cheaper.
    """

    base_offset: int
    size_bytes: int
    crc: int
    magic: int
    is_control: bool
    epoch: int
    record_count: int
    append_time_ms: int
    # Where the record-length table starts, relative to the batch start.
    table_start: int

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.record_count - 1

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.record_count


def _encode_origin_field(value: str, name: str, base_offset: int) -> bytes:
    data = value.encode("utf-8")
    if len(data) > MAX_ORIGIN_FIELD_BYTES:
        raise BatchTooLargeError(
            f"origin {name} is {len(data)} bytes (max {MAX_ORIGIN_FIELD_BYTES})", base_offset
        )
    return data


def encode_batch(batch: RecordBatch) -> bytes:
    """Serialise a batch; raises `BatchTooLargeError` past the limits, ValueError on bad fields."""
    n = len(batch.records)
    if n == 0:
        raise ValueError(f"batch at offset {batch.base_offset} has no records")
    if n > MAX_RECORDS_PER_BATCH:
        raise BatchTooLargeError(
            f"{n} records (max MAX_RECORDS_PER_BATCH={MAX_RECORDS_PER_BATCH})", batch.base_offset
        )
    if not (0 <= batch.base_offset < 2**63 and 0 <= batch.epoch < 2**31
            and -(2**63) <= batch.append_time_ms < 2**63):
        raise ValueError(f"batch field out of range: base offset {batch.base_offset} "
                         f"(int64 >= 0), epoch {batch.epoch} (int32 >= 0), append_time_ms "
                         f"{batch.append_time_ms} (int64)")
    origin = batch.origin
    principal = _encode_origin_field(origin.principal, "principal", batch.base_offset)
    client = _encode_origin_field(origin.client_address, "client_address", batch.base_offset)
    request_id = _encode_origin_field(origin.request_id, "request_id", batch.base_offset)
    lengths = [len(r) for r in batch.records]
    size_bytes = (HEADER_SIZE + len(principal) + len(client) + len(request_id) + 4 * n
                  + sum(lengths))
    if size_bytes > MAX_BATCH_BYTES:
        raise BatchTooLargeError(
            f"{size_bytes} bytes (max MAX_BATCH_BYTES={MAX_BATCH_BYTES})", batch.base_offset
        )
    buf = bytearray(HEADER_SIZE)
    _HEADER.pack_into(
        buf, 0, batch.base_offset, size_bytes - LOG_OVERHEAD, 0, MAGIC,
        ATTR_CONTROL if batch.is_control else 0, batch.epoch, n, batch.append_time_ms,
        len(principal), len(client), len(request_id),
    )
    buf += principal
    buf += client
    buf += request_id
    buf += struct.pack(f">{n}I", *lengths)
    buf += b"".join(batch.records)
    assert len(buf) == size_bytes
    _CRC_FIELD.pack_into(buf, 12, crc32c.crc32c(memoryview(buf)[CRC_START:]))
    return bytes(buf)


def peek_batch_header(buf: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
    """Read and sanity-check the header at `pos` without the CRC or the records.

    Raises `TruncatedBatchError` if fewer than HEADER_SIZE bytes remain and
    `CorruptBatchError` if the header cannot be right (bad magic, impossible sizes).
    """
    available = len(buf) - pos
    if available < HEADER_SIZE:
        raise TruncatedBatchError(
            f"{available} bytes left, a batch header needs {HEADER_SIZE}", position=pos
        )
    (base_offset, batch_length, crc, magic, attributes, epoch, count, append_time_ms,
     len_principal, len_client, len_request) = _HEADER.unpack_from(buf, pos)
    if magic != MAGIC:
        raise CorruptBatchError(f"unknown magic byte {magic} (expected {MAGIC})",
                                base_offset, pos)
    size_bytes = batch_length + LOG_OVERHEAD
    if size_bytes > MAX_BATCH_BYTES:
        raise CorruptBatchError(f"size {size_bytes} exceeds MAX_BATCH_BYTES={MAX_BATCH_BYTES}",
                                base_offset, pos)
    if not 1 <= count <= MAX_RECORDS_PER_BATCH:
        raise CorruptBatchError(
            f"record count {count} outside [1, MAX_RECORDS_PER_BATCH={MAX_RECORDS_PER_BATCH}]",
            base_offset, pos)
    if size_bytes < HEADER_SIZE + len_principal + len_client + len_request + 4 * count:
        raise CorruptBatchError(f"size {size_bytes} too small for its header fields",
                                base_offset, pos)
    if base_offset < 0 or epoch < 0:
        raise CorruptBatchError(f"negative base offset or epoch ({epoch})", base_offset, pos)
    if attributes & ~_KNOWN_ATTRS:
        raise CorruptBatchError(f"unknown attribute bits {attributes:#x}", base_offset, pos)
    return BatchHeader(base_offset, size_bytes, crc, magic, bool(attributes & ATTR_CONTROL),
                       epoch, count, append_time_ms,
                       HEADER_SIZE + len_principal + len_client + len_request)


def verify_batch(buf: bytes | bytearray | memoryview, pos: int = 0,
                 header: BatchHeader | None = None) -> BatchHeader:
    """Check header, CRC and record-length table of the batch at `pos`; records are not built.

    This is what the log runs on every batch it stores or serves: cheap (hardware
    CRC-32C plus one unpack of the length table) and enough to reject any damage.
    `header` is `peek_batch_header(buf, pos)` if the caller already has it.
    """
    if header is None:
        header = peek_batch_header(buf, pos)
    end = pos + header.size_bytes
    if end > len(buf):
        raise TruncatedBatchError(
            f"batch of {header.size_bytes} bytes but only {len(buf) - pos} bytes left",
            header.base_offset, pos)
    actual_crc = crc32c.crc32c(memoryview(buf)[pos + CRC_START:end])
    if actual_crc != header.crc:
        raise CorruptBatchError(
            f"CRC-32C mismatch (stored {header.crc:#010x}, computed {actual_crc:#010x})",
            header.base_offset, pos)
    n = header.record_count
    table_pos = pos + header.table_start
    body_bytes = (_SINGLE_LENGTH.unpack_from(buf, table_pos)[0] if n == 1
                  else sum(struct.unpack_from(f">{n}I", buf, table_pos)))
    if table_pos + 4 * n + body_bytes != end:
        raise CorruptBatchError("record lengths do not add up to the batch size",
                                header.base_offset, pos)
    return header


def decode_batch(buf: bytes | bytearray | memoryview, pos: int = 0, *,
                 verified: BatchHeader | None = None) -> tuple[RecordBatch, int]:
    """Decode the batch at `pos`; returns it and its size in bytes. Checks the CRC.

    `verified` is the header `verify_batch` returned for this very position: the
    caller already checked it, so the CRC is not computed twice.
    """
    header = verify_batch(buf, pos) if verified is None else verified
    if isinstance(buf, bytes):
        data, start = buf, pos
    else:
        # Copy just this batch (not the whole buffer) so records can be bytes slices.
        data, start = bytes(memoryview(buf)[pos:pos + header.size_bytes]), 0
    try:
        origin, bounds = record_bounds(data, start, header)
    except CorruptBatchError as exc:
        # Positions in `data`, which may be a copy of the batch alone: name the real one.
        raise CorruptBatchError(exc.reason, header.base_offset, pos) from None
    if len(bounds) == 2:
        records: tuple[bytes, ...] = (data[bounds[0]:bounds[1]],)
    else:
        # Slice every body out of `data` in C.
        records = tuple(map(data.__getitem__, map(slice, bounds, bounds[1:])))
    batch = RecordBatch(header.base_offset, header.epoch, header.append_time_ms,
                        header.is_control, origin, records)
    return batch, header.size_bytes


def record_bounds(data: bytes, pos: int, header: BatchHeader) -> tuple[BatchOrigin, list[int]]:
    """The origin of the batch at `pos` and where its records are: record i is
    `data[bounds[i]:bounds[i + 1]]`. `header` is what `verify_batch` returned for this
    position (the lengths add up). For readers that decode records in place, without
    a `bytes` object per record (see `decode_batch` for the usual way)."""
    (_, _, _, _, _, _, n, _, len_principal, len_client, len_request) = _HEADER.unpack_from(data,
                                                                                           pos)
    p = pos + HEADER_SIZE
    try:
        if len_principal or len_client or len_request:
            p2 = p + len_principal
            p3 = p2 + len_client
            p4 = p3 + len_request
            origin = BatchOrigin(data[p:p2].decode("utf-8"), data[p2:p3].decode("utf-8"),
                                 data[p3:p4].decode("utf-8"))
            p = p4
        else:
            origin = EMPTY_ORIGIN
    except UnicodeDecodeError as exc:
        raise CorruptBatchError(f"origin is not UTF-8: {exc}", header.base_offset,
                                pos) from None
    body_start = p + 4 * n
    if n == 1:
        return origin, [body_start, pos + header.size_bytes]
    # Starts and ends from running sums of the length table, in C.
    return origin, list(accumulate(struct.unpack_from(f">{n}I", data, p), initial=body_start))


def iter_batches(buf: bytes, pos: int = 0) -> list[RecordBatch]:
    """Decode every batch in a buffer of back-to-back batches (e.g. a Fetch response)."""
    out: list[RecordBatch] = []
    while pos < len(buf):
        batch, size = decode_batch(buf, pos)
        out.append(batch)
        pos += size
    return out
