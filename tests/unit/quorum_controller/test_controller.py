"""The single-threaded controller on an in-memory quorum (tests/support/controller_fake_quorum)."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

import attrs
import pytest

from controller.api.seam import (
    Args,
    ControllerBusyError,
    ControllerTimeoutError,
    NotControllerError,
    Operation,
    Origin,
)
from controller.logformat.batch import EMPTY_ORIGIN, RecordBatch
from controller.metadata import (
    BrokerHeartbeatRequest,
    BrokerRegistrationRequest,
    CreatableTopic,
    ErrorCode,
    MetadataState,
)
from controller.metadata.levels import Feature
from controller.quorum_controller.controller import QuorumController
from controller.quorum_controller.events import Mode
from controller.quorum_controller.facade import ControllerApi
from controller.quorum_controller.ports import ControllerSettings
from controller.quorum_controller.snapshots import SnapshotScheduler, iter_image_chunks
from controller.records import decode_record, encode_record
from controller.records.domain import Listener
from tests.support.admin_calls import AdminCalls
from tests.support.controller_fake_quorum import FakeQuorum

T = TypeVar("T")
CLUSTER_ID = "qc-test-cluster"
# No request id: each admin write here is a new one (an id makes retries exactly-once).
ORIGIN = Origin("alice", "ipv4:127.0.0.1:5000")
# Brokers take other node ids than the controllers (0, 4, 5...): ids are one space.
VOTERS = {1: "127.0.0.1:9001", 2: "127.0.0.1:9002", 3: "127.0.0.1:9003"}
LISTENERS = (Listener("PLAINTEXT", "localhost", 9092, "PLAINTEXT"),)


class Clock:
    def __init__(self) -> None:
        self.now_ms = 1_000_000

    def __call__(self) -> int:
        return self.now_ms


class Env:
    def __init__(self, *, nodes: int = 3, auto_commit: bool = True, **settings: Any) -> None:
        self.quorum = FakeQuorum(list(range(1, nodes + 1)), auto_commit=auto_commit)
        self.clock = Clock()
        self.ctrl: dict[int, QuorumController] = {}
        self.api: dict[int, AdminCalls] = {}
        for node_id, node in self.quorum.nodes.items():
            config = ControllerSettings(node_id=node_id, cluster_id=CLUSTER_ID,
                                        voter_addresses=VOTERS, **settings)
            ctrl = QuorumController(config, clock_ms=self.clock, rng=random.Random(node_id))
            ctrl.attach(node)
            node.listener = ctrl
            self.ctrl[node_id] = ctrl
            self.api[node_id] = AdminCalls(ControllerApi(ctrl, node))

    async def elect(self, node_id: int, *, keep_uncommitted: bool = False) -> None:
        self.quorum.elect(node_id, keep_uncommitted=keep_uncommitted)
        await settle()

    async def register_brokers(self, leader: int, ids: list[int]) -> None:
        api = self.api[leader]
        for bid in ids:
            reply = await api.register_broker(
                BrokerRegistrationRequest(bid, f"inc-{bid}", CLUSTER_ID, listeners=LISTENERS),
                origin=ORIGIN)
            assert reply.error.ok, reply
            beat = await api.broker_heartbeat(
                BrokerHeartbeatRequest(bid, reply.broker_epoch, 1 << 40), origin=ORIGIN)
            assert beat.error.ok and not beat.is_fenced, beat


async def settle(rounds: int = 30) -> None:
    for _ in range(rounds):
        await asyncio.sleep(0)


def run(test: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(asyncio.wait_for(test(), 10))


def spawn(coro: Awaitable[T]) -> asyncio.Task[T]:
    return asyncio.ensure_future(coro)


def committed_state(quorum: FakeQuorum) -> MetadataState:
    """A fresh state replaying exactly the committed log."""
    state = MetadataState(cluster_id=CLUSTER_ID, rng=random.Random(0))
    for batch in quorum.committed_batches():
        state.replay_batch([decode_record(r) for r in batch.records], batch.base_offset)
    return state


def mode_of(ctrl: QuorumController) -> Mode:
    # A call, so that mypy does not narrow the property across awaits.
    return ctrl.mode


def topic(name: str, partitions: int = 1, rf: int = 1) -> CreatableTopic:
    return CreatableTopic(name, partitions, rf)


def record_types(batch: RecordBatch) -> list[str]:
    return [decode_record(r).WhichOneof("record") or "" for r in batch.records]


# ---------------------------------------------------------------------------- tests


def test_fresh_cluster_bootstraps_features_once() -> None:
    async def main() -> None:
        env = Env()
        await env.elect(1)
        assert mode_of(env.ctrl[1]) is Mode.ACTIVE
        features = await env.api[1].describe_features(origin=ORIGIN)
        assert {f.name: f.finalized_level for f in features}["metadata.version"] >= 1
        bootstrap = env.quorum.log[1]
        assert record_types(bootstrap) == ["feature_level"] and bootstrap.origin == EMPTY_ORIGIN
        # A later leader finds the level set and writes nothing of the kind.
        await env.elect(2)
        assert mode_of(env.ctrl[2]) is Mode.ACTIVE and mode_of(env.ctrl[1]) is Mode.STANDBY
        kinds = [k for b in env.quorum.log for k in record_types(b)]
        assert kinds.count("feature_level") == 1

    run(main)


def test_response_waits_for_commit_and_batch_has_origin() -> None:
    async def main() -> None:
        env = Env(auto_commit=False)
        await env.elect(1)
        env.quorum.commit()
        await settle()
        reg = spawn(env.api[1].register_broker(
            BrokerRegistrationRequest(0, "inc-0", CLUSTER_ID, listeners=LISTENERS),
            origin=Origin("alice", "ipv4:127.0.0.1:5000", "req-1")))
        await settle()
        assert not reg.done(), "answered before commit"
        env.quorum.commit()
        await settle()
        assert reg.result().error.ok
        batch = env.quorum.log[-1]
        assert batch.origin.principal == "alice" and batch.origin.request_id == "req-1"
        assert batch.origin.client_address == "ipv4:127.0.0.1:5000"

    run(main)


def test_held_back_commits_keep_responses_waiting_but_later_writes_see_them() -> None:
    async def main() -> None:
        env = Env(auto_commit=False)
        await env.elect(1)
        env.quorum.commit()
        await settle()
        env.quorum.auto_commit = True
        await env.register_brokers(1, [0, 4, 5])
        env.quorum.auto_commit = False
        api = env.api[1]
        first = spawn(api.create_topics([topic("a")], validate_only=False, origin=ORIGIN))
        await settle()
        # Generated against the uncommitted state: "a" already exists there.
        second = spawn(api.create_topics([topic("a"), topic("b")], validate_only=False,
                                         origin=ORIGIN))
        await settle()
        assert not first.done() and not second.done()
        assert env.ctrl[1].replayed_offset > env.ctrl[1].committed_offset
        # Reads see the committed state only.
        assert await api.list_topics(origin=ORIGIN) == ()
        env.quorum.commit()
        await settle()
        assert first.result()[0].error.ok
        errors = [r.error.code for r in second.result()]
        assert errors == [ErrorCode.TOPIC_ALREADY_EXISTS, ErrorCode.NONE]
        assert [t.name for t in await api.list_topics(origin=ORIGIN)] == ["a", "b"]

    run(main)


def test_request_without_records_waits_for_earlier_uncommitted_batch() -> None:
    async def main() -> None:
        env = Env(auto_commit=True)
        await env.elect(1)
        await env.register_brokers(1, [0])
        env.quorum.auto_commit = False
        api = env.api[1]
        create = spawn(api.create_topics([topic("x")], validate_only=False, origin=ORIGIN))
        await settle()
        dup = spawn(api.create_topics([topic("x")], validate_only=False, origin=ORIGIN))
        await settle()
        assert not dup.done(), "an answer read from uncommitted state left early"
        env.quorum.commit()
        await settle()
        assert create.result()[0].error.ok
        assert dup.result()[0].error.code is ErrorCode.TOPIC_ALREADY_EXISTS

    run(main)


@pytest.mark.parametrize("keep_uncommitted", [False, True])
def test_forced_resignation_reverts_to_committed_state_exactly(keep_uncommitted: bool) -> None:
    async def main() -> None:
        env = Env(auto_commit=True)
        await env.elect(1)
        await env.register_brokers(1, [0, 4, 5])
        api = env.api[1]
        done = await api.create_topics([topic("kept", 3, 2)], validate_only=False,
                                       origin=ORIGIN)
        assert done[0].error.ok
        env.quorum.auto_commit = False
        waiting = [spawn(api.create_topics([topic(f"t{i}", 2, 3)], validate_only=False,
                                           origin=ORIGIN)) for i in range(3)]
        await settle()
        assert not any(w.done() for w in waiting)
        ctrl = env.ctrl[1]
        assert ctrl.replayed_offset > ctrl.committed_offset
        env.quorum.resign()
        # The next event tells the controller it no longer leads.
        with pytest.raises(NotControllerError):
            await api.list_topics(origin=ORIGIN)
        assert mode_of(ctrl) is Mode.STANDBY
        expected = committed_state(env.quorum)
        image = ctrl.state.to_image()
        want = expected.to_image()
        for field in ("features", "brokers", "topics", "configs", "acls"):
            assert getattr(image, field) == getattr(want, field), field
        assert ctrl.state.snapshot_records() == expected.snapshot_records()
        assert ctrl.replayed_offset == ctrl.committed_offset == env.quorum.high_watermark
        assert not any(w.done() for w in waiting), "fate not known yet"
        await env.elect(2, keep_uncommitted=keep_uncommitted)
        env.quorum.commit()
        await settle()
        outcomes = [w.exception() for w in waiting]
        if keep_uncommitted:
            # The next leader committed them: they were applied, and say so.
            assert outcomes == [None, None, None]
            assert all(w.result()[0].error.ok for w in waiting)
        else:
            assert all(isinstance(o, NotControllerError) and o.leader_id == 2 for o in outcomes)
        names = {t.name for t in await env.api[2].list_topics(origin=ORIGIN)}
        assert names == ({"kept", "t0", "t1", "t2"} if keep_uncommitted else {"kept"})
        # Every controller holds the same image as a replay of the committed log.
        want = committed_state(env.quorum).to_image()
        for node_id in (1, 2, 3):
            assert env.ctrl[node_id].state.to_image() == want, node_id

    run(main)


def test_orphaned_request_times_out_as_unknown() -> None:
    async def main() -> None:
        env = Env(auto_commit=True, orphan_timeout_ms=1_000)
        await env.elect(1)
        await env.register_brokers(1, [0])
        env.quorum.auto_commit = False
        pending = spawn(env.api[1].create_topics([topic("z")], validate_only=False,
                                                 origin=ORIGIN))
        await settle()
        env.quorum.resign()
        env.ctrl[1].request_tick()
        await settle()
        assert not pending.done()
        env.clock.now_ms += 1_001
        env.ctrl[1].request_tick()
        await settle()
        assert isinstance(pending.exception(), ControllerTimeoutError)

    run(main)


def test_standby_replaying_the_log_has_an_equal_image() -> None:
    async def main() -> None:
        env = Env()
        await env.elect(1)
        await env.register_brokers(1, [0, 4, 5])
        api = env.api[1]
        for i in range(5):
            await api.create_topics([topic(f"s{i}", 4, 3)], validate_only=False, origin=ORIGIN)
        await api.delete_topics(["s0"], origin=ORIGIN)
        image = env.ctrl[1].state.to_image()
        assert len(image.topics) == 4
        for standby in (2, 3):
            assert env.ctrl[standby].mode is Mode.STANDBY
            assert env.ctrl[standby].state.to_image() == image
            assert env.ctrl[standby].state.snapshot_records() == env.ctrl[1].state.snapshot_records()

    run(main)


def test_standby_refuses_with_leader_and_address() -> None:
    async def main() -> None:
        env = Env()
        await env.elect(1)
        for call in (env.api[2].list_topics(origin=ORIGIN),
                     env.api[2].create_topics([topic("n")], validate_only=False,
                                              origin=ORIGIN)):
            with pytest.raises(NotControllerError) as info:
                await call
            assert info.value.leader_id == 1 and info.value.leader_address == VOTERS[1]

    run(main)


def test_full_queue_answers_busy_and_applies_nothing() -> None:
    async def main() -> None:
        env = Env(max_queued_events=3)
        await env.elect(1)
        await env.register_brokers(1, [0])
        before = env.quorum.end_offset
        calls = [spawn(env.api[1].create_topics([topic(f"q{i}")], validate_only=False,
                                                origin=ORIGIN)) for i in range(8)]
        await asyncio.wait(calls)
        busy = [c for c in calls if isinstance(c.exception(), ControllerBusyError)]
        ok = [c for c in calls if c.exception() is None]
        assert len(busy) == 5 and len(ok) == 3
        names = {t.name for t in await env.api[1].list_topics(origin=ORIGIN)}
        assert names == {f"q{i}" for i in range(3)}
        assert env.quorum.end_offset == before + 3 * 2  # topic + partition records each

    run(main)


def test_too_large_request_fails_per_item_and_leaves_no_record() -> None:
    async def main() -> None:
        env = Env(max_items_per_request=4)
        await env.elect(1)
        await env.register_brokers(1, [0])
        before = env.quorum.end_offset
        # One topic past the partition limit is refused by validation, saying the limit
        # (it cannot be split: a topic is one batch).
        big = await env.api[1].create_topics([topic("big", 9_001)], validate_only=False,
                                             origin=ORIGIN)
        assert big[0].error.code is ErrorCode.INVALID_PARTITIONS
        assert "9000" in big[0].error.message
        # Two topics that pass validation each but together exceed one batch: the
        # request is too large, and splitting it is the remedy.
        pair = await env.api[1].create_topics([topic("a", 6_000), topic("b", 6_000)],
                                              validate_only=False, origin=ORIGIN)
        assert {r.error.code for r in pair} == {ErrorCode.REQUEST_TOO_LARGE}
        assert "split it" in pair[0].error.message
        many = await env.api[1].delete_topics([f"d{i}" for i in range(5)], origin=ORIGIN)
        assert {r.error.code for r in many} == {ErrorCode.REQUEST_TOO_LARGE}
        bad = await env.api[1].create_topics([topic("bad name!")], validate_only=False,
                                             origin=ORIGIN)
        assert bad[0].error.code is ErrorCode.INVALID_TOPIC_EXCEPTION
        assert env.quorum.end_offset == before
        assert env.ctrl[1].state.replication.list_topics() == ()

    run(main)


def test_the_largest_valid_topic_is_written() -> None:
    # Whatever passes validation fits one batch: the partition limits at their worst
    # (the most partitions, the most replicas, the largest broker ids) commit.
    async def main() -> None:
        env = Env()
        await env.elect(1)
        brokers = [2**31 - 1 - i for i in range(6)]
        await env.register_brokers(1, brokers)
        created = await env.api[1].create_topics(
            [CreatableTopic("widest", 9_000, 5, configs=(("retention.ms", "1000"),))],
            validate_only=False, origin=ORIGIN)
        assert created[0].error.ok, created
        assert env.ctrl[1].state.replication.total_partition_count() == 9_000
        wider = await env.api[1].create_topics([topic("wider", 9_000, 6)], validate_only=False,
                                               origin=ORIGIN)
        assert wider[0].error.code is ErrorCode.INVALID_PARTITIONS
        assert "45000" in wider[0].error.message

    run(main)


def test_new_leader_parks_requests_until_its_epoch_start_commits() -> None:
    async def main() -> None:
        env = Env(auto_commit=False)
        await env.elect(1)
        env.quorum.commit()
        await settle()
        assert mode_of(env.ctrl[1]) is Mode.ACTIVE
        await env.elect(2)
        assert mode_of(env.ctrl[2]) is Mode.PENDING
        listing = spawn(env.api[2].list_topics(origin=ORIGIN))
        await settle()
        assert not listing.done()
        env.quorum.commit()
        await settle()
        assert mode_of(env.ctrl[2]) is Mode.ACTIVE
        assert listing.result() == ()

    run(main)


def test_stale_brokers_are_fenced_by_the_controller_itself() -> None:
    async def main() -> None:
        env = Env(session_timeout_ms=1_000)
        await env.elect(1)
        await env.register_brokers(1, [0, 4])
        env.clock.now_ms += 500
        beat = await env.api[1].broker_heartbeat(
            BrokerHeartbeatRequest(4, env.ctrl[1].state.cluster.broker(4).broker_epoch,  # type: ignore[union-attr]
                                   1 << 40), origin=ORIGIN)
        assert beat.error.ok
        env.clock.now_ms += 700
        env.ctrl[1].request_tick()
        await settle()
        brokers = {b.broker_id: b for b in env.ctrl[1].state.cluster.brokers()}
        assert brokers[0].fenced and not brokers[4].fenced
        last = env.quorum.log[-1]
        assert record_types(last) == ["broker_registration_change"]
        assert last.origin == EMPTY_ORIGIN

    run(main)


def test_voters_snapshot_at_different_offsets(tmp_path: Path) -> None:
    # A commit needs a majority: voters that all pause for a snapshot at the same
    # offset slow every request, so each voter starts k/n of an interval later.
    async def main() -> None:
        env = Env(snapshot_interval_bytes=3_000, snapshot_chunk_records=50)
        assert [env.ctrl[n].snapshot_phase_bytes() for n in (1, 2, 3)] == [0, 1_000, 2_000]
        for node_id, ctrl in env.ctrl.items():
            ctrl.enable_snapshots(tmp_path / f"snapshots-{node_id}")
        await env.elect(1)
        await env.register_brokers(1, [0, 4, 5])
        for i in range(60):
            res = await env.api[1].create_topics([topic(f"st{i}", 3, 3)], validate_only=False,
                                                 origin=ORIGIN)
            assert res[0].error.ok
        deadline = asyncio.get_running_loop().time() + 5
        while not all(env.quorum.nodes[n].compacted for n in (1, 2, 3)):
            assert asyncio.get_running_loop().time() < deadline, "a voter wrote no snapshot"
            await asyncio.sleep(0.01)
        firsts = [env.quorum.nodes[n].compacted[0].end_offset for n in (1, 2, 3)]
        assert firsts[0] < firsts[1] < firsts[2], firsts
        for ctrl in env.ctrl.values():
            await ctrl.stop()

    run(main)


def test_snapshots_written_in_steps_while_serving_and_load_into_equal_image(
        tmp_path: Path) -> None:
    async def main() -> None:
        env = Env(snapshot_interval_bytes=2_000, snapshot_chunk_records=7)
        env.ctrl[1].enable_snapshots(tmp_path / "snapshots")
        await env.elect(1)
        await env.register_brokers(1, [0, 4, 5])
        api = env.api[1]
        for i in range(30):
            res = await api.create_topics([topic(f"snap{i}", 3, 3)], validate_only=False,
                                          origin=ORIGIN)
            assert res[0].error.ok
        scheduler = env.ctrl[1].snapshots
        assert scheduler is not None
        deadline = asyncio.get_running_loop().time() + 5
        while not env.quorum.nodes[1].compacted:
            assert asyncio.get_running_loop().time() < deadline, "no snapshot"
            await asyncio.sleep(0.01)
        # History is kept only from a running job's offset (else the committed one) on.
        epochs = env.ctrl[1].registry.epochs()
        committed = env.ctrl[1].committed_offset - 1
        pinned = scheduler.pinned_offset
        assert epochs[0] == (committed if pinned is None else pinned)
        assert epochs[-1] == committed
        await env.ctrl[1].stop()
        sid = scheduler.last_snapshot
        assert sid is not None and env.quorum.nodes[1].compacted[-1].end_offset == sid.end_offset
        # The snapshot holds the committed state at its offset exactly.
        at_offset = MetadataState(cluster_id=CLUSTER_ID, rng=random.Random(0))
        for batch in env.quorum.committed_batches():
            if batch.next_offset <= sid.end_offset:
                at_offset.replay_batch([decode_record(r) for r in batch.records],
                                       batch.base_offset)
        fresh = QuorumController(ControllerSettings(node_id=9, cluster_id=CLUSTER_ID,
                                                    voter_addresses=VOTERS),
                                 clock_ms=env.clock, rng=random.Random(9))
        fresh.load_latest_snapshot(tmp_path / "snapshots")
        assert fresh.committed_offset == sid.end_offset
        assert fresh.state.to_image() == at_offset.to_image()

    run(main)


def test_the_snapshot_interval_grows_with_the_image(tmp_path: Path) -> None:
    """Raft thesis §5.1.3: a log significantly larger than the snapshot keeps the
    snapshot's cost small. The next snapshot waits for `interval_bytes` of committed
    records and at least `image_multiple` times the newest snapshot's size."""
    queued: list[object] = []

    async def compact(_sid: object) -> None:
        return None

    def scheduler(image_multiple: int) -> SnapshotScheduler:
        state = MetadataState(cluster_id=CLUSTER_ID, rng=random.Random(0))
        return SnapshotScheduler(state, tmp_path / f"m{image_multiple}", interval_bytes=1_000,
                                 chunk_records=10, run_on_node_task=queued.append,
                                 compact=compact, release_history=lambda: None,
                                 image_multiple=image_multiple)

    grows = scheduler(2)
    assert grows.threshold_bytes == 1_000
    assert not grows.committed(999, 999, 1, 0) and grows.committed(1, 1_000, 1, 0)
    grows.reset()  # (the job it started is not run here)
    grows.note_image_bytes(800)  # as a finished snapshot, or the newest file at start
    assert grows.threshold_bytes == 1_600
    assert not grows.committed(1_599, 2_599, 1, 0) and grows.committed(1, 2_600, 1, 0)
    grows.reset()
    grows.note_image_bytes(100)  # a smaller image: back to the byte interval
    assert grows.threshold_bytes == 1_000
    fixed = scheduler(0)
    fixed.note_image_bytes(10_000)
    assert fixed.threshold_bytes == 1_000
    assert len(queued) == 2


