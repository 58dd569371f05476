"""Eligible leader replicas (KIP-966) at metadata.version 7: who may lead when the
ISR cannot, so a clean election survives an ISR that shrank below min ISR."""

from __future__ import annotations

from controller.api.rpcs import ADMIN_RPCS_BY_NAME
from controller.api.seam import Args
from controller.metadata.configs import (
    AlterConfigOp,
    AlterConfigsResource,
    ConfigResource,
    OpType,
    ResourceType,
)
from controller.metadata.errors import ErrorCode
from controller.metadata.topics import ElectionType, TopicPartition
from controller.records.domain import LeaderRecoveryState
from tests.support.op_context import StateContext
from tests.unit.metadata.support import HEARTBEAT_ISR_LEVEL, SESSION_MS, Harness
from tests.unit.metadata.test_alter_partition import report


def fence(h: Harness, broker_id: int, alive: list[int]) -> None:
    """`broker_id`'s session ends; `alive` heartbeat in time."""
    h.now_ms += SESSION_MS + 1
    for b in alive:
        h.heartbeat(b)
    h.apply(h.state.cluster.fence_stale_brokers(h.now_ms))
    h.check()


def guarded(h: Harness, min_isr: int = 2) -> None:
    h.add_brokers([1, 2, 3])
    h.create("g", assignments=((1, 2, 3),),
             configs=(("min.insync.replicas", str(min_isr)),))


def test_replicas_leaving_an_isr_below_min_isr_become_eligible_leaders() -> None:
    h = Harness()
    guarded(h)
    fence(h, 3, [1, 2])
    assert (h.part("g").isr, h.part("g").elr) == ((1, 2), ())  # still at min ISR
    fence(h, 2, [1])
    assert (h.part("g").isr, h.part("g").elr) == ((1,), (2,))
    # The leader dies too: nobody usable in the ISR or the ELR; the last ISR member
    # stays, the partition is offline, and the out-of-date replica 3 is not elected.
    fence(h, 1, [])
    part = h.part("g")
    assert (part.leader, part.isr, part.elr) == (-1, (1,), (2,))
    assert not h.heartbeat(3).is_fenced
    assert h.part("g").leader == -1
    # The eligible replica comes back: it is elected; the old leader becomes eligible.
    assert not h.heartbeat(2).is_fenced
    part = h.part("g")
    assert (part.leader, part.isr, part.elr) == (2, (2,), (1,))
    assert part.leader_recovery_state is LeaderRecoveryState.RECOVERED
    h.check()


def test_the_elr_empties_once_the_isr_is_back_at_min_isr() -> None:
    h = Harness()
    guarded(h)
    assert report(h, "g", (1,)).error.ok
    assert h.part("g").elr == (2, 3)
    assert report(h, "g", (1, 2)).error.ok  # back to min ISR: nobody needs the ELR
    assert (h.part("g").isr, h.part("g").elr) == ((1, 2), ())
    h.check()


def test_an_elr_member_back_in_the_isr_leaves_the_elr() -> None:
    h = Harness()
    guarded(h, min_isr=3)
    assert report(h, "g", (1,)).error.ok
    assert h.part("g").elr == (2, 3)
    assert report(h, "g", (1, 3)).error.ok
    assert (h.part("g").isr, h.part("g").elr) == ((1, 3), (2,))
    h.check()


def test_an_unclean_election_clears_the_elr() -> None:
    h = Harness()
    guarded(h)
    fence(h, 3, [1, 2])
    fence(h, 2, [1])
    fence(h, 1, [])
    h.heartbeat(3)  # out of date, and neither in the ISR nor the ELR
    results = h.apply(h.state.replication.elect_leaders([TopicPartition("g", 0)],
                                                        ElectionType.UNCLEAN))
    assert results[0].error.code is ErrorCode.NONE
    part = h.part("g")
    assert (part.leader, part.isr, part.elr) == (3, (3,), ())
    assert part.leader_recovery_state is LeaderRecoveryState.RECOVERING
    h.check()


def test_below_level_7_there_is_no_elr() -> None:
    h = Harness(metadata_version=HEARTBEAT_ISR_LEVEL)
    guarded(h)
    fence(h, 3, [1, 2])
    fence(h, 2, [1])
    assert (h.part("g").isr, h.part("g").elr) == ((1,), ())


def test_min_isr_one_never_needs_an_elr() -> None:
    h = Harness()
    guarded(h, min_isr=1)
    fence(h, 3, [1, 2])
    fence(h, 2, [1])
    assert h.part("g").elr == ()


def alter_min_isr(h: Harness, resource: ConfigResource, value: str | None) -> None:
    """IncrementalAlterConfigs as the admin API runs it (its ELR clearing included)."""
    op = ADMIN_RPCS_BY_NAME["IncrementalAlterConfigs"].op
    assert op is not None
    op_type = OpType.SET if value is not None else OpType.DELETE
    result = op.run(StateContext(h.state), Args((AlterConfigsResource(
        resource, (AlterConfigOp("min.insync.replicas", op_type, value),)),)), 0, h.now_ms)
    (answer,) = h.apply(result)
    assert answer.error.ok, answer.error
    h.check()


def test_a_min_isr_change_clears_the_elr_of_the_topic() -> None:
    """Found by the whole-system simulation: min ISR 2 -> 1 let the HW move with the
    leader alone while the ELR still named a replica that lacked those records; the
    controller could then elect it and lose them. Kafka drops the ELR on any change of
    the config; a change to another topic leaves it alone."""
    h = Harness()
    guarded(h)
    h.create("other", assignments=((1, 2, 3),), configs=(("min.insync.replicas", "2"),))
    for topic in ("g", "other"):
        assert report(h, topic, (1,)).error.ok
        assert h.part(topic).elr == (2, 3)
    epoch = h.part("g").partition_epoch
    alter_min_isr(h, ConfigResource(ResourceType.TOPIC, "g"), "1")
    assert (h.part("g").isr, h.part("g").elr) == ((1,), ())
    assert h.part("g").partition_epoch == epoch + 1  # the brokers see the change
    assert h.part("other").elr == (2, 3)
    # A default every topic may inherit: every ELR goes.
    alter_min_isr(h, ConfigResource(ResourceType.BROKER, ""), "2")
    assert h.part("other").elr == ()
