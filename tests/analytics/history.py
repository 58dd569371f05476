"""A real metadata log from a scripted history, written by the real controller code.

Three `QuorumController`s (the real single-threaded controller, real control
managers, real record encoder) run on the in-memory quorum of
tests/support/controller_fake_quorum.py; every committed batch is then appended to
a real `SegmentedLog` (real batch codec, CRCs, segment rolling), and a snapshot file
is written with the real `SnapshotWriter`.

Why in-process rather than three controller processes: the history must be exact
(the tests check audit answers against it) and fast (it runs in every test session);
the failover here is a real change of the active controller (controller 3000 -> 3001, a new
Raft epoch with its LeaderChange batch, node 2 activating from its standby replay),
only the Raft transport is simulated. The append times come from a scripted clock
that advances between requests, so time-based audits see a real timeline.

`HISTORY` (a `Known`) records what the script did, for the tests to compare with.
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path
from typing import Any

import attrs

from controller.api.seam import Origin
from controller.logformat import SnapshotId
from controller.logformat.batch import BatchOrigin, RecordBatch
from controller.metadata import (
    AlterConfigOp,
    AlterConfigsResource,
    BrokerHeartbeatRequest,
    BrokerRegistrationRequest,
    ConfigResource,
    CreatableTopic,
    CreatePartitionsTopic,
    ElectionType,
    MetadataState,
    OpType,
    ReassignmentRequest,
    TopicPartition,
)
from controller.metadata.config_schema import ResourceType
from controller.metadata.levels import Feature
from controller.quorum_controller.controller import QuorumController
from controller.quorum_controller.facade import ControllerApi
from controller.quorum_controller.ports import ControllerSettings
from controller.records import decode_record, encode_record
from controller.records.domain import Listener
from controller.storage.log import LogConfig, SegmentedLog
from controller.storage.snapshot_file import SnapshotWriter
from tests.support.admin_calls import AdminCalls
from tests.support.controller_fake_quorum import FakeQuorum

CLUSTER_ID = "audit-test-cluster"
# Controller ids of their own: brokers (1, 2, ...) may not take a controller's.
C1, C2, C3 = 3000, 3001, 3002
VOTERS = {C1: "127.0.0.1:9101", C2: "127.0.0.1:9102", C3: "127.0.0.1:9103"}
ALICE = Origin("alice", "ipv4:10.0.0.5:4100", "req-a")
BOB = Origin("bob", "ipv4:10.0.0.6:4200", "req-b")


def req(who: Origin, n: int) -> Origin:
    """`who`'s n-th request: each write has its own request id, as a client gives it
    (the controller answers a repeated id with the first answer, applying nothing)."""
    return attrs.evolve(who, request_id=f"{who.request_id}{n}")
START_MS = 1_700_000_000_000
SESSION_MS = 9_000


@attrs.define
class Known:
    """What the script did (filled while it runs)."""

    topic_ids: dict[str, str] = attrs.Factory(dict)
    broker_epochs: dict[int, int] = attrs.Factory(dict)
    failover_epoch: int = 0
    # orders-0's reassignment that was cancelled: (original replicas, target).
    cancelled: tuple[tuple[int, ...], tuple[int, ...]] = ((), ())
    end_offset: int = 0
    snapshot_offset: int = 0
    segment_count: int = 0
    events: list[tuple[str, Any]] = attrs.Factory(list)


class StampedQuorum(FakeQuorum):
    """The fake quorum, stamping each batch with the scripted clock's time."""

    def __init__(self, clock: list[int], *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.clock = clock

    def append(self, records: tuple[bytes, ...], origin: BatchOrigin,
               *, is_control: bool = False) -> int:
        base = super().append(records, origin, is_control=is_control)
        self.log[-1] = attrs.evolve(self.log[-1], append_time_ms=self.clock[0])
        return base


async def _settle(rounds: int = 40) -> None:
    for _ in range(rounds):
        await asyncio.sleep(0)


class Script:
    def __init__(self) -> None:
        self.clock = [START_MS]
        self.quorum = StampedQuorum(self.clock, [C1, C2, C3])
        self.ctrl: dict[int, QuorumController] = {}
        self.api: dict[int, AdminCalls] = {}
        for node_id, node in self.quorum.nodes.items():
            # The history's brokers rejoin ISRs by heartbeat (they hold no logs to
            # report from): the last level with that rule.
            settings = ControllerSettings(
                node_id=node_id, cluster_id=CLUSTER_ID, voter_addresses=VOTERS,
                session_timeout_ms=SESSION_MS,
                bootstrap_metadata_version=Feature.REPLICA_REPORTED_ISR.level - 1)
            ctrl = QuorumController(settings, clock_ms=lambda: self.clock[0],
                                    # The seeds the history's facts were written with.
                                    rng=random.Random(node_id - C1 + 1))
            ctrl.attach(node)
            node.listener = ctrl
            self.ctrl[node_id] = ctrl
            self.api[node_id] = AdminCalls(ControllerApi(ctrl, node))
        self.leader = C1
        self.alive: set[int] = set()
        self.known = Known()

    def tick(self, ms: int = 1_000) -> None:
        self.clock[0] += ms

    async def elect(self, node_id: int) -> None:
        self.quorum.elect(node_id)
        self.leader = node_id
        await _settle()

    async def heartbeat_alive(self) -> None:
        api = self.api[self.leader]
        for bid in sorted(self.alive):
            beat = await api.broker_heartbeat(
                BrokerHeartbeatRequest(bid, self.known.broker_epochs[bid], 1 << 40),
                origin=Origin(f"broker-{bid}", f"ipv4:10.0.1.{bid}:9092"))
            assert beat.error.ok, beat

    async def step(self, ms: int = 1_000) -> None:
        """Time passes; live brokers heartbeat (so only dead ones get fenced)."""
        self.tick(ms)
        await self.heartbeat_alive()
        self.ctrl[self.leader].request_tick()
        await _settle()

    async def register(self, bid: int) -> None:
        reply = await self.api[self.leader].register_broker(
            BrokerRegistrationRequest(bid, f"incarnation-{bid}-{self.clock[0]}", CLUSTER_ID,
                                      listeners=(Listener("PLAINTEXT", "localhost", 9092, "PLAINTEXT"),)),
            origin=Origin(f"broker-{bid}", f"ipv4:10.0.1.{bid}:9092"))
        assert reply.error.ok, reply
        self.known.broker_epochs[bid] = reply.broker_epoch
        self.alive.add(bid)
        self.known.events.append(("register", bid))

    async def create(self, name: str, who: Origin, **kw: Any) -> None:
        res = await self.api[self.leader].create_topics(
            [CreatableTopic(name, **kw)], validate_only=False, origin=who)
        assert res[0].error.ok, res
        self.known.topic_ids[name] = res[0].topic_id

    async def set_config(self, topic: str, key: str, value: str | None, who: Origin) -> None:
        op = AlterConfigOp(key, OpType.SET if value is not None else OpType.DELETE, value)
        res = await self.api[self.leader].incremental_alter_configs(
            [AlterConfigsResource(ConfigResource(ResourceType.TOPIC, topic), (op,))],
            validate_only=False, origin=who)
        assert res[0].error.ok, res

    async def run(self) -> None:
        api = lambda: self.api[self.leader]  # noqa: E731  (the leader changes mid-script)
        await self.elect(C1)
        for bid in (0, 1, 2, 3):
            await self.register(bid)
            self.tick(100)
        await self.step()
        await self.create("orders", req(ALICE, 1), num_partitions=3, replication_factor=3,
                          assignments=())
        await self.step()
        await self.create("logs", req(BOB, 1), assignments=((0, 1), (1, 2)))
        await self.create("fragile", req(ALICE, 2), assignments=((1, 3),))
        await self.step()
        await self.set_config("orders", "retention.ms", "1000", req(ALICE, 3))
        await self.step()
        await self.set_config("orders", "retention.ms", "2000", req(ALICE, 4))
        res = await api().create_partitions([CreatePartitionsTopic("orders", 4)],
                                            validate_only=False, origin=req(ALICE, 5))
        assert res[0].error.ok, res
        # Broker 2 dies: it stops heartbeating and the controller fences it.
        self.alive.discard(2)
        for _ in range(11):
            await self.step()
        assert self.ctrl[self.leader].state.cluster.broker(2).fenced  # type: ignore[union-attr]
        self.known.events.append(("fenced", 2))
        # Controller failover: node 2 takes over in a new Raft epoch.
        await self.elect(C2)
        self.known.failover_epoch = self.quorum.epoch
        await self.step()
        # Broker 2 comes back (same registration): it is unfenced and rejoins ISRs.
        self.alive.add(2)
        await self.step()
        self.known.events.append(("unfenced", 2))
        await self.step()
        # Reassign logs-0 from [0, 1] to [1, 3]; broker 3 catches up on its next heartbeat.
        res2 = await api().alter_partition_reassignments(
            [ReassignmentRequest("logs", 0, (1, 3))], origin=req(BOB, 2))
        assert res2[0].error.ok, res2
        await self.step(2_000)
        await self.step()
        # fragile-0 on [1, 3]: broker 3 fails (ISR shrinks to [1]), then broker 1 fails
        # (offline), broker 3 returns; an unclean election makes 3 the leader.
        self.alive.discard(3)
        for _ in range(11):
            await self.step()
        self.alive.discard(1)
        for _ in range(11):
            await self.step()
        self.alive.add(3)
        await self.step()
        res3 = await api().elect_leaders([TopicPartition("fragile", 0)],
                                         extra=ElectionType.UNCLEAN, origin=req(ALICE, 6))
        assert res3[0].error.ok, res3
        self.alive.add(1)
        await self.step()
        await self.step()
        res4 = await api().delete_topics(["logs"], origin=req(BOB, 3))
        assert res4[0].error.ok, res4
        await self.step()
        await self.set_config("orders", "retention.ms", None, req(ALICE, 7))
        await self.step()
        # A move within the ISR (fragile-0 [1, 3] -> [3, 1]) is one record, no phase.
        res5 = await api().alter_partition_reassignments(
            [ReassignmentRequest("fragile", 0, (3, 1))], origin=req(BOB, 4))
        assert res5[0].error.ok, res5
        await self.step()
        # A reassignment cancelled before its new replica caught up (no step between).
        orders0 = self.ctrl[self.leader].state.replication.partition(
            self.known.topic_ids["orders"], 0)
        assert orders0 is not None
        spare = next(b for b in (0, 1, 2, 3) if b not in orders0.replicas)
        target = (spare, *orders0.replicas[1:])
        res6 = await api().alter_partition_reassignments(
            [ReassignmentRequest("orders", 0, target)], origin=req(ALICE, 8))
        assert res6[0].error.ok, res6
        res7 = await api().alter_partition_reassignments(
            [ReassignmentRequest("orders", 0, None)], origin=req(ALICE, 9))
        assert res7[0].error.ok, res7
        self.known.cancelled = (tuple(orders0.replicas), target)
        await self.step()


def build_log(data_dir: Path) -> Known:
    """Run the script and write DIR/metadata segments and one DIR/snapshots file."""
    script = Script()
    asyncio.run(asyncio.wait_for(script.run(), 60))
    batches = script.quorum.committed_batches()
    # Rolling by age on the batches' own append times gives several segments.
    log = SegmentedLog.open(data_dir / "metadata", LogConfig(segment_ms=15_000))
    for batch in batches:
        log.append(batch)
    log.flush()
    known = script.known
    known.end_offset = log.end_offset
    known.segment_count = log.segment_count
    log.close()
    # A snapshot at the middle of the log, from the controller's own replay.
    snap_end = batches[len(batches) // 2].base_offset
    state = replay_state(batches, snap_end)
    last = next(b for b in reversed(batches) if b.next_offset <= snap_end)
    with SnapshotWriter(data_dir / "snapshots", SnapshotId(snap_end, last.epoch),
                        last.append_time_ms) as writer:
        writer.append(encode_record(r) for r in state.snapshot_records())
        writer.freeze()
    known.snapshot_offset = snap_end - 1
    return known


def replay_state(batches: list[RecordBatch], end_offset: int) -> MetadataState:
    """The controller's own replay of every non-control record below `end_offset`."""
    state = MetadataState(cluster_id=CLUSTER_ID, rng=random.Random(0),
                          session_timeout_ms=SESSION_MS)
    for batch in batches:
        if batch.is_control:
            continue
        for i, raw in enumerate(batch.records):
            if batch.base_offset + i < end_offset:
                state.replay(decode_record(raw), batch.base_offset + i)
    return state