def test_a_snapshot_is_due_an_interval_after_the_last_once_the_byte_interval_came(
        tmp_path: Path) -> None:
    """The image multiple defers snapshots through a burst; after it, the log grows
    slowly and would keep the burst past the newest snapshot (what a restart
    replays). Once `interval_bytes` came since the newest snapshot, one is also due
    `max_interval_ms` after it started, on the machine's clock; not before, and not
    with less than the byte interval, however long it has been; 0 turns it off."""
    queued: list[object] = []

    async def compact(_sid: object) -> None:
        return None

    def scheduler(name: str, max_interval_ms: int) -> SnapshotScheduler:
        state = MetadataState(cluster_id=CLUSTER_ID, rng=random.Random(0))
        return SnapshotScheduler(state, tmp_path / name, interval_bytes=1_000, chunk_records=10,
                                 run_on_node_task=queued.append, compact=compact,
                                 release_history=lambda: None, image_multiple=2,
                                 max_interval_ms=max_interval_ms)

    timed = scheduler("timed", 60_000)
    timed.note_image_bytes(10_000)  # a large image: the multiple wants 20,000 bytes
    assert not timed.committed(500, 500, 1, 5_000)  # counting starts at 5,000 ms
    assert not timed.committed(500, 1_000, 1, 64_999)  # the bytes, not yet the time
    assert timed.committed(1, 1_001, 1, 65_000)  # both: due
    timed.reset()
    # The next counts from that start: the time alone (bytes short) is not enough ...
    assert not timed.committed(999, 2_000, 1, 200_000)
    # ... the bytes then make it due at once (the time has long passed) ...
    assert timed.committed(1, 2_001, 1, 200_001)
    timed.reset()
    # ... and the multiple still applies on its own, before the time.
    assert timed.committed(20_000, 22_001, 1, 200_002)
    timed.reset()
    untimed = scheduler("untimed", 0)
    untimed.note_image_bytes(10_000)
    assert not untimed.committed(19_999, 19_999, 1, 0)
    assert not untimed.committed(0, 19_999, 1, 10**9)
    assert untimed.committed(1, 20_000, 1, 10**9)
    assert len(queued) == 4


