"""A deterministic simulation of a metakraft Raft quorum: the real `RaftNode` core
on a simulated clock, network and disk, all driven by one seed.

The driver honours the `Ready` contract (quorum state durable before messages;
flushes reported in order after the disk made them durable) and injects faults:
partitions (full, partial, one-way), drops, duplicates, reordering and delays,
crashes that lose unsynced writes and unsynced quorum state (and may keep a torn
prefix of unsynced writes), restarts, a paused leader that resumes as a zombie,
graceful resignation, log compaction behind snapshots, and an observer that joins
late and has to load a snapshot, and disk damage: a crashed node whose log lost
records it had flushed (below its recovery point) restarts repairing (the Raft
core's repair.py) and counts neither as a voter nor as a holder until repaired;
what was committed must never change. Most seeds run a dynamic quorum (voters.py) and
change it under all of that: add an observer as a voter, remove a voter (the leader
too), and replace a voter whose disk is wiped (remove the old directory id, add the
new one). `invariants.History` checks safety after every step.
"""

from __future__ import annotations

import heapq
import random
from typing import Any

import attrs

from controller.logformat import EMPTY_ORIGIN
from controller.raft import MemorySnapshotStore, RaftNode, RecordBatch, Role, SnapshotId
from controller.raft.control import encode_voters
from controller.raft.log import MemoryRaftLog
from controller.raft.messages import Message, VoteRequest, VoteResponse
from controller.raft.reads import ReadState
from controller.raft.voters import EMPTY_VOTER_SET, Voter, VoterSet
from tests.simulation.invariants import History, InvariantViolation, same_batch
from tests.simulation.nodes import SimLog, SimNode, StateMachine, voters_of

TICK_MS = 10
DYNAMIC_EXTRA_SETTLE_MS = 800


