"""AlterPartition at metadata.version 7: the ISR grows only when the leader reports a
caught-up follower; every stale or wrong report is refused and changes nothing."""

from __future__ import annotations

from controller.metadata.alter_partition import (
    AlterPartitionItem,
    AlterPartitionRequest,
    AlterPartitionResult,
    IsrMember,
)
from controller.metadata.errors import ErrorCode
from controller.metadata.topics import ReassignmentRequest
from controller.records.domain import PartitionRegistration
from tests.unit.metadata.support import HEARTBEAT_ISR_LEVEL, SESSION_MS, Harness


def epoch_of(h: Harness, broker_id: int) -> int:
    broker = h.state.cluster.broker(broker_id)
    assert broker is not None
    return broker.broker_epoch


def report(h: Harness, topic: str, isr: tuple[int, ...], *, sender: int | None = None,
           leader_epoch: int | None = None, partition_epoch: int | None = None,
           epochs: dict[int, int] | None = None, sender_epoch: int | None = None
           ) -> AlterPartitionResult:
    part = h.part(topic)
    topic_id = h.state.replication.topic_id(topic)
    assert topic_id is not None
    sender = part.leader if sender is None else sender
    members = tuple(IsrMember(b, (epochs or {}).get(b, epoch_of(h, b))) for b in isr)
    request = AlterPartitionRequest(
        sender, epoch_of(h, sender) if sender_epoch is None else sender_epoch,
        (AlterPartitionItem(topic_id, 0,
                            part.leader_epoch if leader_epoch is None else leader_epoch,
                            part.partition_epoch if partition_epoch is None else partition_epoch,
                            members),))
    before = h.committed
    results = h.apply(h.state.replication.alter_partition(request))
    assert len(results) == 1
    if not results[0].error.ok:
        assert h.committed == before, "a refused report wrote something"
    h.check()
    return results[0]


def fenced_and_back(h: Harness, broker_id: int, others: list[int]) -> None:
    h.now_ms = SESSION_MS + 1
    for b in others:
        h.heartbeat(b)
    h.apply(h.state.cluster.fence_stale_brokers(h.now_ms))
    assert not h.heartbeat(broker_id).is_fenced


def test_a_returning_broker_rejoins_only_when_its_leader_reports_it() -> None:
    h = Harness()
    h.add_brokers([1, 2, 3])
    h.create("t", assignments=((1, 2, 3),))
    fenced_and_back(h, 3, [1, 2])
    assert h.part("t").isr == (1, 2)  # unfenced, heartbeating, but not in sync yet
    result = report(h, "t", (1, 2, 3))
    assert result.error.ok
    assert h.part("t").isr == (1, 2, 3)
    assert result.registration == h.part("t")


def test_the_same_report_twice_writes_nothing_the_second_time() -> None:
    h = Harness()
    h.add_brokers([1, 2])
    h.create("t", assignments=((1, 2),))
    assert report(h, "t", (1,)).error.ok
    before = h.committed
    assert report(h, "t", (1,)).error.ok
    assert h.committed == before


def test_a_shrink_is_accepted_and_the_leader_keeps_leading() -> None:
    h = Harness()
    h.add_brokers([1, 2, 3])
    h.create("t", assignments=((1, 2, 3),))
    before: PartitionRegistration = h.part("t")
    assert report(h, "t", (1, 3)).error.ok
    after = h.part("t")
    assert after.isr == (1, 3) and after.leader == 1
    assert after.leader_epoch == before.leader_epoch
    assert after.partition_epoch == before.partition_epoch + 1


def test_stale_or_wrong_reports_are_refused() -> None:
    h = Harness()
    h.add_brokers([1, 2, 3, 4])
    h.create("t", assignments=((1, 2, 3),))
    part = h.part("t")
    cases = [
        (dict(sender=2), ErrorCode.NOT_LEADER_OR_FOLLOWER),
        (dict(leader_epoch=part.leader_epoch - 1), ErrorCode.FENCED_LEADER_EPOCH),
        (dict(partition_epoch=part.partition_epoch + 1), ErrorCode.INVALID_UPDATE_VERSION),
        (dict(sender_epoch=epoch_of(h, 1) + 100), ErrorCode.STALE_BROKER_EPOCH),
    ]
    for kwargs, code in cases:
        assert report(h, "t", (1, 2), **kwargs).error.code is code, kwargs  # type: ignore[arg-type]
    assert report(h, "t", (2, 3)).error.code is ErrorCode.INVALID_REQUEST  # no leader
    assert report(h, "t", (1, 1, 2)).error.code is ErrorCode.INVALID_REQUEST
    assert report(h, "t", (1, 4)).error.code is ErrorCode.INELIGIBLE_REPLICA  # not a replica
    assert h.part("t") == part