def test_snapshot_steps_take_at_most_their_busy_share(tmp_path: Path) -> None:
    """With `busy_percent` 25, a step of d seconds is followed by 3d seconds for the
    rest of the node task's work; the job still writes the whole image; a reset drops
    the step waiting its turn."""
    from tests.unit.metadata.support import Harness

    h = Harness()
    h.add_brokers([1, 2, 3])
    for i in range(4):
        h.create(f"t{i}", partitions=10, rf=3)
    h.state.registry.create_snapshot(h.committed)
    queued: list[Callable[[object], None]] = []
    delays: list[float] = []
    later: list[Callable[[], None]] = []
    cancelled: list[bool] = []

    class Handle:
        def cancel(self) -> None:
            cancelled.append(True)

    def call_later(delay_s: float, fn: Callable[[], None]) -> Handle:
        delays.append(delay_s)
        later.append(fn)
        return Handle()

    now = [0.0]

    def clock_s() -> float:  # each reading 1 ms after the last: a step takes 1 ms
        now[0] += 0.001
        return now[0]

    async def compact(_sid: object) -> None:
        return None

    def scheduler(directory: Path) -> SnapshotScheduler:
        return SnapshotScheduler(h.state, directory, interval_bytes=1, chunk_records=10,
                                 run_on_node_task=queued.append, compact=compact,
                                 release_history=lambda: None, busy_percent=25,
                                 call_later=call_later, clock_s=clock_s)

    async def main() -> None:
        snapshots = scheduler(tmp_path / "a")
        assert snapshots.committed(1, h.committed + 1, 1, 0)
        steps = 0
        while snapshots.pinned_offset is not None:
            assert len(queued) == 1 and not later  # one step at a time, never both
            queued.pop()(None)
            steps += 1
            if later:
                later.pop()()  # the delay has passed: the next step is queued
        assert steps > 3 and len(delays) == steps - 1
        assert all(abs(d - 0.003) < 1e-9 for d in delays), delays
        await asyncio.sleep(0)
        while snapshots.snapshots_written == 0:
            await asyncio.sleep(0.01)
        written = snapshots.last_snapshot
        assert written is not None and written.end_offset == h.committed + 1

        second = scheduler(tmp_path / "b")
        assert second.committed(1, h.committed + 1, 1, 0)
        queued.pop()(None)
        assert len(later) == 1 and not cancelled
        second.reset()
        assert cancelled == [True]
        await second.close()

    asyncio.run(main())


