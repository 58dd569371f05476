"""Cluster manager: registration, heartbeats, fencing, controlled shutdown, unregister."""

from __future__ import annotations

import random

import attrs
import pytest

from controller.metadata import BrokerHeartbeatRequest, BrokerRegistrationRequest, ErrorCode
from controller.records import record_type
from controller.records.domain import FeatureRange, Listener
from tests.unit.metadata.support import CLUSTER_ID, HEARTBEAT_ISR_LEVEL, SESSION_MS, Harness


def test_registration_epoch_is_the_record_offset_and_broker_starts_fenced() -> None:
    h = Harness()
    first = h.next_offset
    epoch = h.register(1, rack="r1")
    assert epoch == first
    assert record_type(h.log[epoch]) == "register_broker"
    broker = h.state.cluster.broker(1)
    assert broker is not None and broker.fenced and broker.broker_epoch == epoch
    assert broker.rack == "r1"
    assert h.state.cluster.usable_broker_ids() == ()
    h.check()


def test_unfence_once_caught_up_to_registration_offset() -> None:
    h = Harness()
    epoch = h.register(1)
    behind = h.heartbeat(1, metadata_offset=epoch - 1)
    assert behind.error.ok and not behind.is_caught_up and behind.is_fenced
    assert h.state.cluster.broker(1).fenced  # type: ignore[union-attr]
    caught_up = h.heartbeat(1, metadata_offset=epoch)
    assert caught_up.is_caught_up and not caught_up.is_fenced
    assert record_type(h.log[-1]) == "broker_registration_change"
    assert h.state.cluster.usable_broker_ids() == (1,)
    h.check()


def test_want_fence_keeps_broker_fenced() -> None:
    h = Harness()
    h.register(1)
    reply = h.heartbeat(1, want_fence=True)
    assert reply.is_fenced and h.state.cluster.broker(1).fenced  # type: ignore[union-attr]


def test_heartbeat_errors_produce_no_records() -> None:
    h = Harness()
    h.register(1)
    unknown = h.state.cluster.process_heartbeat(
        BrokerHeartbeatRequest(broker_id=7, broker_epoch=0, metadata_offset=10), now_ms=0
    )
    assert (
        unknown.records == () and unknown.response.error.code is ErrorCode.BROKER_ID_NOT_REGISTERED
    )
    stale = h.state.cluster.process_heartbeat(
        BrokerHeartbeatRequest(broker_id=1, broker_epoch=12345, metadata_offset=10), now_ms=0
    )
    assert stale.records == () and stale.response.error.code is ErrorCode.STALE_BROKER_EPOCH
    assert "re-register" in stale.response.error.message


def _request(
    broker_id: int,
    incarnation: str,
    cluster_id: str = CLUSTER_ID,
    features: tuple[FeatureRange, ...] = (),
) -> BrokerRegistrationRequest:
    return BrokerRegistrationRequest(
        broker_id=broker_id, incarnation_id=incarnation, cluster_id=cluster_id, features=features,
        listeners=(Listener("PLAINTEXT", "localhost", 9092, "PLAINTEXT"),)
    )


def test_second_live_incarnation_is_refused_until_session_expires() -> None:
    h = Harness()
    h.register(1, incarnation="a")
    h.heartbeat(1)
    cluster = h.state.cluster
    h.now_ms = SESSION_MS  # still within the session
    refused = cluster.register_broker(_request(1, "b"), next_offset=h.next_offset, now_ms=h.now_ms)
    assert refused.records == ()
    assert refused.response.error.code is ErrorCode.DUPLICATE_BROKER_REGISTRATION
    assert "incarnation a" in refused.response.error.message
    # The same incarnation retrying is fine; so is a new one after the session expired.
    assert cluster.register_broker(
        _request(1, "a"), next_offset=h.next_offset, now_ms=h.now_ms
    ).response.error.ok
    h.now_ms = 2 * SESSION_MS + 1
    epoch = h.register(1, incarnation="b")
    broker = cluster.broker(1)
    assert broker is not None and broker.incarnation_id == "b" and broker.broker_epoch == epoch
    assert broker.fenced
    h.check()


def test_new_incarnation_leaves_isr_and_leadership_before_registering() -> None:
    h = Harness()
    h.add_brokers([1, 2])
    h.create("t", partitions=2, rf=2)
    h.now_ms = 3 * SESSION_MS
    h.heartbeat(2)
    first = h.next_offset
    epoch = h.register(1, incarnation="new")
    # Partition changes first, then the registration, whose epoch is its own offset.
    assert epoch == h.next_offset - 1 and epoch > first
    assert record_type(h.log[epoch]) == "register_broker"
    for p in range(2):
        part = h.part("t", p)
        assert part.isr == (2,) and part.leader == 2
    h.check()


