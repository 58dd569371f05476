"""SnapshotRegistry: snapshot lifecycle, errors, weak registration."""

from __future__ import annotations

import gc
import weakref

import pytest

from timeline import (
    SnapshotNotFoundError,
    SnapshotRegistry,
    TimelineHashMap,
    TimelineHashSet,
    TimelineInteger,
    TimelineObject,
    TimelineSortedMap,
)


def test_empty_registry() -> None:
    reg = SnapshotRegistry()
    assert reg.epochs() == []
    assert reg.latest_epoch() is None
    assert not reg.has_snapshot(0)


def test_create_snapshot_ascending_and_latest() -> None:
    reg = SnapshotRegistry()
    for epoch in (3, 10, 11):
        reg.create_snapshot(epoch)
    assert reg.epochs() == [3, 10, 11]
    assert reg.latest_epoch() == 11
    assert reg.has_snapshot(10) and not reg.has_snapshot(4)


def test_epochs_returns_a_copy() -> None:
    reg = SnapshotRegistry()
    reg.create_snapshot(1)
    reg.epochs().append(99)
    assert reg.epochs() == [1]


def test_create_snapshot_idempotent_keeps_first_state() -> None:
    reg = SnapshotRegistry()
    m: TimelineHashMap[str, int] = TimelineHashMap(reg)
    m["a"] = 1
    reg.create_snapshot(5)
    m["a"] = 2
    reg.create_snapshot(5)  # same epoch as latest: no-op, the snapshot as first taken stays
    assert reg.epochs() == [5]
    assert m.get("a", epoch=5) == 1
    assert m["a"] == 2


def test_create_snapshot_lower_epoch_is_value_error() -> None:
    reg = SnapshotRegistry()
    reg.create_snapshot(10)
    with pytest.raises(ValueError, match=r"epoch 9.*lower than the latest snapshot's epoch 10"):
        reg.create_snapshot(9)
    assert reg.epochs() == [10]


def test_create_snapshot_rejects_non_int() -> None:
    reg = SnapshotRegistry()
    with pytest.raises(TypeError, match="epoch must be an int"):
        reg.create_snapshot("1")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        reg.create_snapshot(True)


def test_revert_drops_newer_keeps_target() -> None:
    reg = SnapshotRegistry()
    m: TimelineHashMap[str, int] = TimelineHashMap(reg)
    for epoch in (10, 20, 30):
        m[str(epoch)] = epoch
        reg.create_snapshot(epoch)
    m["40"] = 40
    reg.revert_to_snapshot(20)
    assert reg.epochs() == [10, 20]
    assert dict(m) == {"10": 10, "20": 20}
    # A newer epoch than the target may be created again after a revert.
    reg.create_snapshot(25)
    assert reg.epochs() == [10, 20, 25]


def test_revert_to_dead_epoch_raises_key_error_naming_it() -> None:
    reg = SnapshotRegistry()
    reg.create_snapshot(10)
    with pytest.raises(KeyError) as info:
        reg.revert_to_snapshot(15)
    assert isinstance(info.value, SnapshotNotFoundError)
    assert info.value.epoch == 15
    assert str(info.value) == "no live snapshot at epoch 15 (1 live, from 10 to 10)"


def test_error_message_without_snapshots() -> None:
    reg = SnapshotRegistry()
    m: TimelineHashMap[str, int] = TimelineHashMap(reg)
    with pytest.raises(LookupError, match=r"no live snapshot at epoch 7 \(no live snapshots\)"):
        m.get("a", epoch=7)


def test_revert_twice_and_revert_of_revert() -> None:
    reg = SnapshotRegistry()
    i = TimelineInteger(reg)
    reg.create_snapshot(1)
    i.set(5)
    reg.create_snapshot(2)
    i.set(7)
    reg.revert_to_snapshot(2)
    assert i.get() == 5
    i.set(9)
    reg.revert_to_snapshot(2)
    assert i.get() == 5
    reg.revert_to_snapshot(1)
    assert i.get() == 0
    assert reg.epochs() == [1]


def test_delete_snapshots_up_to_keeps_the_one_at_epoch() -> None:
    reg = SnapshotRegistry()
    m: TimelineHashMap[int, int] = TimelineHashMap(reg)
    for epoch in (10, 20, 30):
        reg.create_snapshot(epoch)
        m[epoch] = epoch
    reg.delete_snapshots_up_to(20)
    assert reg.epochs() == [20, 30]
    assert dict(m.items(20)) == {10: 10}
    with pytest.raises(KeyError, match="epoch 10"):
        m.get(10, epoch=10)
    reg.delete_snapshots_up_to(25)  # not live: drops the lower ones only
    assert reg.epochs() == [30]
    reg.delete_snapshots_up_to(5)  # nothing lower
    assert reg.epochs() == [30]
    reg.delete_snapshots_up_to(100)  # above all: drops all
    assert reg.epochs() == []
    assert reg.latest_epoch() is None
    m[1] = 1  # writes without snapshots save nothing
    assert dict(m) == {10: 10, 20: 20, 30: 30, 1: 1}


