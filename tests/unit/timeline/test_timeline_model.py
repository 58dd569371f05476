"""Model-based test: every collection, at the latest state and at every live epoch,
against a naive model that deep-copies everything at each snapshot."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from timeline import (
    SnapshotRegistry,
    TimelineHashMap,
    TimelineHashSet,
    TimelineInteger,
    TimelineObject,
    TimelineSortedMap,
)

KEYS = st.integers(min_value=0, max_value=7)
VALUES = st.integers(min_value=-3, max_value=3) | st.none()
OBJECTS = st.sampled_from(["x", "y", "z", None])
INITIAL = "init"


def empty_state() -> dict[str, Any]:
    return {"map": {}, "smap": {}, "set": set(), "int": 0, "obj": INITIAL}


class TimelineModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.reg = SnapshotRegistry()
        self.map: TimelineHashMap[int, int | None] = TimelineHashMap(self.reg)
        self.smap: TimelineSortedMap[int, int | None] = TimelineSortedMap(self.reg)
        self.set: TimelineHashSet[int] = TimelineHashSet(self.reg)
        self.int = TimelineInteger(self.reg)
        self.obj: TimelineObject[str | None] = TimelineObject(self.reg, INITIAL)
        self.latest = empty_state()
        self.snapshots: dict[int, dict[str, Any]] = {}  # epoch -> deep copy

    # -- writes ------------------------------------------------------------------------

    @rule(key=KEYS, value=VALUES)
    def put(self, key: int, value: int | None) -> None:
        self.map[key] = value
        self.latest["map"][key] = value

    @rule(key=KEYS, value=VALUES)
    def sorted_put(self, key: int, value: int | None) -> None:
        self.smap[key] = value
        self.latest["smap"][key] = value

    @rule(items=st.lists(st.tuples(KEYS, VALUES), max_size=5))
    def put_all(self, items: list[tuple[int, int | None]]) -> None:
        self.map.put_all(items)
        self.latest["map"].update(items)

    @rule(key=KEYS)
    def latest_view(self, key: int) -> None:
        view = self.map.latest()
        assert view.get(key) == self.latest["map"].get(key)
        assert dict(view) == self.latest["map"]

    @rule(key=KEYS)
    def delete(self, key: int) -> None:
        if key in self.latest["map"]:
            del self.map[key]
            del self.latest["map"][key]
        else:
            with pytest.raises(KeyError):
                del self.map[key]

    @rule(key=KEYS)
    def sorted_delete(self, key: int) -> None:
        if key in self.latest["smap"]:
            del self.smap[key]
            del self.latest["smap"][key]
        else:
            with pytest.raises(KeyError):
                del self.smap[key]

    @rule(x=KEYS)
    def add(self, x: int) -> None:
        self.set.add(x)
        self.latest["set"].add(x)

    @rule(xs=st.lists(KEYS, max_size=5, unique=True))
    def add_absent(self, xs: list[int]) -> None:
        fresh = [x for x in xs if x not in self.latest["set"]]
        self.set.add_absent(fresh)
        self.latest["set"].update(fresh)

    @rule(x=KEYS)
    def discard(self, x: int) -> None:
        self.set.discard(x)
        self.latest["set"].discard(x)

    @rule(value=st.integers(min_value=-5, max_value=5))
    def int_set(self, value: int) -> None:
        self.int.set(value)
        self.latest["int"] = value

    @rule()
    def increment(self) -> None:
        self.int.increment()
        self.latest["int"] += 1

    @rule()
    def decrement(self) -> None:
        self.int.decrement()
        self.latest["int"] -= 1

    @rule(value=OBJECTS)
    def obj_set(self, value: str | None) -> None:
        self.obj.set(value)
        self.latest["obj"] = value

    # -- snapshots ---------------------------------------------------------------------

    def latest_epoch(self) -> int | None:
        return max(self.snapshots) if self.snapshots else None

    @rule(step=st.sampled_from([0, 1, 1, 2, 5]))
    def create_snapshot(self, step: int) -> None:
        latest = self.latest_epoch()
        epoch = step if latest is None else latest + step
        self.reg.create_snapshot(epoch)
        if epoch != latest:  # equal: idempotent, the snapshot as first taken stays
            self.snapshots[epoch] = copy.deepcopy(self.latest)

    @precondition(lambda self: self.snapshots)
    @rule(below=st.integers(min_value=1, max_value=3))
    def create_lower_snapshot_fails(self, below: int) -> None:
        latest = self.latest_epoch()
        assert latest is not None
        with pytest.raises(ValueError):
            self.reg.create_snapshot(latest - below)

    @precondition(lambda self: self.snapshots)
    @rule(data=st.data())
    def revert(self, data: st.DataObject) -> None:
        epoch = data.draw(st.sampled_from(sorted(self.snapshots)))
        self.reg.revert_to_snapshot(epoch)
        self.latest = copy.deepcopy(self.snapshots[epoch])
        self.snapshots = {e: s for e, s in self.snapshots.items() if e <= epoch}

    @precondition(lambda self: self.snapshots)
    @rule(data=st.data())
    def delete_up_to(self, data: st.DataObject) -> None:
        live = sorted(self.snapshots)
        epoch = data.draw(st.integers(min_value=live[0] - 1, max_value=live[-1] + 1))
        self.reg.delete_snapshots_up_to(epoch)
        self.snapshots = {e: s for e, s in self.snapshots.items() if e >= epoch}

    @rule()
    def reset(self) -> None:
        self.reg.reset()
        self.latest = empty_state()
        self.snapshots = {}

    @rule(data=st.data())
    def read_dead_epoch(self, data: st.DataObject) -> None:
        epoch = data.draw(st.integers(min_value=-2, max_value=(self.latest_epoch() or 0) + 2))
        if epoch in self.snapshots:
            return
        reads: list[Callable[[], object]] = [
            lambda: self.map.get(0, epoch=epoch),
            lambda: self.map.items(epoch=epoch),
            lambda: self.map.size(epoch=epoch),
            lambda: self.smap.irange(epoch=epoch),
            lambda: self.smap.contains(0, epoch=epoch),
            lambda: self.set.contains(0, epoch=epoch),
            lambda: self.set.elements(epoch=epoch),
            lambda: self.int.get(epoch=epoch),
            lambda: self.obj.get(epoch=epoch),
        ]
        for read in reads:
            with pytest.raises(LookupError, match=f"epoch {epoch}"):
                read()
        with pytest.raises(LookupError, match=f"epoch {epoch}"):
            self.reg.revert_to_snapshot(epoch)

    # -- checks ------------------------------------------------------------------------

    @invariant()
    def epochs_match(self) -> None:
        assert self.reg.epochs() == sorted(self.snapshots)
        assert self.reg.latest_epoch() == self.latest_epoch()

    @invariant()
    def latest_state_matches(self) -> None:
        model = self.latest
        assert dict(self.map) == model["map"]
        assert len(self.map) == len(model["map"])
        assert list(self.smap.items()) == sorted(model["smap"].items())
        assert set(self.set) == model["set"] and len(self.set) == len(model["set"])
        assert self.int.get() == model["int"]
        assert self.obj.get() == model["obj"]
        self.check_at(None, model)

    @invariant()
    def every_live_epoch_matches(self) -> None:
        for epoch, model in self.snapshots.items():
            self.check_at(epoch, model)

    def check_at(self, epoch: int | None, model: dict[str, Any]) -> None:
        m, sm = model["map"], model["smap"]
        assert dict(self.map.items(epoch=epoch)) == m
        assert set(self.map.keys(epoch=epoch)) == set(m)
        assert sorted(self.map.values(epoch=epoch), key=repr) == sorted(m.values(), key=repr)
        assert self.map.size(epoch=epoch) == len(m)
        for key in range(8):
            assert self.map.get(key, "missing", epoch=epoch) == m.get(key, "missing")
            assert self.map.contains(key, epoch=epoch) == (key in m)
            assert self.smap.get(key, "missing", epoch=epoch) == sm.get(key, "missing")
            assert self.set.contains(key, epoch=epoch) == (key in model["set"])
        ordered = sorted(sm)
        assert list(self.smap.items(epoch=epoch)) == [(k, sm[k]) for k in ordered]
        assert list(self.smap.keys(epoch=epoch)) == ordered
        assert self.smap.size(epoch=epoch) == len(sm)
        assert list(self.smap.irange(2, 5, epoch=epoch)) == [k for k in ordered if 2 <= k <= 5]
        assert list(self.smap.irange(2, 5, (False, False), True, epoch)) == [
            k for k in reversed(ordered) if 2 < k < 5
        ]
        assert self.smap.first_key(epoch=epoch) == (ordered[0] if ordered else None)
        assert self.smap.last_key(epoch=epoch) == (ordered[-1] if ordered else None)
        assert self.set.elements(epoch=epoch) == frozenset(model["set"])
        assert self.set.size(epoch=epoch) == len(model["set"])
        assert self.int.get(epoch=epoch) == model["int"]
        assert self.obj.get(epoch=epoch) == model["obj"]


TimelineModel.TestCase.settings = settings(
    max_examples=300,
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_timeline_matches_naive_model = TimelineModel.TestCase