def test_registration_errors() -> None:
    h = Harness()
    cluster = h.state.cluster
    wrong = cluster.register_broker(_request(1, "a", cluster_id="other"), next_offset=5, now_ms=0)
    assert wrong.records == () and wrong.response.error.code is ErrorCode.INCONSISTENT_CLUSTER_ID
    negative = cluster.register_broker(_request(-1, "a"), next_offset=5, now_ms=0)
    assert negative.response.error.code is ErrorCode.INVALID_REQUEST
    empty = cluster.register_broker(_request(1, ""), next_offset=5, now_ms=0)
    assert empty.response.error.code is ErrorCode.INVALID_REQUEST
    old = cluster.register_broker(
        _request(1, "a", features=(FeatureRange("metadata.version", 1, 1),)),
        next_offset=5,
        now_ms=0,
    )
    assert old.records == () and old.response.error.code is ErrorCode.UNSUPPORTED_VERSION


def test_fence_stale_brokers_after_session_timeout() -> None:
    h = Harness()
    h.add_brokers([1, 2, 3])
    h.create("t", partitions=3, rf=3)
    h.now_ms = SESSION_MS
    assert h.apply(h.state.cluster.fence_stale_brokers(h.now_ms)) == ()
    h.heartbeat(2)
    h.heartbeat(3)
    h.now_ms = SESSION_MS + 1
    fenced = h.apply(h.state.cluster.fence_stale_brokers(h.now_ms))
    assert fenced == (1,)
    assert h.state.cluster.broker(1).fenced  # type: ignore[union-attr]
    for p in range(3):
        part = h.part("t", p)
        assert 1 not in part.isr and part.leader in (2, 3)
    # Nothing more to fence.
    assert h.state.cluster.fence_stale_brokers(h.now_ms).records == ()
    h.check()


def test_fenced_broker_rejoins_isr_when_unfenced() -> None:
    h = Harness(metadata_version=HEARTBEAT_ISR_LEVEL)
    h.add_brokers([1, 2])
    h.create("t", partitions=2, rf=2)
    h.now_ms = SESSION_MS + 1
    h.heartbeat(2)
    h.apply(h.state.cluster.fence_stale_brokers(h.now_ms))
    assert all(1 not in h.part("t", p).isr for p in range(2))
    reply = h.heartbeat(1)
    assert not reply.is_fenced
    assert all(set(h.part("t", p).isr) == {1, 2} for p in range(2))
    h.check()


def test_fencing_counts_under_replicated_and_not_preferred_partitions() -> None:
    # The metrics' counts come from indexes, not scans: each change keeps them exact.
    h = Harness(metadata_version=HEARTBEAT_ISR_LEVEL)
    h.add_brokers([1, 2])
    h.create("t", assignments=((1, 2), (2, 1)))
    replication = h.state.replication
    assert replication.under_replicated_partition_count() == 0
    assert replication.preferred_imbalance_count() == 0
    h.now_ms = SESSION_MS + 1
    h.heartbeat(2)
    h.apply(h.state.cluster.fence_stale_brokers(h.now_ms))
    # Broker 1 is out of both ISRs; partition 0 is now led by 2, not its preferred 1.
    assert replication.under_replicated_partition_count() == 2
    assert replication.preferred_imbalance_count() == 1
    h.check()
    h.heartbeat(1)
    assert replication.under_replicated_partition_count() == 0
    assert replication.preferred_imbalance_count() == 1  # until a preferred election
    h.check()


def test_offline_partition_comes_back_with_its_last_isr_member() -> None:
    h = Harness()
    h.add_brokers([1])
    h.create("t", partitions=1, rf=1)
    h.now_ms = SESSION_MS + 1
    h.apply(h.state.cluster.fence_stale_brokers(h.now_ms))
    part = h.part("t")
    assert part.leader == -1 and part.isr == (1,)  # the ISR keeps its last member
    assert h.state.replication.offline_partition_count() == 1
    h.check()
    h.heartbeat(1)
    part = h.part("t")
    assert part.leader == 1 and part.leader_epoch == 2
    assert h.state.replication.offline_partition_count() == 0
    h.check()


def test_controlled_shutdown_moves_leadership_then_lets_broker_stop() -> None:
    h = Harness()
    h.add_brokers([1, 2, 3])
    h.create("t", partitions=6, rf=2)
    led_by_1 = [p for p in range(6) if h.part("t", p).leader == 1]
    assert led_by_1
    first = h.heartbeat(1, want_shutdown=True)
    assert first.in_controlled_shutdown and not first.should_shut_down
    assert record_type(h.log[-1]) == "broker_registration_change"
    broker = h.state.cluster.broker(1)
    assert broker is not None and broker.in_controlled_shutdown and not broker.fenced
    for p in range(6):
        assert h.part("t", p).leader != 1 and 1 not in h.part("t", p).isr
    assert 1 not in h.state.cluster.usable_broker_ids()
    second = h.heartbeat(1, want_shutdown=True)
    assert second.should_shut_down
    h.check()