def test_a_member_must_be_the_incarnation_that_caught_up() -> None:
    h = Harness()
    h.add_brokers([1, 2, 3])
    h.create("t", assignments=((1, 2, 3),))
    fenced_and_back(h, 3, [1, 2])
    old_epoch = epoch_of(h, 3)
    # Broker 3 restarts: the leader's view of it (the old epoch) no longer counts.
    h.now_ms += SESSION_MS + 1
    h.heartbeat(1)
    h.heartbeat(2)
    h.register(3, incarnation="again")
    # Fenced (it has not heartbeat since registering): not eligible.
    assert report(h, "t", (1, 2, 3)).error.code is ErrorCode.INELIGIBLE_REPLICA
    h.heartbeat(3)
    refused = report(h, "t", (1, 2, 3), epochs={3: old_epoch})
    assert refused.error.code is ErrorCode.INELIGIBLE_REPLICA
    assert "registered again" in refused.error.message
    assert report(h, "t", (1, 2, 3)).error.ok


def test_below_level_7_the_report_is_refused_and_heartbeats_rule() -> None:
    h = Harness(metadata_version=HEARTBEAT_ISR_LEVEL)
    h.add_brokers([1, 2])
    h.create("t", assignments=((1, 2),))
    refused = report(h, "t", (1,))
    assert refused.error.code is ErrorCode.UNSUPPORTED_VERSION
    assert "metadata.version 7" in refused.error.message


def test_a_reassignment_completes_when_the_leader_reports_the_new_replicas() -> None:
    h = Harness()
    h.add_brokers([1, 2, 3, 4])
    h.create("r", assignments=((1, 2),))
    h.apply(h.state.replication.alter_partition_reassignments(
        [ReassignmentRequest("r", 0, (3, 4))]))
    moving = h.part("r")
    assert moving.adding_replicas == (3, 4)
    h.heartbeat(3)
    h.heartbeat(4)
    assert h.part("r").adding_replicas == (3, 4)  # heartbeats do not complete it
    assert report(h, "r", (1, 2, 3)).error.ok
    assert h.part("r").adding_replicas == (3, 4)
    assert report(h, "r", (1, 2, 3, 4)).error.ok
    done = h.part("r")
    assert done.replicas == (3, 4) and not done.adding_replicas and done.leader in (3, 4)


def test_an_offline_partition_still_comes_back_with_its_last_in_sync_replica() -> None:
    h = Harness()
    h.add_brokers([1, 2])
    h.create("o", assignments=((1, 2),))
    assert report(h, "o", (1,)).error.ok  # 2 fell behind
    h.now_ms = SESSION_MS + 1
    h.heartbeat(2)
    h.apply(h.state.cluster.fence_stale_brokers(h.now_ms))
    assert h.part("o").leader == -1 and h.part("o").isr == (1,)  # 2 is not eligible
    assert not h.heartbeat(1).is_fenced
    assert h.part("o").leader == 1


def test_removing_a_replica_moves_the_leader_epoch_at_level_7() -> None:
    """A reassignment that removes a replica states the leader (it stays), so the leader
    epoch moves: a leader whose metadata skipped the removal sees a new leadership and
    forgets the fetch progress of the removed replica's previous life. Found by the
    whole-system simulation: a replica removed and re-added with an empty log was
    reported in sync from that stale progress, then elected."""
    h = Harness()
    h.add_brokers([1, 2, 3])
    h.create("moved", assignments=((1, 2, 3),))
    before = h.part("moved")
    (result,) = h.apply(h.state.replication.alter_partition_reassignments(
        [ReassignmentRequest("moved", 0, (1, 2))]))
    assert result.error.ok, result.error
    after = h.part("moved")
    assert (after.leader, after.replicas) == (1, (1, 2))
    assert after.leader_epoch == before.leader_epoch + 1
    # Adding a replica moves only the partition epoch.
    (result,) = h.apply(h.state.replication.alter_partition_reassignments(
        [ReassignmentRequest("moved", 0, (1, 2, 3))]))
    assert result.error.ok and h.part("moved").leader_epoch == after.leader_epoch
    h.check()


def test_below_level_7_a_removal_keeps_the_leader_epoch() -> None:
    h = Harness(metadata_version=HEARTBEAT_ISR_LEVEL)
    h.add_brokers([1, 2, 3])
    h.create("moved", assignments=((1, 2, 3),))
    epoch = h.part("moved").leader_epoch
    (result,) = h.apply(h.state.replication.alter_partition_reassignments(
        [ReassignmentRequest("moved", 0, (1, 2))]))
    assert result.error.ok and h.part("moved").leader_epoch == epoch