def test_reset_empties_everything() -> None:
    reg = SnapshotRegistry()
    m: TimelineHashMap[str, int] = TimelineHashMap(reg)
    sm: TimelineSortedMap[int, str] = TimelineSortedMap(reg)
    s: TimelineHashSet[str] = TimelineHashSet(reg)
    i = TimelineInteger(reg, initial=3)
    o: TimelineObject[str] = TimelineObject(reg, "init")
    m["a"] = 1
    sm[1] = "x"
    s.add("x")
    i.increment()
    o.set("other")
    reg.create_snapshot(1)
    m["b"] = 2
    reg.reset()
    assert reg.epochs() == [] and reg.latest_epoch() is None
    assert dict(m) == {} and dict(sm) == {} and set(s) == set()
    assert i.get() == 3 and o.get() == "init"
    # Usable after reset, epochs may start anywhere again.
    reg.create_snapshot(0)
    m["c"] = 3
    assert m.size(epoch=0) == 0


def test_collections_are_held_weakly() -> None:
    reg = SnapshotRegistry()
    m: TimelineHashMap[str, int] = TimelineHashMap(reg)
    kept: TimelineHashMap[str, int] = TimelineHashMap(reg)
    reg.create_snapshot(1)
    m["a"] = 1
    kept["a"] = 1
    assert reg._collection_count() == 2
    ref = weakref.ref(m)
    del m
    gc.collect()
    assert ref() is None
    assert reg._collection_count() == 1
    # Its history went with it; the other collection's stayed.
    assert [len(s.deltas) for s in reg._snapshots] == [1]
    reg.revert_to_snapshot(1)
    assert dict(kept) == {}


@pytest.mark.parametrize(
    "make",
    [
        lambda r: TimelineHashMap(r),
        lambda r: TimelineSortedMap(r),
        lambda r: TimelineHashSet(r),
        lambda r: TimelineInteger(r),
        lambda r: TimelineObject(r, None),
    ],
)
def test_every_collection_type_is_freed_without_gc(make) -> None:  # type: ignore[no-untyped-def]
    reg = SnapshotRegistry()
    coll = make(reg)
    ref = weakref.ref(coll)
    del coll
    # No reference cycle: refcounting alone frees it.
    assert ref() is None
    assert reg._collection_count() == 0


def test_registry_freed_with_its_collections() -> None:
    reg = SnapshotRegistry()
    m: TimelineHashMap[str, int] = TimelineHashMap(reg)
    reg.create_snapshot(1)
    m["a"] = 1
    reg_ref = weakref.ref(reg)
    m_ref = weakref.ref(m)
    del reg, m
    gc.collect()
    assert reg_ref() is None and m_ref() is None


def test_collection_requires_registry() -> None:
    with pytest.raises(TypeError, match="expected a SnapshotRegistry"):
        TimelineHashMap(object())  # type: ignore[arg-type]


def test_no_stale_write_cache_after_drops() -> None:
    reg = SnapshotRegistry()
    m: TimelineHashMap[str, int] = TimelineHashMap(reg)
    reg.create_snapshot(1)
    m["a"] = 1
    reg.delete_snapshots_up_to(2)  # drops the snapshot whose delta m was caching
    assert m._cur is None
    reg.create_snapshot(3)
    m["a"] = 2
    assert m.get("a", epoch=3) == 1
    reg.revert_to_snapshot(3)
    assert m._cur is None
    assert m["a"] == 1
    m["b"] = 1
    assert m._cur is not None
    reg.reset()
    assert m._cur is None
    m["c"] = 1  # no snapshot: caches "save nothing"
    assert m._cur is False
    reg.create_snapshot(9)  # must clear that cache, or the next write would not save
    assert m._cur is None
    m["c"] = 2
    assert m.get("c", epoch=9) == 1


def test_repr() -> None:
    reg = SnapshotRegistry()
    reg.create_snapshot(4)
    assert "latest=4" in repr(reg)
    assert "epoch=4" in repr(reg._snapshots[0])


def test_collection_created_after_a_snapshot() -> None:
    reg = SnapshotRegistry()
    reg.create_snapshot(1)
    m: TimelineHashMap[str, int] = TimelineHashMap(reg)
    o: TimelineObject[str] = TimelineObject(reg, "initial")
    m["a"] = 1
    o.set("changed")
    # Before its first write it was empty / initial; that is what epoch 1 shows.
    assert dict(m.items(epoch=1)) == {} and o.get(epoch=1) == "initial"
    reg.revert_to_snapshot(1)
    assert dict(m) == {} and o.get() == "initial"
