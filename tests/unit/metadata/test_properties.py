"""Random operation sequences: invariants after every step, epochs monotonic, and the
log, snapshots and reverts all rebuilding equal state."""

from __future__ import annotations

import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controller.metadata import (
    AlterConfigOp,
    AlterConfigsResource,
    BrokerHeartbeatRequest,
    BrokerRegistrationRequest,
    ConfigResource,
    CreatableTopic,
    CreatePartitionsTopic,
    ElectionType,
    OpType,
    ReassignmentRequest,
    ResourceType,
    TopicPartition,
)
from controller.records.domain import Listener
from tests.unit.metadata.support import CLUSTER_ID, SESSION_MS, Harness

KINDS = (
    "register",
    "heartbeat",
    "heartbeat",
    "heartbeat",
    "shutdown",
    "tick",
    "create",
    "create",
    "delete",
    "add_partitions",
    "reassign",
    "cancel",
    "elect",
    "unclean_config",
    "unregister",
)
BROKERS = (1, 2, 3, 4, 5)
TOPICS = ("t0", "t1", "t2")
RACKS = ("ra", "rb", None)


def step(h: Harness, kind: str, rnd: random.Random) -> None:
    state = h.state
    rep = state.replication
    if kind == "register":
        bid = rnd.choice(BROKERS)
        rack = RACKS[bid % 2]
        registration = BrokerRegistrationRequest(
            bid, f"inc-{rnd.randrange(3)}", CLUSTER_ID, rack=rack,
            listeners=(Listener("PLAINTEXT", "localhost", 9092, "PLAINTEXT"),)
        )
        h.apply(
            state.cluster.register_broker(registration, next_offset=h.next_offset, now_ms=h.now_ms)
        )
    elif kind in ("heartbeat", "shutdown"):
        registered = [b.broker_id for b in state.cluster.brokers()]
        if registered:
            bid = rnd.choice(registered)
            broker = state.cluster.broker(bid)
            assert broker is not None
            request = BrokerHeartbeatRequest(
                bid, broker.broker_epoch, h.committed, want_shutdown=kind == "shutdown"
            )
            h.apply(state.cluster.process_heartbeat(request, now_ms=h.now_ms))
    elif kind == "tick":
        h.now_ms += rnd.choice((1000, SESSION_MS // 2, SESSION_MS + 1))
        h.apply(state.cluster.fence_stale_brokers(h.now_ms))
    elif kind == "create":
        topic = CreatableTopic(rnd.choice(TOPICS), rnd.randint(1, 4), rnd.randint(1, 3))
        h.apply(rep.create_topics([topic]))
    elif kind == "delete":
        h.apply(rep.delete_topics([rnd.choice(TOPICS)]))
    elif kind == "add_partitions":
        h.apply(
            rep.create_partitions([CreatePartitionsTopic(rnd.choice(TOPICS), rnd.randint(1, 6))])
        )
    elif kind in ("reassign", "cancel"):
        target = None
        if kind == "reassign":
            target = tuple(rnd.sample(BROKERS, rnd.randint(1, 3)))
        item = ReassignmentRequest(rnd.choice(TOPICS), rnd.randrange(3), target)
        h.apply(rep.alter_partition_reassignments([item]))
    elif kind == "elect":
        election = rnd.choice((ElectionType.PREFERRED, ElectionType.UNCLEAN))
        which = (
            None if rnd.random() < 0.3 else [TopicPartition(rnd.choice(TOPICS), rnd.randrange(3))]
        )
        h.apply(rep.elect_leaders(which, election))
    elif kind == "unclean_config":
        value = rnd.choice(("true", "false"))
        op = AlterConfigOp("unclean.leader.election.enable", OpType.SET, value)
        resource = ConfigResource(ResourceType.TOPIC, rnd.choice(TOPICS))
        h.apply(state.configs.incremental_alter_configs([AlterConfigsResource(resource, (op,))]))
    elif kind == "unregister":
        h.apply(state.cluster.unregister_broker(rnd.choice(BROKERS)))
    else:  # pragma: no cover
        raise AssertionError(kind)


def epochs(h: Harness) -> dict[tuple[str, int], tuple[int, int]]:
    found = {}
    for topic in h.state.to_image().topics:
        for i, part in enumerate(topic.partitions):
            found[(topic.topic_id, i)] = (part.leader_epoch, part.partition_epoch)
    return found


OPS = st.lists(st.tuples(st.sampled_from(KINDS), st.integers(0, 2**32)), min_size=1, max_size=60)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=OPS, seed=st.integers(0, 1000))
def test_random_operations_keep_invariants(ops: list[tuple[str, int]], seed: int) -> None:
    h = Harness(seed)
    h.add_brokers([1, 2, 3])
    before = epochs(h)
    for kind, op_seed in ops:
        step(h, kind, random.Random(op_seed))
        assert h.state.check_invariants() == [], (kind, h.state.check_invariants())
        after = epochs(h)
        for key, (leader_epoch, partition_epoch) in after.items():
            if key in before:
                old_leader_epoch, old_partition_epoch = before[key]
                assert leader_epoch >= old_leader_epoch and partition_epoch >= old_partition_epoch
        before = after
    h.check()


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(first=OPS, second=OPS, seed=st.integers(0, 1000))
def test_revert_restores_the_committed_state(
    first: list[tuple[str, int]], second: list[tuple[str, int]], seed: int
) -> None:
    h = Harness(seed)
    h.add_brokers([1, 2, 3])
    for kind, op_seed in first:
        step(h, kind, random.Random(op_seed))
    committed = h.committed
    image = h.state.to_image()
    records = h.state.snapshot_records()
    for kind, op_seed in second:
        step(h, kind, random.Random(op_seed))
    assert h.state.to_image(committed) == image
    h.state.registry.revert_to_snapshot(committed)
    assert h.state.to_image() == image
    assert h.state.snapshot_records() == records
    h.state.replication.check_indexes()
    # Writing goes on correctly after the revert.
    h.resync()
    del h.log[committed + 1 :]
    h.next_offset = committed + 1
    for kind, op_seed in second[:10]:
        step(h, kind, random.Random(op_seed))
    h.check()
