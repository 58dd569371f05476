"""Replica placement and the partition change builder, on their own."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from controller.metadata.partition_change import Election, build_partition_change, change_record
from controller.metadata.placement import _place_one, new_uuid, place_replicas, rack_alternated
from controller.records.codec import decode_record, encode_record
from controller.records.domain import (
    NO_LEADER,
    LeaderRecoveryState,
    PartitionDelta,
    PartitionRegistration,
)
from controller.records.partition_wire import encode_change

RACK_MAPS = st.dictionaries(
    st.integers(0, 40), st.sampled_from(["a", "b", "c", "d"]), min_size=1, max_size=12
)


def test_rack_alternated_interleaves_racks() -> None:
    assert rack_alternated({1: "a", 2: "a", 3: "b", 4: "b", 5: "c"}) == [1, 3, 5, 2, 4]
    assert rack_alternated({3: None, 1: "a", 2: "b"}) == [1, 2, 3]


def test_placement_is_deterministic_given_the_random_source() -> None:
    racks = {i: "abc"[i % 3] for i in range(9)}
    first = place_replicas(racks, partitions=20, replication_factor=3, rng=random.Random(7))
    again = place_replicas(racks, partitions=20, replication_factor=3, rng=random.Random(7))
    assert first == again
    assert new_uuid(random.Random(1)) == new_uuid(random.Random(1))
    assert len(new_uuid(random.Random(1))) == 36


@settings(max_examples=200, deadline=None)
@given(racks=RACK_MAPS, data=st.data())
def test_placement_spreads_over_racks_and_leaders(
    racks: dict[int, str], data: st.DataObject
) -> None:
    n = len(racks)
    rf = data.draw(st.integers(1, n))
    rounds = data.draw(st.integers(1, 3))
    seed = data.draw(st.integers(0, 10**6))
    placed = place_replicas(
        racks, partitions=n * rounds, replication_factor=rf, rng=random.Random(seed)
    )
    rack_count = len(set(racks.values()))
    for replicas in placed:
        assert len(replicas) == rf and len(set(replicas)) == rf
        assert set(replicas) <= set(racks)
        assert len({racks[b] for b in replicas}) == min(rf, rack_count)
    leaders = [replicas[0] for replicas in placed]
    assert all(leaders.count(b) == rounds for b in racks)


def _part(**kw: object) -> PartitionRegistration:
    defaults: dict[str, object] = {"replicas": (1, 2, 3), "isr": (1, 2, 3), "leader": 1}
    defaults.update(kw)
    return PartitionRegistration(**defaults)  # type: ignore[arg-type]


def _build(part: PartitionRegistration, usable: set[int], **kw: object) -> PartitionDelta | None:
    unclean = bool(kw.pop("unclean", False))
    return build_partition_change(
        part,
        is_usable=usable.__contains__,
        unclean_allowed=lambda: unclean,
        **kw,  # type: ignore[arg-type]
    )


def test_no_change_gives_no_delta() -> None:
    assert _build(_part(), {1, 2, 3}) is None


def test_isr_shrink_of_a_follower_keeps_the_leader() -> None:
    assert _build(_part(), {1, 3}, isr=(1, 3)) == PartitionDelta(isr=(1, 3))


def test_leader_leaving_elects_first_usable_in_sync_replica() -> None:
    delta = _build(_part(), {2, 3}, isr=(2, 3))
    assert delta == PartitionDelta(isr=(2, 3), leader=2)
    merged = _part().apply(delta)
    assert merged.leader_epoch == 1 and merged.partition_epoch == 1


def test_isr_never_empties_and_partition_goes_offline() -> None:
    assert _build(_part(isr=(1,)), set(), isr=()) == PartitionDelta(leader=NO_LEADER)


def test_unclean_election_marks_recovering() -> None:
    delta = _build(_part(isr=(1,), leader=NO_LEADER), {3}, unclean=True)
    assert delta == PartitionDelta(isr=(3,), leader=3,
                                   leader_recovery_state=LeaderRecoveryState.RECOVERING)


def test_the_unclean_flag_is_asked_only_when_no_in_sync_replica_can_lead() -> None:
    asked: list[bool] = []

    def flag() -> bool:
        asked.append(True)
        return False

    def build(part: PartitionRegistration, usable: set[int], **kw: object) -> object:
        return build_partition_change(part, is_usable=usable.__contains__,
                                      unclean_allowed=flag, **kw)  # type: ignore[arg-type]

    assert build(_part(), {2, 3}, isr=(2, 3)) is not None
    assert asked == []  # replica 2 is in sync and usable: no config lookup
    assert build(_part(isr=(1,)), {3}, isr=()) == PartitionDelta(leader=NO_LEADER)
    assert asked == [True]


def test_a_change_record_states_its_delta_and_encodes_to_the_same_bytes() -> None:
    cleared = PartitionDelta(removing_replicas=())
    assert _build(_part(removing_replicas=(3,)), {1, 2, 3}, removing=()) == cleared
    for delta in (cleared, PartitionDelta(isr=(2, 3), leader=2),
                  PartitionDelta(leader=NO_LEADER, replicas=(4, 5), adding_replicas=(5,),
                                 leader_recovery_state=LeaderRecoveryState.RECOVERING)):
        record = change_record("t", 4, delta)
        data = encode_record(record)
        decoded = decode_record(data).partition_change
        assert (decoded.topic_id, decoded.partition_id) == ("t", 4)
        # A list set empty stays present (cleared), not absent (unchanged).
        assert PartitionDelta.of(decoded) == delta
        assert encode_change("t", 4, delta) == data


def test_preferred_election() -> None:
    assert _build(_part(leader=2), {1, 2, 3}, election=Election.PREFERRED) == PartitionDelta(
        leader=1)


def test_reassignment_completes_when_adding_replicas_are_in_sync() -> None:
    moving = _part(
        replicas=(3, 4, 1, 2), isr=(1, 2), adding_replicas=(3, 4), removing_replicas=(1, 2)
    )
    partial = _build(moving, {1, 2, 3, 4}, isr=(1, 2, 3))
    assert partial == PartitionDelta(isr=(1, 2, 3))
    done = _build(moving, {1, 2, 3, 4}, isr=(1, 2, 3, 4))
    assert done is not None
    after = moving.apply(done)
    assert after.replicas == (3, 4) and after.isr == (3, 4) and after.leader == 3
    assert after.adding_replicas == () and after.removing_replicas == ()


def _reference_placement(racks: dict[int, str | None], partitions: int, rf: int,
                         rng: random.Random, first_partition: int) -> list[tuple[int, ...]]:
    """The placement walk computed partition by partition (no table, no cache), as
    specified in placement.py's docstring: the table must give exactly these lists.
    The walk itself (`_place_one`) is checked by the rack and leader spread tests."""
    ordered = rack_alternated(racks)
    n = len(ordered)
    ignore = any(r is None for r in racks.values())
    rack_of = {b: f"broker-{b}" if ignore else str(racks[b]) for b in ordered}
    rack_count = len(set(rack_of.values()))
    start, shift0 = rng.randrange(n), rng.randrange(n)
    return [_place_one(ordered, rack_of, rack_count, (start + p) % n, (shift0 + p // n) % n, rf)
            for p in range(first_partition, first_partition + partitions)]


@settings(max_examples=100, deadline=None)
@given(racks=st.dictionaries(st.integers(0, 40), st.sampled_from(["a", "b", "c", None]),
                             min_size=1, max_size=12), data=st.data())
def test_placement_table_gives_the_walks_lists(
    racks: dict[int, str | None], data: st.DataObject
) -> None:
    rf = data.draw(st.integers(1, len(racks)))
    partitions = data.draw(st.integers(1, 40))
    first = data.draw(st.integers(0, 30))
    seed = data.draw(st.integers(0, 1000))
    # Twice: the second call reuses the cached table.
    for _ in range(2):
        got = place_replicas(racks, partitions=partitions, replication_factor=rf,
                             rng=random.Random(seed), first_partition=first)
        want = _reference_placement(racks, partitions, rf, random.Random(seed), first)
        assert got == want