def test_image_chunks_concatenate_to_snapshot_records() -> None:
    async def main() -> None:
        env = Env()
        await env.elect(1)
        await env.register_brokers(1, [0, 4])
        for i in range(5):
            await env.api[1].create_topics([topic(f"c{i}", 4, 2)], validate_only=False,
                                           origin=ORIGIN)
        state = env.ctrl[1].state
        epoch = env.ctrl[1].committed_offset - 1
        chunks = list(iter_image_chunks(state, epoch, 3))
        assert len(chunks) > 3
        assert [r for c in chunks for r in c] == [
            encode_record(r) for r in state.snapshot_records(epoch)]

    run(main)


# ------------------------------------------------------------------ coalescing


class TurnCounter:
    """Counts the node-task turns the controller schedules on a fake node."""

    def __init__(self, env: Env, node_id: int) -> None:
        node = env.quorum.nodes[node_id]
        self.turns = 0
        inner = node.run_on_node_task

        def counted(work: Callable[[Any], None]) -> None:
            self.turns += 1
            inner(work)

        node.run_on_node_task = counted  # type: ignore[method-assign]


def test_coalesced_writes_run_in_one_turn_each_with_its_own_batch_origin_and_answer() -> None:
    async def main() -> None:
        env = Env(auto_commit=True)
        await env.elect(1)
        await env.register_brokers(1, [0, 4, 5])
        env.quorum.auto_commit = False
        counter = TurnCounter(env, 1)
        before = len(env.quorum.log)
        calls = [spawn(env.api[1].create_topics(
            [topic(f"co{i}", 2, 3)], validate_only=False,
            origin=Origin(f"user{i}", f"ipv4:10.0.0.{i}:1", f"req-co{i}"))) for i in range(5)]
        await settle()
        assert counter.turns == 1, "the queued writes ran in one node-task turn"
        batches = env.quorum.log[before:]
        assert len(batches) == 5, "one batch per request"
        for i, batch in enumerate(batches):
            assert (batch.origin.principal, batch.origin.client_address,
                    batch.origin.request_id) == (f"user{i}", f"ipv4:10.0.0.{i}:1", f"req-co{i}")
            # The write's records, then its entry in the table of recent writes.
            assert record_types(batch) == ["topic", "partition", "partition", "request_result"]
        assert not any(c.done() for c in calls), "answered before commit"
        # Commit the first three only: exactly their callers are answered.
        env.quorum.commit(batches[2].next_offset)
        await settle()
        assert [c.done() for c in calls] == [True, True, True, False, False]
        env.quorum.commit()
        await settle()
        for i, call in enumerate(calls):
            (result,) = call.result()
            assert result.name == f"co{i}" and result.error.ok

    run(main)


