"""The whole-system simulation: the real controller on the real Raft core.

Every voter of the Raft simulation (cluster.py: simulated clock, network and disk,
its faults) runs the real `ControllerMachine` with the real control managers and
timeline on top of its `RaftNode`, fed exactly what the asyncio driver feeds it:
committed batches, leader changes, ticks, snapshots. Brokers register and
heartbeat through their real `LifecycleMachine`; clients send a random mix of
admin writes (creates, deletes, partition adds, configs, reassignments, leader
elections) and reads to whichever controller they pick.

Checked as it runs (`SystemCluster._check_node` and the client answers):
- every controller's committed state equals a fresh replay of the committed log up
  to the offset it has applied (an oracle replays the cluster-wide committed log);
  a standby's whole state does too, so a renounced leader's revert is checked;
- no controller answers success while a batch of that request is uncommitted;
- an active controller fences a broker at its first tick past the session timeout;
- writes are linearizable: a write sent after another was acknowledged commits
  after it (real-time order holds in the log's order);
- everything the Raft simulation checks (one leader per epoch, committed batches
  never change or vanish, durability on a majority, liveness after healing).
"""

from __future__ import annotations

import random
import tempfile
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs

from broker_agent.lifecycle_machine import Action, LifecycleMachine
from controller.api.rpcs import ADMIN_RPCS_BY_NAME, AdminRpc
from controller.api.seam import Args, Operation, ResultCodec
from controller.logformat import BatchOrigin, RecordBatch, SnapshotId
from controller.metadata import (
    AlterConfigOp,
    AlterConfigsResource,
    BrokerHeartbeatRequest,
    BrokerRegistrationRequest,
    ConfigResource,
    CreatableTopic,
    CreatePartitionsTopic,
    ElectionType,
    MetadataImage,
    MetadataState,
    OpType,
    ReassignmentRequest,
    ResourceType,
    TopicPartition,
)
from controller.metadata.alter_partition import AlterPartitionRequest
from controller.quorum.errors import NotLeaderError, ProposalRejectedError, proposal_refused
from controller.quorum_controller.events import Answer, Fail, Mode, ReadConsistency, Request
from controller.quorum_controller.facade import ALTER_PARTITION, BROKER_HEARTBEAT, REGISTER_BROKER
from controller.quorum_controller.machine import ControllerMachine
from controller.quorum_controller.ports import ControllerSettings
from controller.quorum_controller.snapshots import iter_image_chunks
from controller.raft import Role
from controller.raft.control import voters_from_record
from controller.raft.messages import Errors, FetchResponse, Message
from controller.raft.reads import ReadState
from controller.raft.ready import ProposeError
from controller.raft.voters import EMPTY_VOTER_SET, Voter, VoterChangeResult, VoterSet
from controller.records import decode_record, record_type
from controller.records.domain import Listener
from tests.simulation.cluster import Cluster
from tests.simulation.invariants import InvariantViolation
from tests.simulation.nodes import CLUSTER_ID, SimNode, StateMachine
from tests.simulation.system_brokers import BrokerDisk, BrokerSM, decode_snapshot, encode_snapshot
from tests.simulation.system_data import SystemDataPlane
from tests.simulation.system_watch import SimWatcher
from tests.support.op_context import StateContext

SESSION_TIMEOUT_MS = 600
HEARTBEAT_MS = 100
BROKERS = (101, 102, 103)  # not Raft node ids: a broker may not take a controller's
TOPICS = tuple(f"t{i}" for i in range(6))
# The Admin method each simulated write kind is (its name in the table of writes).
# The client's requests, each an Admin RPC's row (what the API would run).
RPCS = {"create": "CreateTopics", "delete": "DeleteTopics", "partitions": "CreatePartitions",
        "config": "IncrementalAlterConfigs", "reassign": "AlterPartitionReassignments",
        "elect": "ElectLeaders", "describe": "DescribeTopics", "list": "ListTopics",
        "configs": "DescribeConfigs"}


# The data plane's files: in memory where the machine has it (thousands of seeds
# fsync thousands of times each; durability across a machine crash is not simulated).
_MEMORY_DIR = "/dev/shm" if Path("/dev/shm").is_dir() else None


class SimAccess:
    """`NodeAccess` over a simulated node's Raft core (what the driver's is)."""

    def __init__(self, cluster: SystemCluster, node: SimNode) -> None:
        self._cluster = cluster
        self._node = node

    @property
    def next_offset(self) -> int:
        return self._node.log.end_offset

    @property
    def leader_epoch(self) -> int | None:
        raft = self._node.raft
        assert raft is not None
        return raft.epoch if raft.role is Role.LEADER else None

    @property
    def known_leader_id(self) -> int | None:
        raft = self._node.raft
        assert raft is not None
        return raft.advertised_leader_id()

    @property
    def high_watermark(self) -> int | None:
        raft = self._node.raft
        return None if raft is None else raft.high_watermark

    def append(self, records: Any, origin: BatchOrigin) -> int:
        raft = self._node.raft
        assert raft is not None
        result = raft.propose(tuple(records), self._cluster.now_ms, origin)
        if result.error is ProposeError.NOT_LEADER:
            leader = result.leader
            raise NotLeaderError(leader.leader_id if leader else None, result.epoch)
        if result.error is not None:
            raise proposal_refused(result.error)
        assert result.base_offset is not None
        return result.base_offset

    def change_voters(self, kind: str, voter: Voter, dry_run: bool
                      ) -> tuple[VoterChangeResult, None]:
        raft = self._node.raft
        assert raft is not None
        # The simulation checks commits itself; no future to await.
        return raft.change_voters(kind, voter, self._cluster.now_ms, dry_run=dry_run), None

    def read_index(self, read_id: int) -> None:
        raft = self._node.raft
        assert raft is not None
        error = raft.read_index(read_id, self._cluster.now_ms)
        if error is ProposeError.NOT_LEADER:
            raise NotLeaderError(raft.advertised_leader_id(), raft.epoch)
        if error is not None:
            raise ProposalRejectedError(error.value)


