"""The reconciler core: ordering, idempotence, restart convergence from any local state."""

from __future__ import annotations

import ast
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from broker_agent.delta import MetadataDelta
from broker_agent.image import MetadataImage
from broker_agent.reconciler import (
    BecomeFollower,
    BecomeLeader,
    DeleteReplica,
    LocalReplica,
    Plan,
    ReplicaRole,
    plan_delta,
    plan_full,
)
from controller.records import MetadataRecord
from tests.unit.broker_agent.records_support import change, partition, remove_topic, topic

ME = 1


def _apply(image: MetadataImage, records: list[MetadataRecord]) -> tuple[MetadataImage, Plan]:
    delta = MetadataDelta(image)
    delta.replay_batch(records, image.offset + 1)
    new, changes = delta.apply()
    return new, plan_delta(image, new, changes.changed_partitions, changes.removed_topics, ME)


def _execute(local: dict[str, LocalReplica | None], plan: Plan) -> None:
    for ins in plan.instructions:
        if isinstance(ins, DeleteReplica):
            del local[ins.dir_name]
        else:
            local[ins.replica.dir_name] = ins.replica


def test_core_imports_no_io() -> None:
    source = Path(__file__).resolve().parents[3] / "broker_agent" / "reconciler.py"
    banned = {"asyncio", "grpc", "os", "time", "random", "socket", "threading", "pathlib"}
    for node in ast.walk(ast.parse(source.read_text())):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
            [node.module or ""] if isinstance(node, ast.ImportFrom) else []
        for name in names:
            assert name.split(".")[0] not in banned, name


def test_new_topic_gives_leader_and_follower_instructions() -> None:
    _, plan = _apply(MetadataImage.empty(), [
        topic("a", "A"), partition("A", 0, (1, 2, 3)), partition("A", 1, (2, 1, 3)),
        partition("A", 2, (2, 3, 4))])
    assert plan.deletes == ()
    assert [i.replica.dir_name for i in plan.leaders] == ["a-0"]
    assert [i.replica.dir_name for i in plan.followers] == ["a-1"]
    assert plan.followers[0].replica.role is ReplicaRole.FOLLOWER
    assert plan.followers[0].replica.leader == 2


def test_order_is_deletes_then_leaders_then_followers() -> None:
    image, _ = _apply(MetadataImage.empty(), [
        topic("a", "A"), partition("A", 0, (1, 2)), partition("A", 1, (2, 1)),
        topic("b", "B"), partition("B", 0, (1, 2))])
    # One batch: remove b, re-create "b" with a new id, move a-1's leadership to us.
    _, plan = _apply(image, [remove_topic("B"), topic("b", "B2"), partition("B2", 0, (2, 1)),
                             change("A", 1, leader=1)])
    kinds = [type(i) for i in plan.instructions]
    assert kinds == [DeleteReplica, BecomeLeader, BecomeFollower]
    assert plan.deletes[0].dir_name == "b-0" and plan.deletes[0].topic_id == "B"
    assert plan.leaders[0].replica.dir_name == "a-1"
    assert plan.followers[0].replica.topic_id == "B2"


def test_leader_epoch_change_only_for_leaders_partition_epoch_for_followers() -> None:
    image, _ = _apply(MetadataImage.empty(), [
        topic("a", "A"), partition("A", 0, (1, 2, 3)), partition("A", 1, (2, 1, 3))])
    # ISR shrink on a-0 (we lead, leader epoch unchanged): not a new leadership, only
    # the recorded partition epoch is updated...
    _, plan = _apply(image, [change("A", 0, isr=(1, 2))])
    assert [(i.replica.dir_name, i.new_leadership) for i in plan.leaders] == [("a-0", False)]
    assert plan.followers == ()
    # ...but an ISR change on a partition we follow bumps its partition epoch → follow.
    _, plan = _apply(image, [change("A", 1, isr=(2, 1))])
    assert [i.replica.dir_name for i in plan.followers] == ["a-1"]
    assert plan.followers[0].replica.partition_epoch == 1


def test_removed_from_replicas_is_deleted_and_new_replica_created() -> None:
    image, _ = _apply(MetadataImage.empty(), [topic("a", "A"), partition("A", 0, (1, 2, 3))])
    _, plan = _apply(image, [change("A", 0, replicas=(2, 3, 4), isr=(2, 3), leader=2)])
    assert plan == Plan(deletes=(DeleteReplica("a-0", "A", 0),))


