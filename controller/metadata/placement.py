"""Rack-aware replica placement and the random source it draws from.

No randomness is imported here: the caller passes a ``RandomSource`` (a
``random.Random`` fits), so placement is deterministic given its state, and a
deterministic simulation can drive it.

Placement (after Kafka's rack-aware assignment, written afresh): brokers are ordered
so racks alternate (r1, r2, r3, r1, r2, ...); partition p's first replica (the
preferred leader) is broker ``(start + p) mod n`` of that order, so leaders spread
evenly; followers are taken from a shifted walk of the same order, skipping brokers on
a rack already used until every rack has one replica. When the replication factor is
at most the number of racks, every replica of a partition is on a different rack. If
some broker has no rack, placement ignores racks.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Protocol


class RandomSource(Protocol):
    """The part of ``random.Random`` the managers use."""

    def randrange(self, start: int, stop: int | None = ..., step: int = ...) -> int: ...

    def getrandbits(self, k: int, /) -> int: ...


def new_uuid(rng: RandomSource) -> str:
    """A version-4 uuid string drawn from ``rng`` (canonical lower-case form)."""
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


def rack_alternated(racks: Mapping[int, str | None]) -> list[int]:
    """Broker ids ordered so consecutive brokers are on different racks where possible
    (ids ascending within a rack; racks in name order). Ignores racks if any is None."""
    if any(rack is None for rack in racks.values()):
        return sorted(racks)
    by_rack: dict[str, list[int]] = {}
    for broker_id in sorted(racks):
        rack = racks[broker_id]
        assert rack is not None
        by_rack.setdefault(rack, []).append(broker_id)
    columns = [by_rack[rack] for rack in sorted(by_rack)]
    ordered = [ids[i] for i in range(max(map(len, columns))) for ids in columns if i < len(ids)]
    assert sorted(ordered) == sorted(racks)
    return ordered


def place_replicas(
    racks: Mapping[int, str | None],
    *,
    partitions: int,
    replication_factor: int,
    rng: RandomSource,
    first_partition: int = 0,
) -> list[tuple[int, ...]]:
    """Replica lists for ``partitions`` partitions over the brokers in ``racks``
    (broker id -> rack), numbered from ``first_partition``."""
    table = _placement_table(tuple(sorted(racks.items(), key=_by_broker)), replication_factor)
    n = table.brokers
    start = rng.randrange(n)
    shift0 = rng.randrange(n)
    lists = table.lists
    # The shift changes every n partitions so follower sets vary, not just rotate.
    return [lists[(start + p) % n][(shift0 + p // n) % n]
            for p in range(first_partition, first_partition + partitions)]


def _by_broker(item: tuple[int, str | None]) -> int:
    return item[0]


class _PlacementTable:
    """Every replica list placement can produce for one broker set and replication
    factor: ``lists[first][shift]`` (n x n of them), computed once and reused while
    the brokers stay the same -- a 100-partition topic then costs 100 lookups."""

    __slots__ = ("brokers", "lists")

    def __init__(self, racks: Mapping[int, str | None], replication_factor: int) -> None:
        ordered = rack_alternated(racks)
        n = self.brokers = len(ordered)
        assert 1 <= replication_factor <= n, (replication_factor, n)
        ignore_racks = any(rack is None for rack in racks.values())
        # Without racks everywhere, each broker counts as its own rack.
        rack_of = {b: f"broker-{b}" if ignore_racks else str(racks[b]) for b in ordered}
        rack_count = len(set(rack_of.values()))
        self.lists = [[_place_one(ordered, rack_of, rack_count, first, shift, replication_factor)
                       for shift in range(n)] for first in range(n)]


def _place_one(ordered: list[int], rack_of: Mapping[int, str], rack_count: int, first: int,
               shift: int, replication_factor: int) -> tuple[int, ...]:
    n = len(ordered)
    walk = [ordered[(first + 1 + shift + j) % n] for j in range(n)]
    chosen = [ordered[first]]
    used = {rack_of[ordered[first]]}
    while len(chosen) < replication_factor:
        before = len(chosen)
        for broker in walk:
            if len(chosen) == replication_factor:
                break
            if broker in chosen or (rack_of[broker] in used and len(used) < rack_count):
                continue
            chosen.append(broker)
            used.add(rack_of[broker])
            if len(used) == rack_count:
                used = set()  # every rack has one; start a new round
        if len(chosen) == before:
            # The racks not yet used this round have no unchosen broker left.
            used = set()
    assert len(set(chosen)) == replication_factor
    return tuple(chosen)


# (brokers and racks, replication factor) -> table. Small: one entry per broker set
# seen (brokers come and go rarely); cleared past the bound.
_TABLES: dict[tuple[tuple[tuple[int, str | None], ...], int], _PlacementTable] = {}
_TABLES_MAX = 64


def _placement_table(racks: tuple[tuple[int, str | None], ...],
                     replication_factor: int) -> _PlacementTable:
    key = (racks, replication_factor)
    table = _TABLES.get(key)
    if table is None:
        if len(_TABLES) >= _TABLES_MAX:
            _TABLES.clear()
        table = _TABLES[key] = _PlacementTable(dict(racks), replication_factor)
    return table