class Cluster:
    def __init__(self, seed: int, duration_ms: int = 3000, settle_ms: int = 1200) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.now_ms = 0
        self.duration_ms = duration_ms
        self.settle_ms = settle_ms
        self.history = History()
        self._queue: list[tuple[int, int, str, tuple[Any, ...]]] = []
        self._seq = 0
        # Batches each log keeps below its snapshot when compacted (a leader serves
        # fetches from them). Drawn apart from `rng`, so that each seed's faults stay
        # what they were before retention was modelled.
        self.retain_batches = random.Random(seed * 7919 + 1).choice((0, 0, 2, 16))
        # Disk damage draws from its own generator too, for the same reason.
        self.damage_rng = random.Random(seed * 104_729 + 3)
        self.damages = 0
        self.repairs = 0
        n_voters = self.rng.choice((3, 3, 5))
        n_observers = self.rng.choice((1, 2))
        voters = frozenset(range(1, n_voters + 1))
        self.dynamic = self.rng.random() < 0.7
        self.nodes = {
            i: SimNode(self, i, voters, self.dynamic)
            for i in range(1, n_voters + n_observers + 1)
        }
        if self.dynamic:
            # `metakraft storage format --initial-controllers`: the voters' logs start
            # with the same VotersRecord; observers start empty.
            bootstrap = encode_voters(VoterSet.of(self.nodes[v].voter for v in voters))
            for v in voters:
                self.nodes[v].log.append(RecordBatch(
                    base_offset=0, epoch=0, append_time_ms=0, is_control=True,
                    origin=EMPTY_ORIGIN, records=(bootstrap,)))
                self.nodes[v].log.sync()
        # The configured voters (controllers, in the system simulation).
        self.voters = voters
        self.history.committed_voters = VoterSet.static(voters)
        # A replacement in progress: (node id, the wiped disk's directory id).
        self.replacing: tuple[int, str] | None = None
        self.voter_changes = 0
        self.wipes = 0
        self.leader_self_removals = 0
        # Leadership transfers accepted: the epoch they started in -> the target.
        self.transfers: dict[int, int] = {}
        self.blocked: set[tuple[int, int]] = set()
        self.drop_p = self.rng.choice((0.0, 0.01, 0.05, 0.15))
        self.dup_p = self.rng.choice((0.0, 0.02, 0.1))
        self.max_delay_ms = self.rng.choice((2, 10, 30))
        self.defer_drain_p = self.rng.choice((0.0, 0.1, 0.3))
        self.disk_max_ms = self.rng.choice((1, 5, 20))
        # Half the seeds tick on a fixed period, half only at next_deadline_ms().
        self.deadline_ticks = self.rng.random() < 0.5
        self.proposals = 0
        self.truncations = 0
        self.zombie_resumes = 0
        self.committed_cuts = 0
        self.steps = 0
        # Linearizable reads (RaftNode.read_index): read id -> the highest commit point
        # any node knew when it was asked; its confirmed index must not be below it.
        self.next_read = 0
        self.reads_pending: dict[int, int] = {}
        self.reads_confirmed = 0
        late_observer = max(self.nodes)
        for node in self.nodes.values():
            if node.id == late_observer and n_observers > 0:
                self._at(self.rng.randint(duration_ms // 3, duration_ms // 2), "start", node.id)
            else:
                self._start(node)
        self._at(self.rng.randint(5, 30), "propose")
        self._at(self.rng.randint(5, 30), "read")
        if self.dynamic:
            # Membership changes leave even-sized voter sets (2 of 4 is no majority),
            # where split votes take more rounds to resolve: the same faults, a longer
            # quiet time to converge in after them.
            self.duration_ms += DYNAMIC_EXTRA_SETTLE_MS
            self.settle_ms += DYNAMIC_EXTRA_SETTLE_MS
        self._schedule_faults()

    # ------------------------------------------------------------ scheduling

    def _at(self, time_ms: int, kind: str, *args: Any) -> None:
        self._seq += 1
        heapq.heappush(self._queue, (time_ms, self._seq, kind, args))

    def _schedule_faults(self) -> None:
        end_faults = self.duration_ms - self.settle_ms
        t = 100
        while True:
            t += self.rng.randint(50, 400)
            if t >= end_faults:
                break
            kinds = ["crash", "crash", "partition", "partition", "pause", "compact", "compact",
                     "resign", "transfer"]
            if self.dynamic:
                kinds += ["add", "add", "remove", "replace"]
            self._at(t, "fault", self.rng.choice(kinds))
        for _ in range(self.damage_rng.choice((0, 1, 1, 2))):
            self._at(self.damage_rng.randint(200, max(201, end_faults - 100)), "damage")
        # Compactions before the late observer shows up make it take the snapshot path.
        for _ in range(2):
            self._at(self.rng.randint(300, self.duration_ms // 3), "fault", "compact")
        self._at(end_faults, "heal")

    # ------------------------------------------------------------------ run

    def run(self) -> None:
        while self._queue:
            time_ms, _, kind, args = heapq.heappop(self._queue)
            if time_ms > self.duration_ms:
                break
            self.now_ms = time_ms
            self.steps += 1
            getattr(self, "_ev_" + kind)(*args)
        self.check_final()

    # --------------------------------------------------------------- events

    def _ev_start(self, node_id: int) -> None:
        self._start(self.nodes[node_id])

    def _start(self, node: SimNode) -> None:
        assert node.raft is None
        node.incarnation += 1
        node_rng = random.Random(self.seed * 1000 + node.id * 31 + node.incarnation)
        # The state machine restarts from the snapshot the log starts at.
        start = node.log.snapshot_id
        self._restart_state_machine(node, start, node.store.read_all(start)
                                    if start.end_offset > 0 else None)
        node.raft = RaftNode(
            node.config,
            node.log,
            node.store,
            node_rng,
            quorum_state=node.durable_qs,
            now_ms=self.now_ms,
            voters=self._base_voters(node),
            repair_to_offset=node.repair_to_offset,
        )
        if node.raft.epoch < node.max_epoch_sent:
            raise InvariantViolation(
                f"node {node.id} restarted in epoch {node.raft.epoch} after sending epoch {node.max_epoch_sent}"
            )
        node.epoch_seen = node.raft.epoch
        node.hw_seen = node.raft.high_watermark
        node.paused = False
        node.held = []
        self._drain(node)
        self._schedule_tick(node, self.now_ms + self.rng.randint(1, TICK_MS))

    def _schedule_tick(self, node: SimNode, time_ms: int) -> None:
        node.tick_token += 1
        node.next_tick_ms = time_ms
        self._at(time_ms, "tick", node.id, node.incarnation, node.tick_token)

    def _ev_tick(self, node_id: int, incarnation: int, token: int) -> None:
        node = self.nodes[node_id]
        if node.raft is None or node.incarnation != incarnation or node.tick_token != token:
            return  # the node died, or a sooner tick replaced this one
        if node.paused:
            self._schedule_tick(node, self.now_ms + TICK_MS)
            return
        node.raft.tick(self.now_ms)
        if not self.deadline_ticks:
            self._schedule_tick(node, self.now_ms + TICK_MS + self.rng.randint(0, 3))
        self._after_event(node)
        if self.deadline_ticks and node.raft is not None and node.tick_token == token:
            self._schedule_tick(node, max(self.now_ms + 1, node.raft.next_deadline_ms()))

    def _retick(self, node: SimNode) -> None:
        """Deadline mode: tick exactly when the core says a timer is due, the way a
        driver sleeping on `next_deadline_ms()` would (tests that API)."""
        if not self.deadline_ticks or node.raft is None or node.paused:
            return
        due = max(self.now_ms + 1, node.raft.next_deadline_ms())
        if due < node.next_tick_ms or node.next_tick_ms <= self.now_ms:
            self._schedule_tick(node, due)

    def _ev_msg(self, message: Message) -> None:
        node = self.nodes[message.dst]
        if node.raft is None:
            return
        if node.paused:
            node.held.append(("msg", (message,)))
            return
        node.raft.receive(message, self.now_ms)
        self._after_event(node)

    def _ev_flush(self, node_id: int, incarnation: int, through_op: int, offset: int) -> None:
        node = self.nodes[node_id]
        if node.raft is None or node.incarnation != incarnation:
            return
        if node.paused:
            node.held.append(("flush", (node_id, incarnation, through_op, offset)))
            return
        node.log.sync(through_op)
        if self.committed_cuts:
            self.check_durable_majority()
        node.raft.flushed(offset, self.now_ms)
        self._after_event(node)

    def _ev_drain(self, node_id: int, incarnation: int) -> None:
        node = self.nodes[node_id]
        node.drain_scheduled = False
        if node.raft is None or node.incarnation != incarnation:
            return
        self._drain(node)

    def _ev_propose(self) -> None:
        self._at(self.now_ms + self.rng.randint(5, 40), "propose")
        up = [n for n in self.nodes.values() if n.raft is not None]
        leaders = [n for n in up if n.raft is not None and n.raft.role is Role.LEADER]
        pool = leaders if leaders and self.rng.random() < 0.9 else up
        if not pool:
            return
        node = self.rng.choice(pool)
        self.proposals += 1
        records = tuple(
            f"p{self.proposals}.{i}".encode() for i in range(self.rng.choice((1, 1, 2, 5)))
        )
        if node.paused:
            node.held.append(("propose", (records,)))
            return
        self._propose(node, records)

    def _ev_read(self) -> None:
        """A linearizable read at a node (the leader, mostly)."""
        self._at(self.now_ms + self.rng.randint(5, 60), "read")
        up = [n for n in self.nodes.values() if n.raft is not None and not n.paused]
        leaders = [n for n in up if n.raft is not None and n.raft.role is Role.LEADER]
        pool = leaders if leaders and self.rng.random() < 0.9 else up
        if not pool:
            return
        node = self.rng.choice(pool)
        assert node.raft is not None
        self.next_read += 1
        if node.raft.read_index(self.next_read, self.now_ms) is None:
            self.reads_pending[self.next_read] = max(
                n.raft.high_watermark for n in self.nodes.values() if n.raft is not None)
        self._after_event(node)

    def _check_read(self, node: SimNode, read: ReadState) -> None:
        """A confirmed read sees everything committed before it was asked."""
        floor = self.reads_pending.pop(read.read_id)
        self.reads_confirmed += 1
        if read.index < floor:
            raise InvariantViolation(
                f"node {node.id} confirmed read {read.read_id} at index {read.index}, below "
                f"{floor}, committed before the read was asked: a stale read")

    def _propose(self, node: SimNode, records: tuple[bytes, ...]) -> None:
        assert node.raft is not None
        node.raft.propose(records, self.now_ms)
        self._after_event(node)

    def _ev_resume(self, node_id: int, incarnation: int) -> None:
        node = self.nodes[node_id]
        if node.raft is None or node.incarnation != incarnation:
            return
        node.paused = False
        if node.raft.role is Role.LEADER and max(self.history.leaders) > node.raft.epoch:
            self.zombie_resumes += 1  # a newer epoch has a leader: this one is a zombie
        self._schedule_tick(node, self.now_ms + 1)
        held, node.held = node.held, []
        # A resumed process first works through what queued up while it slept,
        # before its timers run: the dangerous order for a zombie leader.
        for kind, args in held:
            if node.raft is None or node.incarnation != incarnation:
                return
            if kind == "msg":
                node.raft.receive(args[0], self.now_ms)
            elif kind == "flush":
                node.log.sync(args[2])
                if self.committed_cuts:
                    self.check_durable_majority()
                node.raft.flushed(args[3], self.now_ms)
            else:
                node.raft.propose(args[0], self.now_ms)
            self._after_event(node)

    def _ev_damage(self) -> None:
        """Crash a node and damage its disk: its log loses flushed records from a
        random batch on. One damaged node at a time, and none while a voter's disk
        is being replaced: the simulation does not stack faults past f."""
        rng = self.damage_rng
        up = [n for n in self.nodes.values() if n.raft is not None and not n.paused]
        if not up or self.replacing is not None or any(
                n.repair_to_offset is not None for n in self.nodes.values()):
            return
        sets = [self.history.committed_voters] + [n.raft.voters for n in up if n.raft]
        up = [n for n in up if all(self._live_identities(vs) - vs.is_voter(n.id, n.config.directory_id)
                                   >= vs.majority for vs in sets)]
        if not up:
            return
        victim = rng.choice(up)
        self._crash(victim)
        log = victim.log
        cuts = [b.base_offset for b in log.batches if b.base_offset >= log.start_offset]
        if cuts:
            flushed_end = log.end_offset
            cut = rng.choice(cuts)
            MemoryRaftLog.truncate_to(log, cut)  # the disk, not the core, loses them
            log.sync()
            victim.repair_to_offset = flushed_end
            self.damages += 1
            self.check_durable_majority()
        self._at(self.now_ms + rng.randint(20, 500), "restart", victim.id)

    def _ev_restart(self, node_id: int) -> None:
        node = self.nodes[node_id]
        if node.raft is None:
            self._start(node)

    def _ev_unblock(self, links: tuple[tuple[int, int], ...]) -> None:
        self.blocked.difference_update(links)

    def _ev_heal(self) -> None:
        self.blocked.clear()
        self.drop_p = 0.0
        for node in self.nodes.values():
            if node.raft is None and node.incarnation > 0:
                self._start(node)
            elif node.paused:
                self._ev_resume(node.id, node.incarnation)
        self.heal_commit_end = self.history.committed_end

    def _ev_fault(self, kind: str) -> None:
        up = [n for n in self.nodes.values() if n.raft is not None and not n.paused]
        if not up:
            return
        leaders = [n for n in up if n.raft is not None and n.raft.role is Role.LEADER]
        if kind == "crash":
            victim = self.rng.choice(leaders if leaders and self.rng.random() < 0.5 else up)
            self._crash(victim)
            self._at(self.now_ms + self.rng.randint(20, 500), "restart", victim.id)
        elif kind == "partition":
            self._partition()
        elif kind == "pause" and leaders:
            node = self.rng.choice(leaders)
            node.paused = True
            pause_ms = self.rng.randint(250, 900)
            self._at(self.now_ms + pause_ms, "resume", node.id, node.incarnation)
        elif kind == "compact":
            pool = leaders if leaders and self.rng.random() < 0.7 else up
            self._compact(self.rng.choice(pool))
        elif kind == "add" and leaders:
            leader = leaders[0]
            assert leader.raft is not None
            candidates = [n for n in up if not leader.raft.voters.get(n.id)
                          and self._may_vote(n)]
            if candidates:
                self._change_voters(leader, "add", self.rng.choice(candidates).voter)
        elif kind == "remove" and leaders:
            leader = leaders[0]
            assert leader.raft is not None
            voters = list(leader.raft.voters)
            victim = self.rng.choice(voters)
            # An operator does not remove a voter when the rest could not form a
            # majority (a wiped disk's identity is dead): nothing could commit again.
            remaining = leader.raft.voters.without(victim.node_id)
            if len(voters) > 1 and self._live_identities(remaining) >= remaining.majority:
                if victim.node_id == leader.id:
                    self.leader_self_removals += 1
                self._change_voters(leader, "remove", victim)
        elif kind == "replace" and self.replacing is None:
            self._wipe_a_voter()
        elif kind == "transfer" and leaders:
            leader = leaders[0]
            assert leader.raft is not None
            others = [v.node_id for v in leader.raft.voters if v.node_id != leader.id]
            if others:
                target = self.rng.choice(others)
                if leader.raft.transfer_leadership(target, self.now_ms) is None:
                    self.transfers[leader.raft.epoch] = target
                self._after_event(leader)
        elif kind == "resign" and leaders:
            node = leaders[0]
            assert node.raft is not None
            node.raft.resign(self.now_ms)
            self._drain(node)
            # A planned stop: everything is flushed, then the process exits.
            node.log.sync()
            self._crash(node)
            self._at(self.now_ms + self.rng.randint(50, 300), "restart", node.id)

    @property
    def transfers_completed(self) -> int:
        """Transfers whose target led the next epoch that had a leader."""
        leaders = self.history.leaders
        done = 0
        for epoch, target in self.transfers.items():
            later = [e for e in leaders if e > epoch]
            done += bool(later) and leaders[min(later)] == target
        return done

    def _change_voters(self, leader: SimNode, kind: str, voter: Voter) -> bool:
        raft = leader.raft
        assert raft is not None
        result = raft.change_voters(kind, voter, self.now_ms)
        if result.ok:
            self.voter_changes += 1
        self._after_event(leader)
        return result.ok

    def _wipe_a_voter(self) -> None:
        """A voter's disk dies: it comes back as a new replica (next directory id,
        empty log) and is replaced: its old identity removed, the new one added.
        Only while every committed batch is still on enough other voters (one lost
        disk is one failure; the simulation does not stack failures past f)."""
        # One lost disk at a time, and only while no voter change is in flight and the
        # other identities are a majority (the simulation does not stack faults past f).
        leaders = [n.raft for n in self.nodes.values()
                   if n.raft is not None and n.raft.role is Role.LEADER]
        if len(leaders) != 1 or leaders[0].voter_change_pending:
            return
        voters = leaders[0].voters
        if not voters.dynamic or self._live_identities(voters) - 1 < voters.majority:
            return
        # Every voter set that may still be in force, not the leader's alone: a set in
        # another log (a deposed leader's uncommitted removal) can win an election
        # too, and must keep a live majority without the wiped disk (seed 1039: a
        # removal pending in three logs, a repairing voter, then a wipe left that set
        # two live voters of four).
        sets = [self.history.committed_voters] + [
            n.raft.voters for n in self.nodes.values() if n.raft is not None]
        if any(self._live_identities(vs) - 1 < vs.majority for vs in sets if len(vs)):
            return
        candidates = [v for v in voters if self._is_live_identity(v)]
        if not candidates:
            return
        victim = self.nodes[self.rng.choice(candidates).node_id]
        old_directory = victim.config.directory_id
        if victim.raft is not None:
            self._crash(victim)
        victim.disk += 1
        victim.config = attrs.evolve(victim.config,
                                     directory_id=f"d{victim.id}.{victim.disk}")
        victim.log = SimLog(victim.id, self.check_truncation, self.retain_batches)
        victim.store = MemorySnapshotStore()
        victim.durable_qs = None
        victim.max_epoch_sent = victim.epoch_seen = victim.hw_seen = 0
        victim.sm = StateMachine()
        self.wipes += 1
        self.replacing = (victim.id, old_directory)
        self._at(self.now_ms + self.rng.randint(20, 300), "restart", victim.id)
        self._at(self.now_ms + self.rng.randint(50, 200), "replace_step")

    def _ev_replace_step(self) -> None:
        """The operator's replace procedure, retried until done: remove the wiped
        disk's identity, then add the new one once it caught up."""
        if self.replacing is None:
            return
        node_id, old_directory = self.replacing
        node = self.nodes[node_id]
        leaders = [n for n in self.nodes.values()
                   if n.raft is not None and not n.paused and n.raft.role is Role.LEADER]
        if leaders:
            leader = leaders[0]
            assert leader.raft is not None
            current = leader.raft.voters.get(node_id)
            if current is not None and current.directory_id == old_directory:
                self._change_voters(leader, "remove", current)
            elif current is None and node.raft is not None:
                self._change_voters(leader, "add", node.voter)
            elif current is not None and current.directory_id == node.config.directory_id \
                    and not leader.raft.voter_change_pending:
                self.replacing = None
                return
        self._at(self.now_ms + self.rng.randint(30, 120), "replace_step")

    def _is_live_identity(self, voter: Voter) -> bool:
        """The voter's disk still exists (it was not wiped since it became a voter)
        and holds what it acknowledged (it is not repairing damage)."""
        node = self.nodes[voter.node_id]
        if node.repair_to_offset is not None:
            return False
        return not voter.directory_id or node.config.directory_id == voter.directory_id

    def _live_identities(self, voters: VoterSet) -> int:
        return sum(self._is_live_identity(v) for v in voters)

    def _partition(self) -> None:
        ids = sorted(self.nodes)
        style = self.rng.choice(("isolate", "split", "oneway", "links"))
        links: set[tuple[int, int]] = set()
        leaders = [
            n.id for n in self.nodes.values() if n.raft is not None and n.raft.role is Role.LEADER
        ]
        if style == "isolate":
            # Cutting off the leader while clients still write to it is what makes
            # divergent tails (and truncation) happen.
            victim = self.rng.choice(leaders if leaders and self.rng.random() < 0.6 else ids)
            links = {(victim, o) for o in ids if o != victim} | {
                (o, victim) for o in ids if o != victim
            }
        elif style == "split":
            side = set(self.rng.sample(ids, self.rng.randint(1, len(ids) - 1)))
            links = {(a, b) for a in ids for b in ids if (a in side) != (b in side)}
        elif style == "oneway":
            a, b = self.rng.sample(ids, 2)
            links = {(a, b)}
            if self.rng.random() < 0.5:
                links |= {(a, o) for o in ids if o != a}
        else:
            pairs = [(a, b) for a in ids for b in ids if a != b]
            links = set(self.rng.sample(pairs, self.rng.randint(1, len(pairs) // 2)))
        self.blocked |= links
        self._at(self.now_ms + self.rng.randint(100, 700), "unblock", tuple(sorted(links)))

    def _crash(self, node: SimNode) -> None:
        """Power cut: unsynced writes (but a torn prefix) and the undrained Ready go."""
        node.raft = None
        node.paused = False
        node.held = []
        node.log.crash(self.rng.randint(0, node.log.pending_op_count))
        node.store.crash()
        self.check_durable_majority()

    def _compact(self, node: SimNode) -> None:
        raft = node.raft
        assert raft is not None
        limit = min(raft.high_watermark, raft.flushed_offset)
        candidates = [b for b in node.sm.batches if b.next_offset <= limit]
        if not candidates or candidates[-1].next_offset <= node.log.start_offset:
            return
        last = candidates[-1]
        snapshot_id = SnapshotId(last.next_offset, last.epoch)
        node.store.put(snapshot_id, node.sm.snapshot_bytes(snapshot_id.end_offset))
        raft.compact(snapshot_id, self.now_ms)
        self._after_event(node)

    # ------------------------------------------------------------ the driver

    def _after_event(self, node: SimNode) -> None:
        assert node.raft is not None
        if self.rng.random() < self.defer_drain_p:
            # Leave the Ready undrained for a while: a crash now loses it.
            if not node.drain_scheduled:
                node.drain_scheduled = True
                self._at(self.now_ms + self.rng.randint(1, 8), "drain", node.id, node.incarnation)
        else:
            self._drain(node)
        self._check_node(node)

    def _drain(self, node: SimNode) -> None:
        raft = node.raft
        assert raft is not None
        while True:
            ready = raft.ready()
            # 1. Quorum state is durable before any message leaves.
            if ready.quorum_state is not None:
                node.durable_qs = ready.quorum_state
            # 2. Flush: the disk syncs everything written so far, reports later, in order.
            if ready.flush_to_offset is not None:
                done = max(
                    node.last_flush_done_ms, self.now_ms + self.rng.randint(0, self.disk_max_ms)
                )
                node.last_flush_done_ms = done
                self._at(
                    done,
                    "flush",
                    node.id,
                    node.incarnation,
                    node.log.ops_issued,
                    ready.flush_to_offset,
                )
            # 3. Messages.
            for message in ready.messages:
                self._send(node, message)
            # 4. Committed batches.
            for batch in ready.committed:
                self._check_apply(node, batch)
            # 6. Confirmed reads (answered at their index by a state machine on top).
            for read in ready.reads:
                self._check_read(node, read)
            if ready.role is Role.LEADER:
                self.history.note_leader(node.id, raft.epoch)
            if ready.repaired:
                node.repair_to_offset = None
                self.repairs += 1
                self.check_durable_majority()
            self._on_ready(node, ready)
            # 5. Snapshot to load.
            if ready.snapshot_to_load is None:
                break
            snapshot_id = ready.snapshot_to_load
            data = node.store.finish_write(snapshot_id)
            self._load_snapshot(node, snapshot_id, data)
            node.snapshots_loaded += 1
            voters = self._snapshot_voters(data) if node.dynamic else None
            raft.snapshot_loaded(snapshot_id, self.now_ms, voters)
        self._check_node(node)
        self._retick(node)

    # -- what a state machine on top of the core plugs in (the system simulation)

    def _restart_state_machine(self, node: SimNode, start: SnapshotId,
                               data: bytes | None) -> None:
        """A process (re)starts: its state machine starts from the snapshot its log
        starts at (`data`: that snapshot's bytes, None for none)."""
        node.sm = StateMachine()
        if data is not None:
            for batch in StateMachine.decode(data):
                self._check_apply(node, batch)

    def _load_snapshot(self, node: SimNode, snapshot_id: SnapshotId, data: bytes) -> None:
        """The core fetched a snapshot: it replaces the state machine's state."""
        node.sm = StateMachine()
        for batch in StateMachine.decode(data):
            self._check_apply(node, batch)
        if node.sm.applied_offset != snapshot_id.end_offset:
            raise InvariantViolation(
                f"snapshot {snapshot_id} content ends at {node.sm.applied_offset}"
            )

    def _on_ready(self, node: SimNode, ready: Any) -> None:
        """After a Ready's messages and commits went out (leader changes, ...)."""

    def _snapshot_voters(self, data: bytes) -> VoterSet:
        """The voter set a snapshot's bytes carry (as a driver reads it)."""
        return voters_of(StateMachine.decode(data))

    def _base_voters(self, node: SimNode) -> VoterSet | None:
        """The voter set in force at the node's log start: its snapshot's, none yet for
        a fresh replica of a dynamic quorum, None for a static one."""
        if not node.dynamic:
            return None
        start = node.log.snapshot_id
        if start.end_offset == 0:
            return EMPTY_VOTER_SET
        return self._snapshot_voters(node.store.read_all(start))

    def _may_vote(self, node: SimNode) -> bool:
        """May this node be added as a voter? (The system simulation: controllers.)"""
        return True

    def _send(self, node: SimNode, message: Message) -> None:
        if not (isinstance(message, VoteRequest) and message.pre_vote):
            node.max_epoch_sent = max(node.max_epoch_sent, message.epoch)
        if isinstance(message, VoteResponse) and message.granted and not message.pre_vote:
            self.history.note_vote(f"{node.id}/{node.config.directory_id}", message.epoch,
                                   message.dst)
        if (message.src, message.dst) in self.blocked or self.rng.random() < self.drop_p:
            return
        self._at(self.now_ms + self.rng.randint(1, self.max_delay_ms), "msg", message)
        if self.rng.random() < self.dup_p:
            self._at(self.now_ms + self.rng.randint(1, 3 * self.max_delay_ms), "msg", message)

    # ---------------------------------------------------------------- checks

    def check_truncation(self, node_id: int, log: SimLog, offset: int) -> None:
        """A node may cut a committed batch only while it follows a stale leader.

        Raft lets a deposed leader (a zombie, in an older epoch) make a follower
        that is still in that epoch drop records committed in a newer epoch: that
        follower was not among the copies that committed them, and the newer
        leader restores them. What must never happen is that a node in the newest
        epoch does it, or that the committed copies fall below a majority (checked
        after every flush while any such cut is pending).
        """
        if offset >= log.end_offset:
            return
        self.truncations += 1
        raft = self.nodes[node_id].raft
        epoch = raft.epoch if raft is not None else 0
        for batch in log.batches:
            if batch.base_offset >= offset and self.history.is_committed(batch):
                if epoch >= max(self.history.leaders, default=0):
                    raise InvariantViolation(
                        f"node {node_id} in epoch {epoch} truncates to {offset},"
                        f" removing committed {batch!r}"
                    )
                self.committed_cuts += 1
                return

    def _check_apply(self, node: SimNode, batch: RecordBatch) -> None:
        if self.history.check_committed(node.id, batch):
            self._check_on_majority(batch)
        node.sm.apply(batch)

    def _check_on_majority(self, batch: RecordBatch) -> None:
        """Committed: every majority of the voter set in force that can still form
        holds it durably, so no election can pass it over: more holders than live
        identities outside a majority (with 3 or 5 live voters, a majority). Only
        the replica whose directory id the voter set names counts: a wiped disk's
        new replica is not that voter, and its old identity can never vote again."""
        voters = self.history.committed_voters
        need = self._live_identities(voters) - voters.majority + 1
        holders = self._holders(batch)
        if holders < need:
            raise InvariantViolation(
                f"committed {batch!r} is durable on only {holders} of the voters "
                f"{voters.describe()} (needs {need})")

    def _holders(self, batch: RecordBatch) -> int:
        holders = 0
        for v in self.history.committed_voters:
            if not self._is_live_identity(v):
                continue
            log = self.nodes[v.node_id].log
            if log.durable_snapshot_id.end_offset > batch.base_offset:
                holders += 1
                continue
            stored = log.durable_batch_at(batch.base_offset)
            if stored is not None and same_batch(stored, batch):
                holders += 1
        return holders

    def check_durable_majority(self) -> None:
        for batch in self.history.committed.values():
            self._check_on_majority(batch)

    def _check_node(self, node: SimNode) -> None:
        raft = node.raft
        if raft is None:
            return
        if raft.epoch < node.epoch_seen:
            raise InvariantViolation(
                f"node {node.id} epoch went back {node.epoch_seen} -> {raft.epoch}"
            )
        node.epoch_seen = raft.epoch
        if raft.high_watermark < node.hw_seen:
            raise InvariantViolation(
                f"node {node.id} hw went back {node.hw_seen} -> {raft.high_watermark}"
            )
        node.hw_seen = raft.high_watermark
        if raft.role is Role.LEADER:
            self.history.note_leader(node.id, raft.epoch)
        if not raft.can_campaign and raft.role in (Role.PROSPECTIVE, Role.CANDIDATE):
            raise InvariantViolation(f"observer {node.id} became {raft.role}")
        if raft.role is Role.LEADER:
            # One voter change at a time: at most one in the leader's log above what
            # the cluster committed (a new leader does not know its high watermark yet,
            # so its own view would count committed changes too).
            pending = [at for at, _ in raft.voter_history.entries
                       if at >= max(self.history.committed_end, raft.high_watermark)]
            if len(pending) > 1:
                raise InvariantViolation(
                    f"leader {node.id} has {len(pending)} uncommitted voter changes at "
                    f"{pending}")

    def check_final(self) -> None:
        for node in self.nodes.values():
            if node.raft is not None and not node.paused:
                self._drain(node)
        self.check_durable_majority()
        for node in self.nodes.values():
            raft = node.raft
            if raft is None:
                continue
            for batch in node.log.batches:
                if batch.next_offset <= raft.high_watermark and not self.history.is_committed(
                    batch
                ):
                    raise InvariantViolation(
                        f"node {node.id} holds {batch!r} below its hw but not committed"
                    )
        # Liveness once everything healed: someone leads and commits, and every
        # live node (voter or observer) has caught up with what was committed when
        # the faults stopped.
        heal_end = getattr(self, "heal_commit_end", 0)
        if self.history.committed_end <= heal_end:
            raise InvariantViolation(
                f"no progress after healing (committed end {self.history.committed_end})"
            )
        for node in self.nodes.values():
            if node.raft is not None and node.raft.high_watermark < heal_end:
                raise InvariantViolation(
                    f"node {node.id} stuck after healing: hw {node.raft.high_watermark} < {heal_end},"
                    f" {node.raft.role.name} in epoch {node.raft.epoch}"
                )


def run_seed(seed: int) -> Cluster:
    cluster = Cluster(seed)
    try:
        cluster.run()
    except Exception as exc:  # every failure names the seed that replays it
        raise InvariantViolation(
            f"seed {seed} failed at t={cluster.now_ms}ms step {cluster.steps}: {exc!r}\n"
            f"replay: SIM_SEED={seed} .venv/bin/python -m pytest tests/simulation -q"
        ) from exc
    return cluster