def test_same_image_twice_is_a_no_op() -> None:
    image, plan = _apply(MetadataImage.empty(), [topic("a", "A"), partition("A", 0, (1, 2))])
    assert not plan.empty
    assert plan_delta(image, image, {("A", 0)}, (), ME).empty
    local: dict[str, LocalReplica | None] = {}
    _execute(local, plan_full(local, image, ME))
    assert plan_full(local, image, ME).empty


def test_full_plan_repairs_stale_and_unreadable_and_foreign_state() -> None:
    image, _ = _apply(MetadataImage.empty(), [
        topic("a", "A"), partition("A", 0, (1, 2)), partition("A", 1, (2, 1))])
    stale = LocalReplica("a", "A", 0, ReplicaRole.FOLLOWER, 2, 0, 0)
    recreated = LocalReplica("a", "OLD", 1, ReplicaRole.LEADER, 1, 5, 9)
    gone = LocalReplica("z", "Z", 0, ReplicaRole.LEADER, 1, 0, 0)
    local: dict[str, LocalReplica | None] = {"a-0": stale, "a-1": recreated, "z-0": gone,
                                             "junk-0": None}
    plan = plan_full(local, image, ME)
    assert [d.dir_name for d in plan.deletes] == ["a-1", "junk-0", "z-0"]
    _execute(local, plan)
    assert plan_full(local, image, ME).empty
    assert set(local) == {"a-0", "a-1"}


_ids = st.integers(1, 4)


@st.composite
def _histories(draw: st.DrawFn) -> list[list[MetadataRecord]]:
    """Batches of valid records over a few topics."""
    batches: list[list[MetadataRecord]] = []
    live: dict[str, tuple[str, int]] = {}  # name -> (id, partitions)
    serial = 0
    for _ in range(draw(st.integers(1, 8))):
        batch: list[MetadataRecord] = []
        for _ in range(draw(st.integers(1, 4))):
            op = draw(st.sampled_from(["create", "change", "remove"]))
            if op == "create" or not live:
                name = draw(st.sampled_from(["a", "b", "c"]))
                if name in live:
                    continue
                serial += 1
                tid = f"{name}{serial}"
                count = draw(st.integers(1, 3))
                batch.append(topic(name, tid))
                for i in range(count):
                    reps = tuple(draw(st.permutations([1, 2, 3, 4]))[:draw(st.integers(1, 3))])
                    batch.append(partition(tid, i, reps))
                live[name] = (tid, count)
            elif op == "change":
                name = draw(st.sampled_from(sorted(live)))
                tid, count = live[name]
                reps = tuple(draw(st.permutations([1, 2, 3, 4]))[:draw(st.integers(1, 3))])
                batch.append(change(tid, draw(st.integers(0, count - 1)), replicas=reps,
                                    isr=reps, leader=draw(st.sampled_from(reps))))
            else:
                name = draw(st.sampled_from(sorted(live)))
                batch.append(remove_topic(live.pop(name)[0]))
        if batch:
            batches.append(batch)
    return batches


@settings(max_examples=150, deadline=None)
@given(_histories(), st.data())
def test_any_crash_point_converges_on_restart(batches: list[list[MetadataRecord]],
                                              data: st.DataObject) -> None:
    """Apply deltas, crash after a random prefix of some plan, restart with a full
    plan against the disk: the disk ends equal to what the final image wants, and
    the steady-state deltas keep it equal."""
    image = MetadataImage.empty()
    local: dict[str, LocalReplica | None] = {}
    crash_at = data.draw(st.integers(0, len(batches) - 1))
    for n, batch in enumerate(batches):
        image, plan = _apply(image, batch)
        if n == crash_at:
            cut = data.draw(st.integers(0, len(plan.instructions)))
            _execute(local, Plan(*_split(plan.instructions[:cut])))
            # Restart: compare the disk with the image (the loader publishes it whole).
            _execute(local, plan_full(local, image, ME))
        else:
            _execute(local, plan)
        assert plan_full(local, image, ME).empty, (n, local)


def _split(instructions: tuple[object, ...]) -> tuple[tuple[DeleteReplica, ...],
                                                      tuple[BecomeLeader, ...],
                                                      tuple[BecomeFollower, ...]]:
    return (tuple(i for i in instructions if isinstance(i, DeleteReplica)),
            tuple(i for i in instructions if isinstance(i, BecomeLeader)),
            tuple(i for i in instructions if isinstance(i, BecomeFollower)))
