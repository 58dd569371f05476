"""Derived indexes over the partitions, kept by replay in timeline sets.

- broker -> partitions it is a replica of (ISR shrink/expansion without a full scan);
- broker -> partitions it is a replica of but not in the ISR (ISR expansion);
- partitions without a leader (offline) and partitions being reassigned;
- broker -> how many partitions it leads (a controlled shutdown asks "does it still
  lead anything" on every heartbeat: a scan of a large broker's partitions took
  ~75 ms once it led nothing).

They live on the same ``SnapshotRegistry`` as the partitions, so a revert undoes them
with the rest. The broker indexes are plain dicts of timeline sets that only ever
gain keys: an empty set means the same as a missing one, so the dicts themselves
need no history.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from controller.records.domain import NO_LEADER, PartitionRegistration
from timeline import SnapshotRegistry, TimelineHashMap, TimelineHashSet

PartKey = tuple[str, int]  # (topic id, partition index)


class PartitionIndex:
    def __init__(self, registry: SnapshotRegistry) -> None:
        self._registry = registry
        self.replica_of: dict[int, TimelineHashSet[PartKey]] = {}
        self.out_of_isr: dict[int, TimelineHashSet[PartKey]] = {}
        self.leaderless: TimelineHashSet[PartKey] = TimelineHashSet(registry)
        self.reassigning: TimelineHashSet[PartKey] = TimelineHashSet(registry)
        # Led by another replica than its first (preferred) one: Kafka's
        # PreferredReplicaImbalanceCount, kept as an index (no scan to count it).
        self.not_preferred: TimelineHashSet[PartKey] = TimelineHashSet(registry)
        # Broker id -> partitions it leads (> 0; a broker leading none is absent).
        self.led_count: TimelineHashMap[int, int] = TimelineHashMap(registry)
        self._led_latest = self.led_count.latest()  # read at C speed on every leader move

    def reindex(
        self, key: PartKey, old: PartitionRegistration | None, new: PartitionRegistration | None
    ) -> None:
        """Partition ``key`` went from ``old`` to ``new`` (None: absent). The indexes
        agree with ``old``, so only what differs is touched: most changes move a
        leader or an ISR and leave the replicas as they are (a broker's fencing
        replays hundreds of thousands of them, on every controller)."""
        if old is None:
            if new is not None:
                self.add_new(((key, new),))
            return
        if new is None:
            self._drop(key, old)
            return
        leader_changed = old.leader != new.leader
        if leader_changed:
            self._count_led(old.leader, -1)
            self._count_led(new.leader, 1)
            if new.leader == NO_LEADER:
                self.leaderless.add(key)
            elif old.leader == NO_LEADER:
                self.leaderless.discard(key)
        replicas = new.replicas
        replicas_changed = old.replicas != replicas
        if replicas_changed:
            old_replicas, new_replicas = set(old.replicas), set(replicas)
            for broker_id in old_replicas - new_replicas:
                self.replica_of[broker_id].discard(key)
            for broker_id in new_replicas - old_replicas:
                self._index_set(self.replica_of, broker_id).add(key)
            old_out = old_replicas.difference(old.isr)
            new_out = new_replicas.difference(new.isr)
            for broker_id in old_out - new_out:
                self.out_of_isr[broker_id].discard(key)
            for broker_id in new_out - old_out:
                self._index_set(self.out_of_isr, broker_id).add(key)
        elif old.isr != new.isr:
            # Same replicas: a replica that left the ISR is now out of it, one that
            # joined is back (out of ISR = replicas minus ISR).
            for broker_id in old.isr:
                if broker_id not in new.isr and broker_id in replicas:
                    self._index_set(self.out_of_isr, broker_id).add(key)
            for broker_id in new.isr:
                if broker_id not in old.isr and broker_id in replicas:
                    self.out_of_isr[broker_id].discard(key)
        if new.adding_replicas != old.adding_replicas \
                or new.removing_replicas != old.removing_replicas:
            if new.adding_replicas or new.removing_replicas:
                self.reassigning.add(key)
            else:
                self.reassigning.discard(key)
        if leader_changed or replicas_changed:
            preferred_off = _not_preferred(new)
            if preferred_off != _not_preferred(old):
                if preferred_off:
                    self.not_preferred.add(key)
                else:
                    self.not_preferred.discard(key)

    def _drop(self, key: PartKey, old: PartitionRegistration) -> None:
        """Partition ``key`` (``old``) is gone."""
        self._count_led(old.leader, -1)
        for broker_id in old.replicas:
            self.replica_of[broker_id].discard(key)
            if broker_id not in old.isr:
                self.out_of_isr[broker_id].discard(key)
        self.leaderless.discard(key)
        self.reassigning.discard(key)
        self.not_preferred.discard(key)

    def add_new(self, fresh: Iterable[tuple[PartKey, PartitionRegistration]]) -> None:
        """`reindex` of each of ``fresh``, partitions that did not exist (the hot path
        of creating topics and of loading a snapshot): only additions, keys gathered
        per broker, one ``add_absent`` each."""
        by_broker: dict[int, list[PartKey]] = {}
        out_of_isr: dict[int, list[PartKey]] = {}
        leaders: dict[int, int] = {}
        for key, new in fresh:
            leader, replicas = new.leader, new.replicas
            leaders[leader] = leaders.get(leader, 0) + 1
            for broker_id in replicas:
                found = by_broker.get(broker_id)
                if found is None:
                    by_broker[broker_id] = [key]
                else:
                    found.append(key)
            if new.isr != replicas:
                for broker_id in set(replicas) - set(new.isr):
                    out_of_isr.setdefault(broker_id, []).append(key)
            if leader == NO_LEADER:
                self.leaderless.add(key)
            elif replicas and leader != replicas[0]:  # `_not_preferred`, inlined (hot)
                self.not_preferred.add(key)
            if new.adding_replicas or new.removing_replicas:
                self.reassigning.add(key)
        for broker_id, keys in by_broker.items():
            self._index_set(self.replica_of, broker_id).add_absent(keys)
        for broker_id, keys in out_of_isr.items():
            self._index_set(self.out_of_isr, broker_id).add_absent(keys)
        for broker_id, count in leaders.items():
            self._count_led(broker_id, count)

    def _count_led(self, broker_id: int, delta: int) -> None:
        if broker_id == NO_LEADER:
            return
        count = self._led_latest.get(broker_id, 0) + delta
        assert count >= 0, (broker_id, count)
        if count:
            self.led_count[broker_id] = count
        else:
            del self.led_count[broker_id]

    def _index_set(
        self, index: dict[int, TimelineHashSet[PartKey]], broker_id: int
    ) -> TimelineHashSet[PartKey]:
        found = index.get(broker_id)
        if found is None:
            found = index[broker_id] = TimelineHashSet(self._registry)
        return found

    def check(self, partitions: Iterable[tuple[PartKey, PartitionRegistration]]) -> None:
        """Assert the indexes agree with ``partitions``, every one of them (for tests)."""
        items = list(partitions)
        replica_of: dict[int, set[PartKey]] = {}
        out_of_isr: dict[int, set[PartKey]] = {}
        for key, part in items:
            for broker_id in part.replicas:
                replica_of.setdefault(broker_id, set()).add(key)
                if broker_id not in part.isr:
                    out_of_isr.setdefault(broker_id, set()).add(key)
        for index, expected in ((self.replica_of, replica_of), (self.out_of_isr, out_of_isr)):
            actual = {b: set(s) for b, s in index.items() if s}
            assert actual == expected, (actual, expected)
        led = Counter(p.leader for _k, p in items if p.leader != NO_LEADER)
        assert dict(self.led_count.items()) == dict(led), (dict(self.led_count.items()), led)
        leaderless = {k for k, p in items if p.leader == NO_LEADER}
        assert set(self.leaderless) == leaderless
        moving = {k for k, p in items if p.adding_replicas or p.removing_replicas}
        assert set(self.reassigning) == moving
        assert set(self.not_preferred) == {k for k, p in items if _not_preferred(p)}

    def under_replicated_count(self, epoch: int | None = None) -> int:
        """Partitions with a replica out of the ISR (each counted once)."""
        keys: set[PartKey] = set()
        for out in self.out_of_isr.values():
            keys.update(out.elements(epoch))
        return len(keys)


def _not_preferred(part: PartitionRegistration) -> bool:
    return part.leader != NO_LEADER and bool(part.replicas) and part.leader != part.replicas[0]