def test_the_leader_count_answers_leads_any_and_reverts_with_the_state() -> None:
    # A shutting-down broker asks on every heartbeat whether it still leads anything;
    # the answer is a per-broker count kept by replay, not a scan of its partitions.
    h = Harness()
    h.add_brokers([1, 2, 3])
    h.create("t", partitions=6, rf=2)
    replication = h.state.replication
    led = {b: sum(1 for p in range(6) if h.part("t", p).leader == b) for b in (1, 2, 3)}
    assert led[1] > 0
    assert {b: replication.leads_any(b) for b in (1, 2, 3)} == {b: n > 0 for b, n in led.items()}
    assert dict(replication._index.led_count.items()) == {b: n for b, n in led.items() if n}
    before = h.committed
    h.heartbeat(1, want_shutdown=True)
    assert not replication.leads_any(1)
    h.check()
    h.state.registry.revert_to_snapshot(before)
    h.resync()
    assert replication.leads_any(1)
    assert dict(replication._index.led_count.items()) == {b: n for b, n in led.items() if n}
    replication.check_indexes()


def test_fenced_broker_may_shut_down_at_once() -> None:
    h = Harness()
    h.register(1)
    reply = h.heartbeat(1, want_shutdown=True, metadata_offset=0)
    assert reply.should_shut_down and reply.is_fenced


def test_unregister() -> None:
    h = Harness()
    h.add_brokers([1, 2])
    h.create("t", partitions=2, rf=2)
    assert h.apply(h.state.cluster.unregister_broker(1)).ok
    assert h.state.cluster.broker(1) is None
    for p in range(2):
        assert h.part("t", p).isr == (2,) and h.part("t", p).leader == 2
    missing = h.state.cluster.unregister_broker(1)
    assert missing.records == () and missing.response.code is ErrorCode.BROKER_ID_NOT_REGISTERED
    h.check()


def test_activate_gives_every_broker_a_full_session() -> None:
    h = Harness()
    h.add_brokers([1])
    h.state.cluster.clear_soft_state()
    h.now_ms = 10 * SESSION_MS
    h.state.cluster.activate(h.now_ms)
    assert h.state.cluster.fence_stale_brokers(h.now_ms + SESSION_MS).records == ()
    assert h.state.cluster.fence_stale_brokers(h.now_ms + SESSION_MS + 1).response == (1,)


def test_queries_at_an_epoch() -> None:
    h = Harness()
    h.register(1, rack="a")
    committed = h.committed
    h.register(2, rack="b")
    assert [b.broker_id for b in h.state.cluster.brokers(committed)] == [1]
    assert [b.broker_id for b in h.state.cluster.brokers()] == [1, 2]
    assert h.state.cluster.racks() == {1: "a", 2: "b"}


PLAIN = Listener("PLAINTEXT", "localhost", 9092, "PLAINTEXT")


@pytest.mark.parametrize(("change", "message"), [
    ({"broker_id": 3000}, "is a controller's node id"),
    ({"broker_id": -1}, "broker id must be in [0, 2147483647]"),
    ({"listeners": ()}, "1 to 64 listeners"),
    ({"listeners": tuple(Listener(f"L{i}", "h", 9092, "P") for i in range(20_000))},
     "1 to 64 listeners"),
    ({"listeners": (attrs.evolve(PLAIN, port=-1),)}, "port must be in [1, 65535], got -1"),
    ({"listeners": (attrs.evolve(PLAIN, port=70_000),)}, "got 70000"),
    ({"listeners": (PLAIN, PLAIN)}, "listener names must be unique"),
    ({"listeners": (attrs.evolve(PLAIN, host=""),)}, "host must have 1 to 255"),
    ({"listeners": (attrs.evolve(PLAIN, name="n" * 10_000),)}, "name must have 1 to 255"),
    ({"rack": "r" * 10_000}, "rack must have 1 to 255 characters, got 10000"),
    ({"incarnation_id": ""}, "incarnation id must have 1 to 255"),
])
def test_bad_registrations_are_refused_with_the_reason_and_write_nothing(
        change: dict[str, object], message: str) -> None:
    """As found from outside: a controller's node id, ports -1 and 70000, no listeners,
    20,000 listeners and a 10,000-character rack were all accepted."""
    from controller.metadata import MetadataState

    state = MetadataState(cluster_id=CLUSTER_ID, rng=random.Random(0),
                          controller_ids=frozenset({3000, 3001, 3002}))
    request = attrs.evolve(_request(1, "inc"), **change)
    result = state.cluster.register_broker(request, next_offset=0, now_ms=0)
    assert result.records == ()
    assert result.response.error.code is ErrorCode.INVALID_REQUEST
    assert message in result.response.error.message
    ok = state.cluster.register_broker(_request(1, "inc"), next_offset=0, now_ms=0)
    assert ok.response.error.ok
