"""Data records inside the log's batches, and the producer stamp on a batch.

A partition log stores the same batches as the metadata log (one format: the
batch header, CRC-32C, record-length table; `controller.logformat.batch`). A data
record's body is::

    0  timestamp_ms  int64   the producer's clock
    8  key_length    int32   -1: no key
   12  key bytes, then the value (the rest of the body)

An idempotent producer's id and first sequence number ride in the batch origin's
`request_id` as `"p<producer id>:<base sequence>"`, as the metadata log keeps an
admin request's id there: replicas copy batches verbatim, so every replica can
rebuild the producers' state from its own log.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

import attrs

from controller.logformat.batch import (
    EMPTY_ORIGIN,
    BatchOrigin,
    RecordBatch,
    encode_batch,
    iter_batches,
)

_HEAD = struct.Struct(">qi")
NO_PRODUCER = -1


class RecordFormatError(ValueError):
    """A record body that is not a data record."""


@attrs.frozen(slots=True)
class DataRecord:
    key: bytes | None
    value: bytes
    timestamp_ms: int = 0


def encode_record(record: DataRecord) -> bytes:
    key = record.key
    return _HEAD.pack(record.timestamp_ms, -1 if key is None else len(key)) + (key or b"") \
        + record.value


def decode_record(body: bytes) -> DataRecord:
    if len(body) < _HEAD.size:
        raise RecordFormatError(f"record of {len(body)} bytes is shorter than its "
                                f"{_HEAD.size}-byte header")
    timestamp_ms, key_length = _HEAD.unpack_from(body)
    if key_length < -1 or _HEAD.size + max(key_length, 0) > len(body):
        raise RecordFormatError(f"key length {key_length} does not fit a "
                                f"{len(body)}-byte record")
    if key_length == -1:
        return DataRecord(None, body[_HEAD.size:], timestamp_ms)
    end = _HEAD.size + key_length
    return DataRecord(body[_HEAD.size:end], body[end:], timestamp_ms)


def encode_produce_batch(records: Sequence[DataRecord]) -> bytes:
    """What a producer sends: one batch of `records` at base offset 0 (the leader
    assigns offsets and its epoch)."""
    return encode_batch(RecordBatch(0, 0, 0, False, EMPTY_ORIGIN,
                                    tuple(encode_record(r) for r in records)))


def decode_values(batches: bytes) -> list[bytes]:
    """The values of every record in back-to-back batches (a fetch answer, a log
    read), in offset order."""
    return [decode_record(body).value for batch in iter_batches(batches)
            for body in batch.records]


@attrs.frozen(slots=True)
class ProducerStamp:
    """Who wrote a batch, for idempotence: producer id and the first record's sequence."""

    producer_id: int
    base_sequence: int


def stamp_origin(principal: str, client_address: str,
                 stamp: ProducerStamp | None) -> BatchOrigin:
    request_id = "" if stamp is None else f"p{stamp.producer_id}:{stamp.base_sequence}"
    return BatchOrigin(principal, client_address, request_id)


def stamp_of(origin: BatchOrigin) -> ProducerStamp | None:
    """The producer stamp of a stored batch (None: not written by an idempotent
    producer, or not a stamp we wrote)."""
    text = origin.request_id
    if not text.startswith("p"):
        return None
    pid, _, seq = text[1:].partition(":")
    if not (pid.isdigit() and seq.isdigit()):
        return None
    return ProducerStamp(int(pid), int(seq))