def test_replay_failure_in_one_coalesced_request_fails_only_that_request() -> None:
    from controller.logformat.batch import BatchOrigin
    from controller.metadata import ControllerResult
    from controller.metadata.errors import MetadataReplayError
    from controller.records import PartitionRecord, make_record

    async def main() -> None:
        env = Env(auto_commit=True)
        await env.elect(1)
        await env.register_brokers(1, [0])
        ctrl = env.ctrl[1]
        before = len(env.quorum.log)

        def bad(_next: int, _now: int) -> ControllerResult[str]:
            # A partition of a topic that does not exist: replay refuses it.
            record = make_record(PartitionRecord(topic_id="no-such-topic", partition_id=0,
                                                 replicas=[0], isr=[0], leader=0))
            return ControllerResult((record,), "bad")

        good1 = spawn(env.api[1].create_topics([topic("g1")], validate_only=False,
                                               origin=attrs.evolve(ORIGIN, request_id="r1")))
        broken = spawn(ctrl.write(Operation("Bad", run=lambda _ctx, _args, n, t: bad(n, t)),
                                  Args(), BatchOrigin("mallory", "x", "req-bad")))
        good2 = spawn(env.api[1].create_topics([topic("g2")], validate_only=False,
                                               origin=attrs.evolve(ORIGIN, request_id="r2")))
        await asyncio.wait([good1, broken, good2])
        assert isinstance(broken.exception(), MetadataReplayError)
        assert good1.result()[0].error.ok and good2.result()[0].error.ok
        origins = [b.origin.request_id for b in env.quorum.log[before:]]
        assert origins == ["r1", "r2"], "the refused request left no batch"
        assert {t.name for t in await env.api[1].list_topics(origin=ORIGIN)} == {"g1", "g2"}
        assert ctrl.state.to_image() == committed_state(env.quorum).to_image()

    run(main)


