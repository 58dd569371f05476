"""ReadBarriers (controller/raft/reads.py) case by case: a read waits for a majority
of voters to echo a barrier raised after it; reads share a barrier until it is sent;
observers and barriers the leader never sent prove nothing."""

from __future__ import annotations

from controller.raft.reads import MAX_PENDING_READS, ReadBarriers, ReadState


def test_a_read_waits_for_a_majority_to_echo_its_barrier() -> None:
    reads = ReadBarriers(1, frozenset({1, 2, 3, 4, 5}))
    assert reads.add(10, 7)
    barrier = reads.barrier_for_response()
    reads.echoed(2, barrier)
    assert reads.confirmed() == []  # us + 2 of 5: not a majority
    reads.echoed(3, barrier - 1)  # an echo of an older barrier proves nothing new
    assert reads.confirmed() == []
    reads.echoed(4, barrier)
    assert reads.confirmed() == [ReadState(10, 7)]
    assert reads.confirmed() == []  # popped once


def test_reads_share_a_barrier_until_it_is_sent() -> None:
    reads = ReadBarriers(1, frozenset({1, 2, 3}))
    reads.add(1, 5)
    reads.add(2, 5)
    first = reads.barrier_for_response()
    reads.add(3, 6)  # after the barrier went out: a new one
    assert reads.barrier_for_response() == first + 1
    reads.echoed(2, first)
    assert reads.confirmed() == [ReadState(1, 5), ReadState(2, 5)]
    reads.echoed(2, first + 1)
    assert reads.confirmed() == [ReadState(3, 6)]


def test_observers_and_unsent_barriers_prove_nothing() -> None:
    reads = ReadBarriers(1, frozenset({1, 2, 3}))
    reads.add(1, 5)
    current = reads.barrier_for_response()
    reads.echoed(9, current)  # an observer
    reads.echoed(1, current)  # ourselves
    reads.echoed(2, current + 1000)  # a barrier we never sent (forged or buggy)
    assert reads.confirmed() == []


def test_a_single_voter_confirms_at_once_and_pending_reads_are_bounded() -> None:
    reads = ReadBarriers(1, frozenset({1}))
    for i in range(MAX_PENDING_READS):
        assert reads.add(i, 0)
    assert not reads.add(-1, 0), "past the bound a read is refused"
    assert len(reads.confirmed()) == MAX_PENDING_READS
