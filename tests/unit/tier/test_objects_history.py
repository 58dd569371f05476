"""Tier objects (manifests and their checks) and the history plan over tier + local
log: overlaps read once, gaps named, and (property) coverage with no hole."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.logformat.batch import EMPTY_ORIGIN, RecordBatch, encode_batch
from controller.tier.history import (
    MAX_OFFSET,
    HistoryGapError,
    claim_tier,
    epoch_history,
    history_batches,
    list_tier,
    plan_history,
    read_piece,
)
from controller.tier.objects import (
    CorruptObjectError,
    Manifest,
    check_data,
    segment_manifest,
)
from controller.tier.remote import DirectoryStore, TierError


def batches_bytes(start: int, end: int, epoch: int = 1, per_batch: int = 3) -> bytes:
    out = []
    offset = start
    while offset < end:
        n = min(per_batch, end - offset)
        out.append(encode_batch(RecordBatch(offset, epoch, 1000 + offset, False, EMPTY_ORIGIN,
                                            tuple(b"r%d" % (offset + i)
                                                          for i in range(n)))))
        offset += n
    return b"".join(out)


def put_segment(store: DirectoryStore, start: int, end: int, segment_id: str,
                cluster_id: str = "cid") -> Manifest:
    data = batches_bytes(start, end)
    manifest = segment_manifest(cluster_id, segment_id, start, data)
    store.put(manifest.data_key, data)
    store.put(manifest.manifest_key, manifest.encode())
    return manifest


def seg_id(n: int) -> str:
    return f"{n:032x}"


def test_manifest_describes_the_batches_and_round_trips() -> None:
    data = batches_bytes(10, 30, per_batch=4)
    m = segment_manifest("cid", seg_id(1), 10, data)
    assert (m.start_offset, m.end_offset, m.size_bytes) == (10, 30, len(data))
    assert m.epochs == ((1, 10),)
    assert m.offset_index[0] == (10, 0)
    assert m.time_index[0] == (1010, 10) and m.time_index[-1][1] == 26
    assert Manifest.decode(m.manifest_key, m.encode()) == m
    check_data(m, data)


def test_damaged_manifests_and_objects_name_the_object_and_offset() -> None:
    data = batches_bytes(0, 30)
    m = segment_manifest("cid", seg_id(1), 0, data)
    raw = m.encode()
    flipped = raw.replace(b'\\"end_offset\\":30', b'\\"end_offset\\":31')
    assert flipped != raw
    with pytest.raises(CorruptObjectError, match="manifest CRC-32C mismatch"):
        Manifest.decode(m.manifest_key, flipped)
    with pytest.raises(CorruptObjectError, match="unreadable manifest"):
        Manifest.decode(m.manifest_key, raw[:20])
    with pytest.raises(CorruptObjectError, match="not the object its name says"):
        Manifest.decode(m.manifest_key.replace("-0000", "-0001", 1), raw)
    with pytest.raises(CorruptObjectError, match=r"short or overwritten.*") as short:
        check_data(m, data[:-5])
    assert m.data_key in str(short.value) and short.value.offset == 0
    bad = bytearray(data)
    bad[len(data) // 2] ^= 0x40  # a bit flip inside the batch of offsets 15..17
    with pytest.raises(CorruptObjectError) as flip:
        check_data(m, bytes(bad))
    assert flip.value.offset is not None and 12 <= flip.value.offset <= 18
    assert m.data_key in str(flip.value)


def test_listing_refuses_other_clusters_and_foreign_objects(tmp_path: Path) -> None:
    store = DirectoryStore(tmp_path / "tier")
    claim_tier(store, "cid")
    claim_tier(store, "cid")  # idempotent
    with pytest.raises(TierError, match="belongs to cluster cid, not other"):
        claim_tier(store, "other")
    put_segment(store, 0, 10, seg_id(1))
    assert [m.end_offset for m in list_tier(store, "cid").segments] == [10]
    with pytest.raises(TierError, match="belongs to cluster cid, not other"):
        list_tier(store, "other")
    put_segment(store, 10, 20, seg_id(2), cluster_id="intruder")
    with pytest.raises(TierError, match="belongs to cluster intruder"):
        list_tier(store)
    store.delete(put_segment(store, 10, 20, seg_id(2), cluster_id="intruder").manifest_key)
    store.put("notes/readme.txt", b"hello")
    with pytest.raises(TierError, match=r"notes/readme\.txt"):
        list_tier(store)


def test_data_without_a_manifest_is_incomplete_and_never_planned(tmp_path: Path) -> None:
    store = DirectoryStore(tmp_path / "tier")
    put_segment(store, 0, 10, seg_id(1))
    half = put_segment(store, 10, 20, seg_id(2))
    store.delete(half.manifest_key)
    listing = list_tier(store)
    assert listing.incomplete == (half.data_key,)
    assert [(p.start, p.end) for p in plan_history(listing.segments, [])] == [(0, 10)]
    put_segment(store, 20, 30, seg_id(3))
    with pytest.raises(HistoryGapError, match=r"\[10, 20\)"):
        plan_history(list_tier(store).segments, [])


def test_overlapping_objects_are_read_once_then_the_local_log(tmp_path: Path) -> None:
    store = DirectoryStore(tmp_path / "tier")
    put_segment(store, 0, 10, seg_id(1))
    put_segment(store, 10, 25, seg_id(2))
    put_segment(store, 10, 20, seg_id(3))  # a duplicate copy after a failover
    put_segment(store, 25, 40, seg_id(4))
    local_dir = tmp_path / "local"
    local_dir.mkdir()
    local = [(30, local_dir / f"{30:020d}.log"), (45, local_dir / f"{45:020d}.log")]
    local[0][1].write_bytes(batches_bytes(30, 45))
    local[1][1].write_bytes(batches_bytes(45, 50))
    pieces = plan_history(list_tier(store).segments, local)
    assert [(p.source, p.start, p.end) for p in pieces] == [
        ("tier", 0, 10), ("tier", 10, 25), ("tier", 25, 40), ("local", 40, 45),
        ("local", 45, MAX_OFFSET)]
    offsets = [o for _, b in history_batches(store, pieces)
               for o in range(b.base_offset, b.next_offset)]
    # Whole batches come back; callers keep the offsets of each piece's range.
    assert sorted(set(offsets)) == list(range(50))
    window = plan_history(list_tier(store).segments, local, start=12, end=33)
    assert [(p.start, p.end) for p in window] == [(12, 25), (25, 33)]
    with pytest.raises(HistoryGapError, match=r"\[40, 60\).*tier ends at 40"):
        plan_history(list_tier(store).segments, [(60, local_dir / "x.log")])


def test_a_corrupt_object_fails_the_read_by_name(tmp_path: Path) -> None:
    store = DirectoryStore(tmp_path / "tier")
    m = put_segment(store, 0, 12, seg_id(1))
    path = tmp_path / "tier" / m.data_key
    data = bytearray(path.read_bytes())
    data[-3] ^= 1
    path.write_bytes(bytes(data))
    piece = plan_history(list_tier(store).segments, [])[0]
    with pytest.raises(CorruptObjectError, match=m.data_key):
        read_piece(store, piece)
    path.write_bytes(bytes(data[:10]))
    with pytest.raises(CorruptObjectError, match="short"):
        read_piece(store, piece)


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_tier_and_local_always_cover_up_to_the_end_with_no_gap(data: st.DataObject) -> None:
    """Property: whatever the copies (duplicates after failovers, different boundaries
    on different leaders) and however far local retention trimmed the local log
    (never past the copied end), the plan covers [first offset, high watermark) once."""
    hwm = data.draw(st.integers(1, 300))
    copied_end = data.draw(st.integers(0, hwm))
    # Copies: consecutive ranges up to copied_end, plus random duplicates.
    cuts = sorted(set(data.draw(st.lists(st.integers(1, max(1, copied_end - 1)),
                                         max_size=8))) | {0, copied_end})
    ranges = [(a, b) for a, b in itertools.pairwise(cuts) if a < b]
    for _ in range(data.draw(st.integers(0, 3))):
        if ranges:
            a, b = data.draw(st.sampled_from(ranges))
            ranges.append((a, data.draw(st.integers(a + 1, b))))
    manifests = sorted(
        (Manifest("c", seg_id(i), "segment", a, b, 0, 0, 0, 0, 1)
         for i, (a, b) in enumerate(ranges)),
        key=lambda m: (m.start_offset, -m.end_offset, m.segment_id))
    local_start = data.draw(st.integers(0, copied_end))
    bases = sorted({local_start} | set(data.draw(st.lists(st.integers(local_start, hwm),
                                                          max_size=5))))
    local = [(b, Path(f"{b:020d}.log")) for b in bases]
    pieces = plan_history(manifests, local)
    covered: list[int] = []
    for p in pieces:
        covered.extend(range(p.start, min(p.end, hwm)))
    first = 0 if manifests else local_start
    assert covered == list(range(first, hwm))


def test_manifest_json_is_plain_text() -> None:
    m = segment_manifest("cid", seg_id(7), 0, batches_bytes(0, 3))
    outer = json.loads(m.encode())
    assert json.loads(outer["manifest"])["cluster_id"] == "cid"


class CountingStore(DirectoryStore):
    """A directory tier that counts the bytes its reads return."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.bytes_read = 0

    def get(self, key: str, offset: int = 0, length: int | None = None) -> bytes:
        data = super().get(key, offset, length)
        self.bytes_read += len(data)
        return data


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 1499), st.integers(1, 300))
def test_a_range_reads_only_the_index_intervals_it_needs(tmp_path_factory: pytest.TempPathFactory,
                                                         start: int, length: int) -> None:
    root = tmp_path_factory.mktemp("ranged")
    store = CountingStore(root)
    data = batches_bytes(0, 1500, per_batch=2)  # about ten index intervals
    m = segment_manifest("cid", seg_id(1), 0, data)
    store.put(m.data_key, data)
    end = min(1500, start + length)
    pieces = plan_history([m], [], start=start, end=end)
    offsets = [o for _, b in history_batches(store, pieces)
               for o in range(b.base_offset, b.next_offset) if start <= o < end]
    assert offsets == list(range(start, end))
    # At most the index interval before `start` and the one reaching `end` more than
    # the batches wanted; never the whole object.
    wanted = (len(batches_bytes(0, end, per_batch=2))
              - len(batches_bytes(0, start - start % 2, per_batch=2)))
    assert store.bytes_read <= wanted + 2 * 4096 + 64
    assert store.bytes_read < len(data)


def test_the_epoch_history_is_rebuilt_from_the_manifests_slices() -> None:
    # Epoch 1 in [0, 20), epoch 3 from 20 to 45 (across two objects), epoch 4 after.
    a = segment_manifest("cid", seg_id(1), 0, batches_bytes(0, 20, epoch=1)
                         + batches_bytes(20, 30, epoch=3))
    b = segment_manifest("cid", seg_id(2), 30, batches_bytes(30, 45, epoch=3)
                         + batches_bytes(45, 60, epoch=4))
    copy = segment_manifest("cid", seg_id(3), 30, batches_bytes(30, 45, epoch=3)
                            + batches_bytes(45, 60, epoch=4))
    assert epoch_history([a, b, copy]) == ((1, 0), (3, 20), (4, 45))
    # An object after them whose batches go back to epoch 2: named.
    back = segment_manifest("cid", seg_id(4), 60, batches_bytes(60, 70, epoch=2))
    with pytest.raises(CorruptObjectError, match="first epoch 2 is older than epoch 4"):
        epoch_history([a, b, back])