@pytest.mark.parametrize("keep_uncommitted", [False, True])
def test_leadership_lost_with_several_coalesced_batches_in_flight(keep_uncommitted: bool) -> None:
    async def main() -> None:
        env = Env(auto_commit=True)
        await env.elect(1)
        await env.register_brokers(1, [0, 4, 5])
        env.quorum.auto_commit = False
        counter = TurnCounter(env, 1)
        before = len(env.quorum.log)
        calls = [spawn(env.api[1].create_topics([topic(f"lf{i}", 3, 2)], validate_only=False,
                                                origin=ORIGIN)) for i in range(4)]
        await settle()
        assert counter.turns == 1 and len(env.quorum.log) == before + 4
        env.quorum.resign()
        await env.elect(2, keep_uncommitted=keep_uncommitted)
        env.quorum.commit()
        await settle()
        if keep_uncommitted:
            assert all(c.result()[0].error.ok for c in calls)
        else:
            for call in calls:
                exc = call.exception()
                assert isinstance(exc, NotControllerError) and exc.leader_id == 2
        names = {t.name for t in await env.api[2].list_topics(origin=ORIGIN)}
        assert names == ({f"lf{i}" for i in range(4)} if keep_uncommitted else set())
        want = committed_state(env.quorum).to_image()
        for node_id in (1, 2, 3):
            assert env.ctrl[node_id].state.to_image() == want, node_id

    run(main)


