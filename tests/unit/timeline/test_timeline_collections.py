"""Unit tests per collection class: latest-state API, reads at epochs, errors."""

from __future__ import annotations

from collections.abc import MutableMapping, MutableSet

import pytest

from timeline import (
    SnapshotRegistry,
    TimelineHashMap,
    TimelineHashSet,
    TimelineInteger,
    TimelineLong,
    TimelineObject,
    TimelineSortedMap,
)

# -- TimelineHashMap -----------------------------------------------------------------


def test_hash_map_is_a_mutable_mapping() -> None:
    reg = SnapshotRegistry()
    m: TimelineHashMap[str, int] = TimelineHashMap(reg)
    assert isinstance(m, MutableMapping)
    m["a"] = 1
    m.update({"b": 2, "c": 3})
    assert m.setdefault("d", 4) == 4
    assert m.pop("d") == 4
    assert len(m) == 3 and "a" in m and "z" not in m
    assert sorted(m) == ["a", "b", "c"]
    assert m == {"a": 1, "b": 2, "c": 3}
    assert m["b"] == 2
    with pytest.raises(KeyError):
        m["z"]
    with pytest.raises(KeyError):
        del m["z"]
    del m["a"]
    assert dict(m) == {"b": 2, "c": 3}
    assert repr(m) == "TimelineHashMap({'b': 2, 'c': 3})"


def test_hash_map_reads_at_epochs() -> None:
    reg = SnapshotRegistry()
    m: TimelineHashMap[str, int] = TimelineHashMap(reg)
    m["a"] = 1
    reg.create_snapshot(10)
    m["a"] = 2
    m["b"] = 1
    reg.create_snapshot(20)
    del m["a"]
    m["b"] = 5
    m["b"] = 6  # second write after 20: nothing more saved
    assert m.get("a") is None and m.get("a", -1) == -1
    assert m.get("a", epoch=10) == 1
    assert m.get("a", epoch=20) == 2
    assert m.get("b", epoch=10) is None and m.get("b", "none", epoch=10) == "none"
    assert m.get("b", epoch=20) == 1
    assert m.contains("a", epoch=20) and not m.contains("a")
    assert not m.contains("b", epoch=10)
    assert m.size() == 1 and m.size(epoch=10) == 1 and m.size(epoch=20) == 2
    assert dict(m.items(epoch=10)) == {"a": 1}
    assert set(m.keys(epoch=20)) == {"a", "b"}
    assert sorted(m.values(epoch=20)) == [1, 2]
    assert dict(m.items()) == {"b": 6}
    assert reg._snapshots[-1].deltas[m._cid] == {"a": 2, "b": 1}


def test_hash_map_none_values_are_values() -> None:
    reg = SnapshotRegistry()
    m: TimelineHashMap[str, int | None] = TimelineHashMap(reg)
    m["a"] = None
    reg.create_snapshot(1)
    del m["a"]
    assert m.contains("a", epoch=1)
    assert m.get("a", 5, epoch=1) is None
    assert m.size(epoch=1) == 1


def test_hash_map_past_copy_is_stable() -> None:
    reg = SnapshotRegistry()
    m: TimelineHashMap[int, int] = TimelineHashMap(reg)
    m.update({i: i for i in range(5)})
    reg.create_snapshot(1)
    items = m.items(epoch=1)
    for i in range(5):  # writes while iterating the past copy
        m[i + 100] = i
    assert sorted(items) == [(i, i) for i in range(5)]


def test_hash_map_clear_is_saved() -> None:
    reg = SnapshotRegistry()
    m: TimelineHashMap[str, int] = TimelineHashMap(reg)
    m.update(a=1, b=2)
    reg.create_snapshot(1)
    m.clear()
    assert len(m) == 0 and dict(m.items(1)) == {"a": 1, "b": 2}
    reg.revert_to_snapshot(1)
    assert dict(m) == {"a": 1, "b": 2}


@pytest.mark.parametrize("method", ["get", "contains", "size", "items", "keys", "values"])
def test_hash_map_dead_epoch_raises_for_every_read(method: str) -> None:
    reg = SnapshotRegistry()
    m: TimelineHashMap[str, int] = TimelineHashMap(reg)
    reg.create_snapshot(1)
    args: tuple[object, ...] = ("a",) if method in ("get", "contains") else ()
    with pytest.raises(KeyError, match="no live snapshot at epoch 2"):
        getattr(m, method)(*args, epoch=2)


# -- TimelineSortedMap ---------------------------------------------------------------


def test_sorted_map_ordered_at_every_epoch() -> None:
    reg = SnapshotRegistry()
    m: TimelineSortedMap[int, str] = TimelineSortedMap(reg)
    for k in (5, 1, 3):
        m[k] = f"v{k}"
    reg.create_snapshot(10)
    m[2] = "v2"
    del m[5]
    m[1] = "new"
    reg.create_snapshot(20)
    m[0] = "v0"
    del m[3]
    assert list(m) == [0, 1, 2]
    assert list(reversed(m)) == [2, 1, 0]
    assert list(m.keys(epoch=10)) == [1, 3, 5]
    assert list(m.items(epoch=10)) == [(1, "v1"), (3, "v3"), (5, "v5")]
    assert list(m.values(epoch=20)) == ["new", "v2", "v3"]
    assert list(m.items()) == [(0, "v0"), (1, "new"), (2, "v2")]
    assert list(m.irange(2, 5, epoch=10)) == [3, 5]
    assert list(m.irange(2, 5, inclusive=(False, False), epoch=10)) == [3]
    assert list(m.irange(1, 3, reverse=True, epoch=20)) == [3, 2, 1]
    assert list(m.irange(minimum=1)) == [1, 2]
    assert list(m.irange(maximum=1, epoch=20)) == [1]
    assert m.first_key() == 0 and m.last_key() == 2
    assert m.first_key(epoch=10) == 1 and m.last_key(epoch=10) == 5
    assert m.first_key(epoch=20) == 1 and m.last_key(epoch=20) == 3
    assert m.get(5, epoch=10) == "v5" and m.size(epoch=20) == 3
    reg.revert_to_snapshot(10)
    assert list(m.items()) == [(1, "v1"), (3, "v3"), (5, "v5")]


