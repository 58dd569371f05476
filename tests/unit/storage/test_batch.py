"""Batch codec: round trips, limits, and that damage is always detected."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.logformat.batch import (
    HEADER_SIZE,
    MAX_BATCH_BYTES,
    MAX_RECORDS_PER_BATCH,
    BatchOrigin,
    RecordBatch,
    decode_batch,
    encode_batch,
    iter_batches,
    peek_batch_header,
    verify_batch,
)
from controller.storage.errors import BatchTooLargeError, CorruptBatchError, TruncatedBatchError

origins = st.builds(BatchOrigin, st.text(max_size=20), st.text(max_size=30), st.text(max_size=20))
batches = st.builds(
    RecordBatch,
    base_offset=st.integers(0, 2**62),
    epoch=st.integers(0, 2**31 - 1),
    append_time_ms=st.integers(-(2**63), 2**63 - 1),
    is_control=st.booleans(),
    origin=origins,
    records=st.lists(st.binary(max_size=200), min_size=1, max_size=50).map(tuple),
)


def sample_batch(n: int = 3, base: int = 10) -> RecordBatch:
    return RecordBatch(base, 4, 1_700_000_000_000, False,
                       BatchOrigin("User:alice", "10.0.0.1:5555", "req-17"),
                       tuple(bytes([i]) * (i + 1) for i in range(n)))


@given(batches)
def test_round_trip(batch: RecordBatch) -> None:
    data = encode_batch(batch)
    decoded, size = decode_batch(data)
    assert decoded == batch
    assert size == len(data)
    header = peek_batch_header(data)
    assert (header.base_offset, header.epoch, header.record_count, header.is_control) == (
        batch.base_offset, batch.epoch, batch.record_count, batch.is_control)
    assert header.next_offset == batch.next_offset == batch.base_offset + len(batch.records)
    assert batch.last_offset == batch.next_offset - 1


@given(st.lists(batches, min_size=1, max_size=5))
def test_back_to_back_batches_decode_in_order(items: list[RecordBatch]) -> None:
    buf = b"".join(encode_batch(b) for b in items)
    assert iter_batches(buf) == items
    # Decoding from a memoryview at an offset gives the same batches.
    first = len(encode_batch(items[0]))
    if len(items) > 1:
        assert decode_batch(memoryview(bytearray(buf)), first)[0] == items[1]


def test_header_is_fixed_size_and_fields_sit_where_documented() -> None:
    data = encode_batch(sample_batch())
    assert HEADER_SIZE == 40
    assert int.from_bytes(data[0:8], "big") == 10
    assert int.from_bytes(data[8:12], "big") == len(data) - 12
    assert data[16] == 1  # magic


def test_empty_batch_is_refused() -> None:
    with pytest.raises(ValueError, match="no records"):
        encode_batch(RecordBatch(0, 0, 0, False, BatchOrigin(), ()))


@pytest.mark.parametrize(("base", "epoch", "time_ms"), [
    (-1, 0, 0), (2**63, 0, 0), (0, -1, 0), (0, 2**31, 0), (0, 0, 2**63)])
def test_out_of_range_fields_are_refused(base: int, epoch: int, time_ms: int) -> None:
    with pytest.raises(ValueError, match="out of range"):
        encode_batch(RecordBatch(base, epoch, time_ms, False, BatchOrigin(), (b"r",)))


def test_too_many_records_is_refused_naming_the_limit() -> None:
    batch = RecordBatch(7, 0, 0, False, BatchOrigin(), (b"",) * (MAX_RECORDS_PER_BATCH + 1))
    with pytest.raises(BatchTooLargeError, match="MAX_RECORDS_PER_BATCH") as info:
        encode_batch(batch)
    assert info.value.offset == 7
    encode_batch(RecordBatch(7, 0, 0, False, BatchOrigin(), (b"",) * MAX_RECORDS_PER_BATCH))


def test_too_many_bytes_is_refused_naming_the_limit() -> None:
    batch = RecordBatch(3, 0, 0, False, BatchOrigin(), (b"x" * MAX_BATCH_BYTES,))
    with pytest.raises(BatchTooLargeError, match="MAX_BATCH_BYTES"):
        encode_batch(batch)


def test_origin_field_too_long_is_refused() -> None:
    batch = RecordBatch(0, 0, 0, False, BatchOrigin("p" * 70_000), (b"r",))
    with pytest.raises(BatchTooLargeError, match="principal"):
        encode_batch(batch)


def test_decode_rejects_sizes_over_the_limit_even_with_a_valid_crc() -> None:
    data = bytearray(encode_batch(sample_batch()))
    data[8:12] = (MAX_BATCH_BYTES + 1).to_bytes(4, "big")
    with pytest.raises(CorruptBatchError, match="MAX_BATCH_BYTES"):
        peek_batch_header(bytes(data))
    data = bytearray(encode_batch(sample_batch()))
    data[22:26] = (MAX_RECORDS_PER_BATCH + 1).to_bytes(4, "big")
    with pytest.raises(CorruptBatchError, match="MAX_RECORDS_PER_BATCH"):
        decode_batch(bytes(data))


def test_truncated_buffers_raise_truncated_error() -> None:
    data = encode_batch(sample_batch())
    for cut in (0, 1, HEADER_SIZE - 1, HEADER_SIZE, len(data) - 1):
        with pytest.raises(TruncatedBatchError):
            decode_batch(data[:cut])


def test_crc_mismatch_names_offset() -> None:
    data = bytearray(encode_batch(sample_batch()))
    data[-1] ^= 0xFF
    with pytest.raises(CorruptBatchError, match="CRC") as info:
        verify_batch(bytes(data))
    assert info.value.offset == 10


def test_origin_not_utf8_names_the_batch_position_in_any_buffer() -> None:
    import crc32c

    data = bytearray(encode_batch(sample_batch()))
    data[HEADER_SIZE] = 0xFF  # the first byte of the principal, with the CRC made to match
    data[12:16] = crc32c.crc32c(bytes(data[16:])).to_bytes(4, "big")
    at = 7
    buffer = b"\0" * at + bytes(data)
    # bytes are decoded in place, a bytearray or memoryview from a copy of the batch.
    for buf in (buffer, bytearray(buffer), memoryview(buffer)):
        with pytest.raises(CorruptBatchError, match="origin is not UTF-8") as info:
            decode_batch(buf, at)
        assert (info.value.offset, info.value.position) == (10, at)


@settings(max_examples=300)
@given(batches, st.data())
def test_any_flipped_byte_is_detected(batch: RecordBatch, data: st.DataObject) -> None:
    encoded = bytearray(encode_batch(batch))
    pos = data.draw(st.integers(0, len(encoded) - 1))
    flip = data.draw(st.integers(1, 255))
    encoded[pos] ^= flip
    try:
        decoded, _ = decode_batch(bytes(encoded))
    except CorruptBatchError:
        return
    # The CRC does not cover base offset and length, but a changed length breaks
    # the structure and a changed base offset is the one field a reader checks
    # against its expected offset (continuity), never a silently wrong record.
    assert pos < 8
    assert decoded.records == batch.records and decoded.base_offset != batch.base_offset


def test_seeded_multi_byte_corruption_never_yields_wrong_records() -> None:
    rng = random.Random(1234)
    batch = sample_batch(20)
    good = encode_batch(batch)
    for _ in range(2000):
        data = bytearray(good)
        for _ in range(rng.randint(1, 5)):
            data[rng.randrange(8, len(data))] = rng.randrange(256)
        if bytes(data) == good:
            continue
        with pytest.raises(CorruptBatchError):
            decode_batch(bytes(data))


def test_decode_is_fast_enough_for_the_target() -> None:
    # Guard against accidental per-record Python work; generous (target is 500k/s).
    import time

    records = tuple(bytes(70) for _ in range(1000))
    data = encode_batch(RecordBatch(0, 1, 0, False, BatchOrigin(), records))
    start = time.perf_counter()
    for _ in range(200):
        decode_batch(data)
    rate = 200 * 1000 / (time.perf_counter() - start)
    assert rate > 250_000, rate