def test_queued_events_fail_fast_once_the_node_task_is_gone() -> None:
    async def main() -> None:
        env = Env(auto_commit=True)
        await env.elect(1)
        node = env.quorum.nodes[1]
        # A turn is scheduled and then lost with the node task (the driver stopped).
        lost: list[Callable[[Any], None]] = []
        node.run_on_node_task = lost.append  # type: ignore[method-assign,assignment]
        call = spawn(env.api[1].list_topics(origin=ORIGIN))
        await settle()
        assert len(lost) == 1 and not call.done()
        node.stopped = True
        del node.run_on_node_task  # back to the real method, which now refuses
        env.ctrl[1].request_tick()
        await settle()
        assert isinstance(call.exception(), NotControllerError)
        with pytest.raises(NotControllerError):
            await env.api[1].list_topics(origin=ORIGIN)
        assert env.ctrl[1].queued_events == 0

    run(main)


# ------------------------------------------------- brokers of many partitions

# 2 x 5,100 partitions at RF 3 on three brokers: each broker is a replica of 10,200,
# more than one batch may hold (MAX_RECORDS_PER_BATCH 10,000). Before the partition
# mover, fencing such a broker generated all 10,200 changes plus the fence record as
# one batch, which `_append` refused as too large -- silently, nobody waits for a
# fence: the dead broker stayed unfenced and kept every leadership, tick after tick.
BIG_TOPICS = (("big-a", 5_100), ("big-b", 5_100))
BIG_BROKERS = [0, 4, 5]


async def big_cluster(**settings: Any) -> Env:
    env = Env(**settings)
    await env.elect(1)
    await env.register_brokers(1, BIG_BROKERS)
    for name, count in BIG_TOPICS:
        created = await env.api[1].create_topics([topic(name, count, 3)], validate_only=False,
                                                 origin=ORIGIN)
        assert created[0].error.ok, created
    return env