def test_sorted_map_empty_first_last() -> None:
    reg = SnapshotRegistry()
    m: TimelineSortedMap[int, int] = TimelineSortedMap(reg)
    reg.create_snapshot(1)
    m[1] = 1
    assert m.first_key(epoch=1) is None and m.last_key(epoch=1) is None
    del m[1]
    assert m.first_key() is None and m.last_key() is None
    with pytest.raises(KeyError, match="epoch 2"):
        m.irange(epoch=2)
    with pytest.raises(KeyError, match="epoch 2"):
        m.first_key(epoch=2)


# -- TimelineHashSet -------------------------------------------------------------------


def test_hash_set_latest_and_epochs() -> None:
    reg = SnapshotRegistry()
    s: TimelineHashSet[str] = TimelineHashSet(reg)
    assert isinstance(s, MutableSet)
    s.add("a")
    s.add("b")
    reg.create_snapshot(1)
    s.discard("a")
    s.discard("zz")  # absent: no-op
    s.add("c")
    s.add("c")
    reg.create_snapshot(2)
    s.add("a")
    assert "a" in s and len(s) == 3 and set(s) == {"a", "b", "c"}
    assert s.elements() == frozenset({"a", "b", "c"})
    assert s.elements(epoch=1) == frozenset({"a", "b"})
    assert s.elements(epoch=2) == frozenset({"b", "c"})
    assert s.contains("a", epoch=1) and not s.contains("a", epoch=2)
    assert not s.contains("c", epoch=1) and s.contains("c")
    assert s.size(epoch=1) == 2 and s.size(epoch=2) == 2 and s.size() == 3
    assert (s | {"x"}) == {"a", "b", "c", "x"} and type(s & {"a"}) is set
    s.remove("b")
    with pytest.raises(KeyError):
        s.remove("b")
    assert repr(s).startswith("TimelineHashSet(")
    reg.revert_to_snapshot(1)
    assert set(s) == {"a", "b"}
    with pytest.raises(KeyError, match="epoch 2"):
        s.contains("a", epoch=2)
    with pytest.raises(KeyError, match="epoch 2"):
        s.elements(epoch=2)
    with pytest.raises(KeyError, match="epoch 2"):
        s.size(epoch=2)


def test_hash_set_add_absent_adds_new_elements_and_refuses_present_ones() -> None:
    reg = SnapshotRegistry()
    s: TimelineHashSet[str] = TimelineHashSet(reg)
    s.add_absent(["a", "b"])
    reg.create_snapshot(1)
    s.discard("a")
    s.add_absent(["a", "c"])  # "a" was removed since the snapshot: absent again
    s.add_absent([])
    assert s.elements() == {"a", "b", "c"} and s.elements(epoch=1) == {"a", "b"}
    reg.revert_to_snapshot(1)
    assert set(s) == {"a", "b"}
    # A present or repeated element is a caller's bug: it is reported (and the set is
    # not to be used after).
    with pytest.raises(AssertionError, match="1 of the elements were present"):
        s.add_absent(["b", "d"])
    with pytest.raises(AssertionError, match="1 of the elements were present or repeated"):
        TimelineHashSet[str](reg).add_absent(["e", "e"])


# -- TimelineInteger / TimelineLong / TimelineObject --------------------------------


@pytest.mark.parametrize("cls", [TimelineInteger, TimelineLong])
def test_integer(cls: type[TimelineInteger]) -> None:
    reg = SnapshotRegistry()
    i = cls(reg)
    assert i.get() == 0
    i.increment()
    reg.create_snapshot(1)
    i.increment()
    i.increment()
    reg.create_snapshot(2)
    i.decrement()
    i.set(100)
    assert i.get() == 100 and i.get(epoch=1) == 1 and i.get(epoch=2) == 3
    with pytest.raises(KeyError, match="no live snapshot at epoch 3"):
        i.get(epoch=3)
    reg.revert_to_snapshot(2)
    assert i.get() == 3
    assert repr(i) == f"{cls.__name__}(3)"


def test_integer_initial_and_type() -> None:
    reg = SnapshotRegistry()
    assert TimelineInteger(reg, initial=-5).get() == -5
    with pytest.raises(TypeError, match="initial must be an int"):
        TimelineInteger(reg, initial="1")  # type: ignore[arg-type]


def test_object() -> None:
    reg = SnapshotRegistry()
    o: TimelineObject[tuple[int, ...]] = TimelineObject(reg, ())
    reg.create_snapshot(1)
    o.set((1,))
    o.set((1, 2))
    reg.create_snapshot(2)
    assert o.get(epoch=1) == () and o.get(epoch=2) == (1, 2) and o.get() == (1, 2)
    o.set((3,))
    assert o.get(epoch=2) == (1, 2)
    reg.revert_to_snapshot(1)
    assert o.get() == ()
    with pytest.raises(KeyError, match="epoch 2"):
        o.get(epoch=2)