class SimSnapshots:
    """The controller's `SnapshotPolicy`, driven the way `SnapshotScheduler` drives it:
    a job starts every `interval_bytes` of committed records (or when a fault asks),
    pins the registry snapshot at its offset, writes the image from the timeline *at
    that offset* a few records per controller tick while newer writes go on
    (`iter_image_chunks`, the real encoder), then takes a disk delay to land. A crash
    before it lands loses it (the temp file of a real writer), so the log must not have
    been compacted below it."""

    def __init__(self, interval_bytes: int, chunk_records: int) -> None:
        self.interval_bytes = interval_bytes
        self.chunk_records = chunk_records
        self.bytes_since = 0
        # (last offset, epoch, chunks still to write, records written so far)
        self.job: tuple[int, int, Iterator[list[bytes]] | None, list[bytes]] | None = None
        self.finishing = False
        self.started = 0

    def committed(self, batch_bytes: int, committed_next: int, epoch: int,
                  now_ms: int) -> bool:
        self.bytes_since += batch_bytes
        if self.bytes_since >= self.interval_bytes and committed_next > 0:
            return self.start(committed_next - 1, epoch)
        return False

    def snapshot_next(self) -> None:
        self.bytes_since = max(self.bytes_since, self.interval_bytes)

    def start(self, last_offset: int, epoch: int) -> bool:
        if self.job is not None or self.finishing:
            return False
        self.bytes_since = 0
        self.job = (last_offset, epoch, None, [])
        self.started += 1
        return True

    @property
    def pinned_offset(self) -> int | None:
        return None if self.job is None else self.job[0]

    def reset(self) -> None:
        self.job = None
        self.bytes_since = 0

    def step(self, state: MetadataState) -> tuple[SnapshotId, bytes] | None:
        """One chunk; the snapshot's id and bytes once every record is written."""
        assert self.job is not None
        last, epoch, chunks, written = self.job
        if chunks is None:
            chunks = iter_image_chunks(state, last, self.chunk_records)
            self.job = (last, epoch, chunks, written)
        chunk = next(chunks, None)
        if chunk is not None:
            written.extend(chunk)
            return None
        self.job = None
        self.finishing = True
        return SnapshotId(last + 1, epoch), encode_snapshot(written)


class ControllerSM(StateMachine):
    """A voter's state machine: the real controller."""

    def __init__(self, cluster: SystemCluster, node: SimNode) -> None:
        super().__init__()
        settings = ControllerSettings(
            node_id=node.id, cluster_id=CLUSTER_ID,
            voter_addresses={v: f"sim:{v}" for v in cluster.voters},
            session_timeout_ms=SESSION_TIMEOUT_MS, orphan_timeout_ms=500,
            activation_wait_ms=400)
        self.machine = ControllerMachine(
            settings, rng=random.Random(cluster.seed * 7919 + node.id * 13 + node.incarnation))
        self.checked: tuple[int, Mode] | None = None
        self.last_mode = Mode.STANDBY
        self.snapshots = SimSnapshots(cluster.snapshot_interval_bytes,
                                      cluster.snapshot_chunk_records)
        self.machine.snapshots = self.snapshots

    @property  # type: ignore[override]
    def applied_offset(self) -> int:
        return self.machine.committed_offset

    @applied_offset.setter
    def applied_offset(self, _value: int) -> None:
        pass  # StateMachine's constructor sets it; the machine keeps its own