async def beat(env: Env, node: int, broker_id: int, **wants: bool) -> Any:
    broker = env.ctrl[node].state.cluster.broker(broker_id)
    assert broker is not None
    return await env.api[node].broker_heartbeat(
        BrokerHeartbeatRequest(broker_id, broker.broker_epoch, 1 << 40, **wants), origin=ORIGIN)


async def until_moved(env: Env, node: int) -> None:
    """Let the active controller's ticks run until it owes no partition change (each
    tick writes one batch and queues the next)."""
    for _ in range(200):
        await settle(5)
        if not env.ctrl[node].machine.owes_partition_moves:
            return
    raise AssertionError("the partition mover did not finish")


def partitions_of(env: Env, node: int) -> list[Any]:
    state = env.ctrl[node].state.replication
    return [p.registration for t in state.describe_topics() for p in t.partitions]


def change_batches_after(env: Env, offset: int) -> list[list[str]]:
    return [record_types(b) for b in env.quorum.log if b.base_offset >= offset]


def test_fencing_a_broker_of_many_partitions_moves_them_in_batches() -> None:
    from controller.metadata.replication import PARTITION_MOVES_PER_BATCH

    async def main() -> None:
        # It ends with the heartbeat rule of ISRs (replica-reported ones need a leader's
        # AlterPartition).
        env = await big_cluster(session_timeout_ms=1_000,
                                bootstrap_metadata_version=Feature.REPLICA_REPORTED_ISR.level - 1)
        led_by_0 = sum(1 for p in partitions_of(env, 1) if p.leader == 0)
        assert led_by_0 > PARTITION_MOVES_PER_BATCH
        before = env.quorum.end_offset
        env.clock.now_ms += 600
        for b in (4, 5):
            assert (await beat(env, 1, b)).error.ok
        env.clock.now_ms += 600  # broker 0's session (1 s) is over; 4 and 5 heard 0.6 s ago
        env.ctrl[1].request_tick()
        await until_moved(env, 1)
        brokers = {b.broker_id: b for b in env.ctrl[1].state.cluster.brokers()}
        assert brokers[0].fenced and not brokers[4].fenced and not brokers[5].fenced
        parts = partitions_of(env, 1)
        assert all(p.leader in (4, 5) and 0 not in p.isr for p in parts)
        batches = change_batches_after(env, before)
        # The fence record alone first, then the changes in bounded batches.
        assert batches[0] == ["broker_registration_change"]
        assert all(set(b) == {"partition_change"} for b in batches[1:])
        assert max(len(b) for b in batches) <= PARTITION_MOVES_PER_BATCH
        assert sum(len(b) for b in batches[1:]) == 10_200
        # Leaderships first: the batches that move broker 0's leaderships come before
        # those that only shrink an ISR.
        moved_leaders = [i for i, b in enumerate(env.quorum.log) if b.base_offset > before
                         and any(decode_record(r).partition_change.HasField("leader")
                                 for r in b.records)]
        assert moved_leaders == list(range(moved_leaders[0], moved_leaders[0] + len(moved_leaders)))
        assert sum(1 for b in env.quorum.log[moved_leaders[0]:moved_leaders[-1] + 1]
                   for _ in b.records) < led_by_0 + PARTITION_MOVES_PER_BATCH
        # The standby replaying the log agrees.
        assert committed_state(env.quorum).replication.list_topics() \
            == env.ctrl[1].state.replication.list_topics()
        assert all(p.leader in (4, 5) and 0 not in p.isr for p in partitions_of(env, 2))

        # Back: its heartbeat unfences it, and it rejoins every ISR in batches too.
        assert not (await beat(env, 1, 0)).is_fenced
        await until_moved(env, 1)
        assert all(0 in p.isr for p in partitions_of(env, 1))

    asyncio.run(asyncio.wait_for(main(), 120))


def test_a_new_active_controller_finishes_moves_the_last_one_left_half_done() -> None:
    async def main() -> None:
        env = await big_cluster()
        reply = await beat(env, 1, 0, want_fence=True)
        assert reply.is_fenced
        # Two turns of node 1's mover, then node 2 takes over.
        for _ in range(3):
            env.ctrl[1].request_tick()
            await settle(3)
        left = [p for p in partitions_of(env, 1) if p.leader == 0 or 0 in p.isr]
        assert left, "the test needs the moves half done"
        await env.elect(2)
        env.ctrl[2].request_tick()
        await until_moved(env, 2)
        assert all(p.leader in (4, 5) and 0 not in p.isr for p in partitions_of(env, 2))

    asyncio.run(asyncio.wait_for(main(), 120))


def test_controlled_shutdown_of_a_broker_of_many_partitions() -> None:
    async def main() -> None:
        env = await big_cluster()
        first = await beat(env, 1, 0, want_shutdown=True)
        assert first.error.ok and first.in_controlled_shutdown and not first.should_shut_down
        await until_moved(env, 1)
        assert not any(p.leader == 0 for p in partitions_of(env, 1))
        last = await beat(env, 1, 0, want_shutdown=True)
        assert last.should_shut_down

    asyncio.run(asyncio.wait_for(main(), 120))
