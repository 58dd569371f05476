"""`PartitionIndex.reindex` against the indexes rebuilt from scratch, for any sequence
of registrations (including ones no controller writes, such as an ISR member that is
not a replica: replay must still keep the indexes right), and across a revert."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from controller.metadata.partition_index import PartitionIndex, PartKey
from controller.records.domain import NO_LEADER, PartitionRegistration
from timeline import SnapshotRegistry

# Few brokers and no repeats (unlike `strategies.partition_registrations`): a replica
# listed twice is refused before replay, and few brokers make indexes overlap.
_brokers = st.lists(st.integers(0, 5), max_size=4, unique=True).map(tuple)
registrations = st.builds(
    PartitionRegistration,
    replicas=_brokers,
    isr=_brokers,
    removing_replicas=_brokers,
    adding_replicas=_brokers,
    leader=st.integers(NO_LEADER, 5),
)
KEYS: list[PartKey] = [("t1", 0), ("t1", 1), ("t2", 0)]
steps = st.lists(st.tuples(st.sampled_from(KEYS), st.none() | registrations), max_size=30)


@settings(max_examples=300)
@given(first=steps, second=steps)
def test_reindex_keeps_every_index_equal_to_a_rebuild(
    first: list[tuple[PartKey, PartitionRegistration | None]],
    second: list[tuple[PartKey, PartitionRegistration | None]],
) -> None:
    registry = SnapshotRegistry()
    index = PartitionIndex(registry)
    partitions: dict[PartKey, PartitionRegistration] = {}

    def run(changes: list[tuple[PartKey, PartitionRegistration | None]]) -> None:
        for key, new in changes:
            index.reindex(key, partitions.get(key), new)
            if new is None:
                partitions.pop(key, None)
            else:
                partitions[key] = new
            index.check(partitions.items())

    run(first)
    registry.create_snapshot(1)
    saved = dict(partitions)
    run(second)
    registry.revert_to_snapshot(1)
    index.check(saved.items())