class SystemCluster(Cluster):
    def __init__(self, seed: int, duration_ms: int = 3000, settle_ms: int = 1200,
                 data_bugs: frozenset[str] = frozenset(), data_plane: bool = True) -> None:
        # False: brokers only register and heartbeat (what a test of the controllers
        # alone wants: the data plane's AlterPartition traffic reaches deposed leaders
        # too, which then step down sooner, and some controller bugs show later).
        self.data_plane = data_plane
        # The oracle: the cluster-wide committed log replayed into one state, with a
        # registry snapshot after every batch so any committed offset can be read.
        self.oracle = MetadataState(cluster_id=CLUSTER_ID, rng=random.Random(0))
        self.oracle.registry.create_snapshot(-1)
        self.oracle_images: dict[int, MetadataImage] = {0: self.oracle.to_image()}
        self.next_request = 0
        # Machine request id -> (kind, node, the request id in its batch origin).
        self.pending: dict[int, tuple[str, int, str]] = {}
        # Exactly once: admin writes by origin request id -> (kind, its arguments,
        # retries left); those applied; the first answer after applying.
        self.writes: dict[str, tuple[str, Args, int]] = {}
        self.applied_ids: set[str] = set()
        self.first_answers: dict[str, Any] = {}
        # Attempts (machine request ids) the client stopped waiting for.
        self.abandoned: set[int] = set()
        self.outcomes: Counter[str] = Counter()
        self.brokers: dict[int, LifecycleMachine] = {}
        # Each broker node's local replica store: it outlives crashes.
        self.broker_disks: dict[int, BrokerDisk] = {}
        # Per observer: the highest high watermark a fetch response brought its
        # current process (the driver's `fetched_high_watermark`).
        self.fetched_hw: dict[int, int] = {}
        self.reverts = 0
        # Brokers the committed log moved from in service to fenced (sessions expired).
        self.fencings = 0
        # Linearizability of writes: the highest committed offset of an acknowledged
        # write, and for each request sent, that offset when it was sent.
        self.max_acked_offset = -1
        self.acked_before_send: dict[str, int] = {}
        # Linearizability of reads: the highest end offset a linearizable read was
        # answered at, and per read sent: (its query on any state, the least end
        # offset it may be answered at, whether it must be linearizable).
        self.max_read_offset = 0
        self.reads: dict[int, tuple[AdminRpc, Args, int, bool]] = {}
        self.snapshots_written = 0
        self.snapshots_lost = 0
        # Conditional writes (compare-and-set): origin request id -> (what it is
        # conditional on, the expected version, how to read it from a state). A write
        # whose records commit must find its condition true in the committed state
        # just before its batch. Their own generator: the seeds' requests stay.
        self.conditions: dict[str, tuple[str, int, Callable[[MetadataState], int]]] = {}
        self.cas_rng = random.Random(seed * 7919 + 3)
        # Their own generator: the base class's draws (and so its seeds) stay as they were.
        choices = random.Random(seed * 104729 + 17)
        self.snapshot_interval_bytes = choices.choice((400, 1500, 6000))
        self.snapshot_chunk_records = choices.choice((2, 8, 64))
        self._jitter = choices.random
        super().__init__(seed, duration_ms, settle_ms)
        # Each broker's process incarnation (its data plane restarts it).
        self.incarnations = dict.fromkeys(BROKERS, 0)
        # AlterPartition requests in flight: machine request id -> the data plane's token.
        self.alter_tokens: dict[int, int] = {}
        for broker_id in BROKERS:
            self.brokers[broker_id] = self._lifecycle(broker_id)
            self._at(self.rng.randint(20, 200), "broker", broker_id)
        # The brokers' data plane (system_data.py): real partition logs on real files.
        self.data = SystemDataPlane(seed, Path(tempfile.mkdtemp(prefix=f"system-sim-{seed}-",
                                                                dir=_MEMORY_DIR)),
                                    BROKERS, self, data_bugs)
        self._at(self.data.rng.randint(5, 30), "data")
        # A Watch client following the log from offset 0 (its own generator).
        self.watcher = SimWatcher(self, random.Random(seed * 6007 + 11))
        self._at(self.watcher.rng.randint(10, 60), "watch")

    def _lifecycle(self, broker_id: int) -> LifecycleMachine:
        return LifecycleMachine(broker_id, heartbeat_interval_s=HEARTBEAT_MS / 1000,
                                shutdown_timeout_s=5.0, jitter=self._jitter)

    # ------------------------------------------------------------ the data plane's

    def committed_ends(self) -> list[int]:
        return list(self.oracle_images)

    def image_at(self, end_offset: int) -> MetadataImage:
        return self.oracle_images[end_offset]

    def broker_epoch(self, broker_id: int) -> int:
        return self.brokers[broker_id].broker_epoch

    def new_incarnation(self, broker_id: int) -> None:
        self.incarnations[broker_id] += 1
        self.brokers[broker_id] = self._lifecycle(broker_id)

    def send_alter_partition(self, broker_id: int, request: AlterPartitionRequest,
                             token: int) -> bool:
        node = self._pick_controller(leader_only=True, rng=self.data.rng)
        if node is None:
            return False
        # Its machine request id: known before the send (a refusal answers at once).
        self.alter_tokens[self.next_request + 1] = token
        self._send_request(node, f"alter:{broker_id}:{self.incarnations[broker_id]}",
                           ALTER_PARTITION, Args(tuple(request.items), extra=request))
        return True

    def _ev_data(self) -> None:
        if not self.data_plane:
            return
        self.data.step(faults=self.now_ms < self.duration_ms - self.settle_ms)
        self._at(self.now_ms + self.data.rng.randint(4, 20), "data")

    def _ev_heal(self) -> None:
        super()._ev_heal()
        self.data.heal()

    # ------------------------------------------------------------ plug-ins

    def _controller(self, node: SimNode) -> ControllerMachine | None:
        sm = node.sm
        return sm.machine if isinstance(sm, ControllerSM) else None

    controller_of = _controller

    def _ev_watch(self) -> None:
        """The watcher (system_watch.py) takes its next changes."""
        self._at(self.now_ms + self.watcher.rng.randint(10, 60), "watch")
        self.watcher.step()

    def _restart_state_machine(self, node: SimNode, start: SnapshotId,
                               data: bytes | None) -> None:
        if not node.is_voter:
            # A broker restarts from its local state (its disk survives the crash).
            observers = sorted(n for n in self.nodes if n not in self.voters)
            broker_id = BROKERS[observers.index(node.id) % len(BROKERS)]
            self.fetched_hw[node.id] = -1  # a new process has had no fetch answered
            node.sm = BrokerSM(broker_id, self.broker_disks.setdefault(node.id, BrokerDisk()),
                               lambda: self.fetched_hw[node.id])
            if data is not None:
                node.sm.start(start.end_offset, data)
            return
        node.sm = ControllerSM(self, node)
        if data is not None:
            node.sm.machine.load_snapshot(start.end_offset, start.epoch, decode_snapshot(data))

    def _snapshot_voters(self, data: bytes) -> VoterSet:
        found = EMPTY_VOTER_SET
        for record in decode_snapshot(data):
            decoded = decode_record(record)
            if decoded.WhichOneof("record") == "voters":
                found = voters_from_record(decoded.voters)
        return found

    def _may_vote(self, node: SimNode) -> bool:
        return node.is_voter  # a controller (brokers only observe)

    def _change_voters(self, leader: SimNode, kind: str, voter: Voter) -> bool:
        """Through the active controller, as the admin API does: its machine replays
        the VotersRecord the Raft node appends."""
        machine = self._controller(leader)
        if machine is None or leader.raft is None:
            return False
        result, _ = machine.change_voters(SimAccess(self, leader), kind, voter, False)
        if result.ok:
            self.voter_changes += 1
        self._after_event(leader)
        self._answers(leader)
        return result.ok

    def _load_snapshot(self, node: SimNode, snapshot_id: SnapshotId, data: bytes) -> None:
        machine = self._controller(node)
        if machine is None:
            assert isinstance(node.sm, BrokerSM)
            node.sm.load(snapshot_id.end_offset, data)
            return
        machine.load_snapshot(snapshot_id.end_offset, snapshot_id.epoch, decode_snapshot(data))
        self._answers(node)

    def _on_ready(self, node: SimNode, ready: Any) -> None:
        machine = self._controller(node)
        if machine is not None and ready.leader is not None:
            machine.leader_changed(ready.leader.leader_id, ready.leader.epoch, self.now_ms)
            self._answers(node)
        if machine is not None and ready.reads:
            # After the Ready's commits, as the driver does (`on_reads_confirmed`).
            machine.reads_confirmed((r.read_id, r.index) for r in ready.reads)
            self._answers(node)

    def _check_read(self, node: SimNode, read: ReadState) -> None:
        """The controller's reads are checked where they are answered (`_check_read_answer`)."""

    def _ev_read(self) -> None:
        """The Raft simulation's bare reads: here clients read through the controllers."""

    def _check_apply(self, node: SimNode, batch: RecordBatch) -> None:
        if self.history.check_committed(node.id, batch):
            self._check_on_majority(batch)
            self._oracle_apply(batch)
        machine = self._controller(node)
        if machine is None:
            node.sm.apply(batch)
            return
        if machine.committed([batch], self.now_ms):
            self._at(self.now_ms, "ctick", node.id, node.incarnation)
        self._answers(node)

    def _oracle_apply(self, batch: RecordBatch) -> None:
        rid = batch.origin.request_id
        condition = self.conditions.get(rid)
        if condition is not None and not batch.is_control and any(
                record_type(decode_record(r)) != "request_result" for r in batch.records):
            kind, expected, read = condition
            actual = read(self.oracle)
            if actual != expected:
                raise InvariantViolation(
                    f"conditional {kind} {rid} committed at {batch.base_offset} although the "
                    f"version it was conditional on was {actual}, not {expected}: a lost "
                    "update")
            self.outcomes["conditional_writes_applied"] += 1
        if rid in self.writes and not batch.is_control:
            if rid in self.applied_ids:
                raise InvariantViolation(f"request {rid} committed twice (again at "
                                         f"{batch.base_offset}): not exactly once")
            self.applied_ids.add(rid)
        floor = self.acked_before_send.get(rid)
        if floor is not None and batch.base_offset <= floor:
            raise InvariantViolation(
                f"request {batch.origin.request_id} commits at {batch.base_offset}, below a "
                f"write acknowledged before it was sent (at {floor}): not linearizable")
        if not batch.is_control:
            serving = {b.broker_id for b in self.oracle.cluster.brokers() if not b.fenced}
            self.oracle.replay_encoded(batch.records, batch.base_offset)
            self.fencings += sum(1 for b in self.oracle.cluster.brokers()
                                 if b.fenced and b.broker_id in serving)
        # Reads check their answers against the oracle at their offset.
        self.oracle.registry.create_snapshot(batch.last_offset)
        self.oracle_images[batch.next_offset] = self.oracle.to_image()

    def _compact(self, node: SimNode) -> None:
        """A compaction fault: a controller starts a snapshot job now (if none runs),
        at its committed offset; brokers take the Raft simulation's path."""
        sm = node.sm
        if not isinstance(sm, ControllerSM):
            super()._compact(node)
            return
        end = sm.machine.committed_offset
        if end > node.log.start_offset:
            sm.snapshots.start(end - 1, sm.machine.last_committed_epoch)

    def _snapshot_step(self, node: SimNode, sm: ControllerSM) -> None:
        """One step of a running snapshot job (on the controller's tick, as the real
        scheduler runs one step per node-task turn)."""
        done = sm.snapshots.step(sm.machine.state)
        if done is None:
            return
        sm.machine.release_history()  # the job no longer reads the timeline
        snapshot_id, data = done
        # Footer, fsync, rename: a disk delay during which a crash loses the file.
        delay = self.rng.randint(1, 4 * self.disk_max_ms)
        self._at(self.now_ms + delay, "snapshot_written", node.id, node.incarnation,
                 snapshot_id, data)
        if self.now_ms < self.duration_ms - self.settle_ms and self.rng.random() < 0.1:
            # The fault this exists for: the power goes while the file is being made.
            self._at(self.now_ms + self.rng.randint(0, delay - 1), "crash_node", node.id,
                     node.incarnation)

    def _ev_crash_node(self, node_id: int, incarnation: int) -> None:
        node = self.nodes[node_id]
        if node.raft is None or node.incarnation != incarnation:
            return
        self._crash(node)
        self._at(self.now_ms + self.rng.randint(20, 500), "restart", node.id)

    def _ev_snapshot_written(self, node_id: int, incarnation: int, snapshot_id: SnapshotId,
                             data: bytes) -> None:
        node = self.nodes[node_id]
        if node.raft is None or node.incarnation != incarnation:
            self.snapshots_lost += 1  # crashed mid-write: the temp file is garbage
            return
        sm = node.sm
        assert isinstance(sm, ControllerSM)
        sm.snapshots.finishing = False
        node.store.put(snapshot_id, data)
        self.snapshots_written += 1
        raft = node.raft
        end = snapshot_id.end_offset
        # As the real driver: a follower whose flush lags the commit skips this one.
        if node.log.start_offset < end <= min(raft.high_watermark, raft.flushed_offset):
            raft.compact(snapshot_id, self.now_ms)
            self._after_event(node)

    # ------------------------------------------------------------ events

    def _ev_ctick(self, node_id: int, incarnation: int) -> None:
        node = self.nodes[node_id]
        machine = self._controller(node)
        if node.raft is None or node.incarnation != incarnation or node.paused \
                or machine is None:
            return
        machine.tick(SimAccess(self, node), self.now_ms)
        sm = node.sm
        assert isinstance(sm, ControllerSM)
        if sm.snapshots.job is not None:
            self._snapshot_step(node, sm)
        self._answers(node)
        self._check_fencing(node, machine)
        self._after_event(node)

    def _check_fencing(self, node: SimNode, machine: ControllerMachine) -> None:
        """Right after the active controller's tick, no unfenced broker has been
        silent past its session timeout: it was fenced at this tick at the latest."""
        if machine.mode is not Mode.ACTIVE:
            return
        if node.raft is not None and node.raft.transfer_target is not None:
            return  # handing leadership over: it writes nothing, its successor fences
        cluster = machine.state.cluster
        for broker in cluster.brokers():
            if broker.fenced:
                continue
            state = cluster.heartbeat_state(broker.broker_id)
            if state is None or state.broker_epoch != broker.broker_epoch:
                raise InvariantViolation(f"active node {node.id} has no session for broker "
                                         f"{broker.broker_id} after a tick")
            if self.now_ms - state.last_contact_ms > SESSION_TIMEOUT_MS:
                raise InvariantViolation(
                    f"broker {broker.broker_id} silent for {self.now_ms - state.last_contact_ms}"
                    f" ms on active node {node.id} and not fenced (session {SESSION_TIMEOUT_MS}"
                    " ms)")

    def _ev_tick(self, node_id: int, incarnation: int, token: int) -> None:
        super()._ev_tick(node_id, incarnation, token)
        node = self.nodes[node_id]
        if node.raft is not None and node.incarnation == incarnation and not node.paused \
                and node.tick_token != token and self._controller(node) is not None:
            # The controller's timers run with the node's (fencing, orphans, parked).
            self._ev_ctick(node_id, incarnation)

    def _ev_msg(self, message: Message) -> None:
        node = self.nodes[message.dst]
        if isinstance(message, FetchResponse) and message.error is Errors.NONE \
                and node.raft is not None and isinstance(node.sm, BrokerSM):
            # What the driver does for its loader: note the high watermark first.
            self.fetched_hw[node.id] = max(self.fetched_hw[node.id], message.high_watermark)
            super()._ev_msg(message)
            if isinstance(node.sm, BrokerSM):
                node.sm.check_caught_up()
                self._check_node(node)
            return
        super()._ev_msg(message)

    def _ev_propose(self) -> None:
        """A client request: a random admin write or read, to a controller."""
        self._at(self.now_ms + self.rng.randint(5, 40), "propose")
        node = self._pick_controller()
        if node is None:
            return
        kind, args = self._random_request()
        if not ADMIN_RPCS_BY_NAME[RPCS[kind]].write:
            self._send_read(node, kind, args)
        else:
            rid = f"w{self.next_request + 1}"
            args = self._conditional(rid, kind, args)
            self.writes[rid] = (kind, args, 3)
            self._send_write(node, rid)

    def _conditional(self, rid: str, kind: str, args: Args) -> Args:
        """Half the writes that can be: conditional on the version a client read of
        the committed state (the oracle's: a linearizable read), now and then an old
        one (which must fail unless nothing changed since)."""
        if kind not in ("config", "partitions", "delete", "reassign") or \
                self.cas_rng.random() < 0.5:
            return args
        item = (args.items or ())[0]
        read: Callable[[MetadataState], int]
        if kind == "config":
            resource = item.resource
            read = lambda s: s.configs.mod_offset(resource)  # noqa: E731
        elif kind == "reassign":
            topic, partition = item.topic, item.partition

            def read(s: MetadataState) -> int:
                tid = s.replication.topic_id(topic)
                part = None if tid is None else s.replication.partition(tid, partition)
                return -2 if part is None else part.partition_epoch
        else:
            name = item if kind == "delete" else item.name

            def read(s: MetadataState) -> int:
                tid = s.replication.topic_id(name)
                topic = None if tid is None else s.replication.topic(tid)
                return -2 if topic is None else topic.mod_offset
        expected = read(self.oracle)
        if expected < -1 or (expected < 0 and kind != "config"):
            return args  # nothing to be conditional on
        if self.cas_rng.random() < 0.25:
            expected = max(-1 if kind == "config" else 0, expected - self.cas_rng.randint(1, 5))
        self.conditions[rid] = (kind, expected, read)
        if kind == "config":
            return Args((attrs.evolve(item, if_mod_offset=expected),))
        if kind == "reassign":
            return Args((attrs.evolve(item, if_partition_epoch=expected),))
        if kind == "delete":
            return Args(args.items, extra={name: expected})
        return Args((attrs.evolve(item, if_mod_offset=expected),))

    def _send_write(self, node: SimNode, rid: str) -> None:
        """An admin write as the API sends it: with its request id and answer codec."""
        machine = self._controller(node)
        assert machine is not None
        kind, args, _ = self.writes[rid]
        rpc = ADMIN_RPCS_BY_NAME[RPCS[kind]]
        self._send_request(node, kind, rpc, args, origin_id=rid, codec=rpc.codec(args))
        # The client's per-attempt deadline: no answer by then, it tries elsewhere
        # (the first attempt may still be applied: the retry must not apply it again).
        self._at(self.now_ms + self.rng.randint(100, 700), "attempt_timeout",
                 self.next_request, rid)

    def _ev_attempt_timeout(self, machine_rid: int, rid: str) -> None:
        if machine_rid in self.pending:
            # The client stops listening to this attempt and tries again.
            self.abandoned.add(machine_rid)
            self.outcomes["attempts_timed_out"] += 1
            self._maybe_retry(rid)

    def _ev_retry(self, rid: str) -> None:
        """A client retries a write whose outcome it did not learn, same request id."""
        node = self._pick_controller()
        if node is not None:
            self._send_write(node, rid)

    def _ev_broker(self, broker_id: int) -> None:
        """One step of a broker's lifecycle: register or heartbeat the active
        controller it finds (a fake network: a call to a down node is lost)."""
        if not self.data.process_running(broker_id):
            # Crashed or paused: it sends nothing (its data plane restarts it).
            self._at(self.now_ms + HEARTBEAT_MS, "broker", broker_id)
            return
        life = self.brokers[broker_id]
        action = life.next_action(self.now_ms / 1000)
        if action is Action.STOP:
            return
        node = self._pick_controller(leader_only=True)
        if node is None:
            life.unreachable()
        else:
            machine = self._controller(node)
            assert machine is not None
            if action is Action.REGISTER:
                kind, op = f"register:{broker_id}:{self.incarnations[broker_id]}", REGISTER_BROKER
                extra: Any = BrokerRegistrationRequest(
                    broker_id=broker_id, cluster_id=CLUSTER_ID,
                    incarnation_id=f"inc-{broker_id}-{self.incarnations[broker_id]}",
                    listeners=(Listener("PLAINTEXT", "b", 9092, "PLAINTEXT"),))
            else:
                kind, op = f"heartbeat:{broker_id}:{self.incarnations[broker_id]}", BROKER_HEARTBEAT
                extra = BrokerHeartbeatRequest(broker_id, life.broker_epoch, 1 << 40)
            self._send_request(node, kind, op, Args((broker_id,), extra=extra))
        self._at(self.now_ms + max(1, int(life.wait_s * 1000)), "broker", broker_id)

    # ------------------------------------------------------------ clients

    def _pick_controller(self, leader_only: bool = False,
                         rng: random.Random | None = None) -> SimNode | None:
        """A controller a client finds (`rng`: whose draws; the data plane's own, so
        the seeds' faults stay what they were without it)."""
        rng = self.rng if rng is None else rng
        up = [n for n in self.nodes.values()
              if n.raft is not None and not n.paused and self._controller(n) is not None]
        leaders = [n for n in up if n.raft is not None and n.raft.role is Role.LEADER]
        if leader_only:
            return rng.choice(leaders) if leaders else None
        pool = leaders if leaders and rng.random() < 0.85 else up
        return rng.choice(pool) if pool else None

    def _random_request(self) -> tuple[str, Args]:
        """A random admin request: its kind (`RPCS`) and arguments."""
        topic = self.rng.choice(TOPICS)
        kind = self.rng.choice(("create", "create", "delete", "partitions", "config",
                                "reassign", "elect", "describe", "list", "configs"))
        if kind == "create":
            return kind, Args((CreatableTopic(topic, self.rng.randint(1, 3),
                                              self.rng.randint(1, 3)),))
        if kind == "delete":
            return kind, Args((topic,))
        if kind == "partitions":
            return kind, Args((CreatePartitionsTopic(topic, self.rng.randint(2, 5)),))
        if kind == "config":
            value = str(self.rng.randint(1, 10) * 1000)
            key = "retention.ms"
            if self.data.rng.random() < 0.5:  # its own draw: the seeds' requests stay
                key, value = "min.insync.replicas", str(self.data.rng.randint(1, 2))
            return kind, Args((AlterConfigsResource(ConfigResource(ResourceType.TOPIC, topic), (
                AlterConfigOp(key, OpType.SET, value),)),))
        if kind == "reassign":
            target = tuple(self.rng.sample(BROKERS, self.rng.randint(1, len(BROKERS))))
            return kind, Args((ReassignmentRequest(
                topic, 0, None if self.rng.random() < 0.2 else target),))
        if kind == "elect":
            return kind, Args((TopicPartition(topic, 0),), extra=ElectionType.PREFERRED)
        if kind == "describe":
            return kind, Args((topic,))
        if kind == "configs":
            return kind, Args((ConfigResource(ResourceType.TOPIC, topic),))
        return kind, Args()

    def _send_read(self, node: SimNode, kind: str, args: Args) -> None:
        """A read: linearizable (the default) or, one in five, stale; half the stale
        ones continue a session (`min_offset`: the newest state the client saw, which
        the answer must not be older than)."""
        stale = self.rng.random() < 0.2
        floor = 0 if stale else max(self.max_acked_offset + 1, self.max_read_offset)
        min_offset = 0
        if stale and self.data.rng.random() < 0.5:  # its own draw: the seeds' faults stay
            min_offset = floor = max(self.max_acked_offset + 1, self.max_read_offset)
        rpc = ADMIN_RPCS_BY_NAME[RPCS[kind]]
        self.reads[self.next_request + 1] = (rpc, args, floor, not stale)
        consistency = ReadConsistency.STALE if stale else ReadConsistency.LINEARIZABLE
        self._send_request(node, f"{kind}:stale" if stale else kind, rpc, args, consistency,
                           min_offset=min_offset)

    def _check_read_answer(self, node: SimNode, answer: Answer) -> None:
        """A read's answer is the oracle's at the offset it names, a committed one; a
        linearizable read's offset covers every write acknowledged and every
        linearizable read answered before it was sent (the log order is the
        linearization order, so this is the whole check)."""
        rpc, args, floor, linearizable = self.reads.pop(answer.request_id)
        offset = answer.read_offset
        if offset is None or offset > self.history.committed_end:
            raise InvariantViolation(f"node {node.id} answered read {answer.request_id} at "
                                     f"{offset}, not a committed offset")
        if offset < floor:
            raise InvariantViolation(
                f"node {node.id} answered read {answer.request_id} at offset {offset}, below "
                f"{floor} (acknowledged or read before it was sent): a stale read, not "
                + ("linearizable" if linearizable else "session-consistent (its min_offset)"))
        assert rpc.op is not None and rpc.op.query is not None
        if answer.value != rpc.op.query(StateContext(self.oracle), args, offset - 1):
            raise InvariantViolation(f"node {node.id} answered read {answer.request_id} at "
                                     f"{offset} unlike the committed log there")
        if linearizable:
            self.max_read_offset = max(self.max_read_offset, offset)
            self.outcomes["linearizable_reads"] += 1
        else:
            self.outcomes["stale_reads"] += 1
            self.outcomes["session_reads"] += floor > 0

    def _send_request(self, node: SimNode, kind: str, op: AdminRpc | Operation, args: Args,
                      consistency: ReadConsistency = ReadConsistency.LINEARIZABLE,
                      origin_id: str | None = None, codec: ResultCodec | None = None,
                      min_offset: int = 0) -> None:
        machine = self._controller(node)
        assert machine is not None and node.raft is not None
        self.next_request += 1
        rid = self.next_request
        origin_id = str(rid) if origin_id is None else origin_id
        self.pending[rid] = (kind, node.id, origin_id)
        # A retry's invocation is the first send: its floor stays the first one's.
        self.acked_before_send.setdefault(origin_id, self.max_acked_offset)
        operation = op.op if isinstance(op, AdminRpc) else op
        assert operation is not None
        # The client address names the attempt (the dedupe key is principal + id), so
        # an answer is checked against the batch of its own attempt.
        machine.request(Request(rid, operation, args, StateContext(machine.state), self.now_ms,
                                origin=BatchOrigin("User:sim", f"attempt-{rid}", origin_id),
                                consistency=consistency, codec=codec,
                                min_offset=min_offset),
                        SimAccess(self, node), self.now_ms)
        self._answers(node)
        self._after_event(node)

    def _answers(self, node: SimNode) -> None:
        """Deliver the controller's answers, checking each write's batches committed."""
        machine = self._controller(node)
        if machine is None:
            return
        sm = node.sm
        assert isinstance(sm, ControllerSM)
        if sm.last_mode is not Mode.STANDBY and machine.mode is Mode.STANDBY:
            self.reverts += 1  # it led, and renounced (its state reverted)
        sm.last_mode = machine.mode
        for out in machine.take_instructions():
            kind, _, origin_id = self.pending.pop(out.request_id, ("?", 0, ""))
            if isinstance(out, Answer) and out.request_id in self.reads:
                self._check_read_answer(node, out)
            elif isinstance(out, Answer):
                self._check_answer_committed(node, out.request_id, origin_id, kind)
                if out.request_id not in self.abandoned:
                    self._check_same_answer(origin_id, out.value)
                self.outcomes["ok"] += 1
                if isinstance(out.value, tuple) and out.value \
                        and hasattr(out.value[0], "error"):
                    self.outcomes[f"{kind}:{out.value[0].error.code.value}"] += 1
                self._broker_answer(kind, out.value, out.request_id)
            else:
                assert isinstance(out, Fail)
                self.reads.pop(out.request_id, None)
                self.outcomes[type(out.error).__name__] += 1
                self._maybe_retry(origin_id)
                broker = self._broker_of(kind)
                token = self.alter_tokens.pop(out.request_id, None)
                if broker is not None and kind.startswith(("register:", "heartbeat:")):
                    self.brokers[broker].unreachable()
                elif broker is not None and token is not None:
                    self.data.alter_partition_answered(broker, token, None)

    def _check_answer_committed(self, node: SimNode, attempt: int, origin_id: str,
                                kind: str) -> None:
        address = f"attempt-{attempt}"
        for batch in node.log.batches:
            if batch.origin.request_id != origin_id or batch.origin.client_address != address:
                continue
            if not self.history.is_committed(batch):
                raise InvariantViolation(
                    f"node {node.id} answered {kind} request {origin_id} while its batch "
                    f"{batch.base_offset} is not committed")
            self.max_acked_offset = max(self.max_acked_offset, batch.last_offset)

    def _check_same_answer(self, origin_id: str, value: Any) -> None:
        """Every answer to a write that was applied (first or retried) is the same."""
        if origin_id not in self.applied_ids:
            return  # applied nothing (e.g. an item error): a retry runs afresh
        first = self.first_answers.setdefault(origin_id, value)
        if first is not value:
            self.outcomes["retries_answered_from_table"] += 1
            if first != value:
                raise InvariantViolation(f"write {origin_id} answered {value!r}, earlier "
                                         f"{first!r}: a retry must get the first answer")

    def _maybe_retry(self, origin_id: str) -> None:
        """A write failed "not controller" or "unknown": the client may try again."""
        entry = self.writes.get(origin_id)
        if entry is None or entry[2] == 0 or self.rng.random() < 0.3:
            return
        kind, args, left = entry
        self.writes[origin_id] = (kind, args, left - 1)
        self.outcomes["retries_sent"] += 1
        self._at(self.now_ms + self.rng.randint(10, 200), "retry", origin_id)

    def _broker_of(self, kind: str) -> int | None:
        """The broker a request of `kind` came from ("action:broker:incarnation"), if
        that process still runs (a restarted one never hears its predecessor's
        answers)."""
        parts = kind.split(":")
        if len(parts) != 3 or parts[0] not in ("register", "heartbeat", "alter"):
            return None
        broker, incarnation = int(parts[1]), int(parts[2])
        return broker if self.incarnations[broker] == incarnation else None

    def _broker_answer(self, kind: str, value: Any, machine_rid: int) -> None:
        token = self.alter_tokens.pop(machine_rid, None)
        broker = self._broker_of(kind)
        if broker is None:
            return
        action = kind.partition(":")[0]
        if action == "alter":
            assert token is not None
            self.data.alter_partition_answered(broker, token, value)
            return
        life = self.brokers[broker]
        if action == "register":
            life.registered(value.error.code.value, value.broker_epoch)
        else:
            life.heartbeat_answered(value.error.code.value, is_fenced=value.is_fenced,
                                    should_shut_down=value.should_shut_down, caught_up=True,
                                    applied_offset=0)

    # ------------------------------------------------------------ checks

    def _check_node(self, node: SimNode) -> None:
        super()._check_node(node)
        machine = self._controller(node)
        sm = node.sm
        if isinstance(sm, BrokerSM) and node.raft is not None:
            if sm.checked == sm.version:
                return
            sm.checked = sm.version
            want = self.oracle_images.get(sm.applied_offset)
            problem = "no committed end there" if want is None else sm.check(want)
            if problem is not None:
                raise InvariantViolation(f"broker {sm.broker_id} (node {node.id}) at offset "
                                         f"{sm.applied_offset}: {problem}")
            return
        if machine is None or node.raft is None or not isinstance(sm, ControllerSM):
            return
        key = (machine.committed_offset, machine.mode)
        if sm.checked == key:
            return
        sm.checked = key
        offset = machine.committed_offset
        want = self.oracle_images.get(offset)
        if want is None:
            raise InvariantViolation(f"node {node.id} applied to {offset}, not a committed end")
        epoch = None if machine.mode is Mode.STANDBY else offset - 1
        got = machine.state.to_image(epoch)
        if got != want:
            raise InvariantViolation(
                f"node {node.id} ({machine.mode.value}) state at {offset} differs from a "
                f"replay of the committed log")

    def check_final(self) -> None:
        super().check_final()
        for node in self.nodes.values():
            self._check_node(node)
        self.data.check_all()
        self.watcher.check()


def run_system_seed(seed: int, data_bugs: frozenset[str] = frozenset(),
                    data_plane: bool = True) -> SystemCluster:
    cluster = SystemCluster(seed, data_bugs=data_bugs, data_plane=data_plane)
    try:
        cluster.run()
    except Exception as exc:  # every failure names the seed that replays it
        raise InvariantViolation(
            f"system seed {seed} failed at t={cluster.now_ms}ms step {cluster.steps}: "
            f"{exc!r}\nreplay: SYSTEM_SIM_SEED={seed} .venv/bin/python -m pytest "
            "tests/simulation/test_system.py -q") from exc
    finally:
        cluster.data.close()
    return cluster


__all__ = ["SystemCluster", "decode_record", "run_system_seed"]
