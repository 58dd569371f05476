"""Interpreter of the data-driven Raft scripts in testdata/*.txt.

A script is one command a line (`#` starts a comment). The cluster runs the real
`RaftNode` core with in-memory logs, a FIFO network the script delivers
explicitly, and a clock the script moves. Flushes complete as soon as a node's
Ready is drained (`flush manual N` holds them until `flush N`).

Commands:
  cluster [dynamic] voters=1,2,3 [observers=4] [jitter=1:0.0,2:0.5] [<config field>=<int> ...]
      dynamic: the voters' logs start with the VotersRecord a format writes (node N
      has directory id dN.1 and endpoint nN:9000); observers start empty.
      jitter: the value each node's random source returns (election timeout =
      base * (1 + jitter)); default 0.0 for the lowest id, rising by 0.3.
  start N                   start a node declared with `late=N` in cluster
  run MS                    advance MS in 10 ms steps: tick all, deliver to quiescence
  tick MS [N,..]            advance the clock MS and tick (all or the listed nodes) once
  deliver [ROUNDS]          deliver queued messages (to quiescence, or ROUNDS rounds)
  drop                      drop every queued message
  partition A,B[|C,D]       cut A,B off from everyone (or from C,D only), both ways
  oneway A->B               drop messages from A to B
  heal                      remove every cut
  propose N "r1" ["r2"..]   propose one batch on N (must succeed)
  propose-fail N ERROR ...  propose must fail with ERROR (NOT_LEADER, TOO_LARGE, EMPTY)
  read N ID                 ask N for a linearizable read (ReadIndex) with id ID
  read-fail N ERROR ID      the read must be refused with ERROR (NOT_LEADER, BUSY)
  crash N / restart N       lose unflushed writes and undrained state / start again
  resign N                  graceful leader shutdown (EndQuorumEpoch)
  transfer L T              L starts handing leadership to voter T (must be accepted)
  transfer-fail L T ERROR   the transfer must be refused with ERROR (NOT_LEADER, NOT_VOTER,
                            IN_PROGRESS, CHANGE_PENDING)
  expect transfer N T|none  the transfer N's leader state has under way
  compact N                 snapshot N's state machine at its high watermark, drop the log below
  flush manual N | flush N  hold N's flushes / complete them
  inject N TYPE k=v ...     hand N a message (FetchRequest, VoteRequest) built from k=v
  expect role N ROLE
  expect leader N epoch E   (N leads epoch E, and every live node in epoch E knows it)
  expect epoch N E
  expect hw N OFFSET
  expect end N OFFSET
  expect start N OFFSET      (log start: moves after a snapshot)
  expect voted N CANDIDATE|none
  expect applied N "r1" ...  the non-control records N applied, in order (all of them)
  expect logs-match A,B,...  identical batches below the smallest high watermark... and
                             identical logs altogether when they have the same end offset
  expect sent TYPE k=v ...  some message sent since the last `deliver`/`drop` matches
  expect not-sent TYPE k=v ...
  expect snapshots-loaded N COUNT
  expect reads N ID@INDEX ...  the reads N confirmed so far, in order (none: no args)
  wipe N                    N's disk is lost: N comes back (down) as a new replica with
                            an empty log and the next directory id (dN.2, ...)
  add-voter L N             L adds replica N (its directory id and endpoint) (must succeed)
  add-voter-fail L N ERROR [dir=D] [endpoint=E]
  remove-voter L N [DIR]    L removes voter N (N's current directory id unless DIR)
  remove-voter-fail L N ERROR [DIR]
  update-voter L N ENDPOINT
  expect voters N 1,2,3     the ids of the latest voter set in N's log
  expect is-voter N yes|no
"""

from __future__ import annotations

import shlex
from typing import Any

import attrs

from controller.logformat import EMPTY_ORIGIN, EpochEndOffset
from controller.raft import (
    MemoryRaftLog,
    MemorySnapshotStore,
    ProposeError,
    QuorumState,
    RaftConfig,
    RaftNode,
    RecordBatch,
    Role,
    SnapshotId,
)
from controller.raft import messages as msgs
from controller.raft.control import encode_voters
from controller.raft.ready import TransferError
from controller.raft.voters import (
    EMPTY_VOTER_SET,
    Voter,
    VoterChangeError,
    VoterChangeResult,
    VoterSet,
)
from tests.simulation.nodes import voters_of

CLUSTER_ID = "script-cluster"
STEP_MS = 10


class ScriptError(AssertionError):
    pass


class FixedRandom:
    def __init__(self, value: float) -> None:
        self.value = value

    def random(self) -> float:
        return self.value


class Node:
    def __init__(self, config: RaftConfig, jitter: float, retain_batches: int = 0) -> None:
        self.config = config
        self.jitter = jitter
        self.log = MemoryRaftLog(retain_batches=retain_batches)
        self.store = MemorySnapshotStore()
        self.qs: QuorumState | None = None
        self.raft: RaftNode | None = None
        self.applied: list[RecordBatch] = []
        # Reads confirmed (Ready.reads), as "id@index".
        self.reads: list[str] = []
        self.manual_flush = False
        self.pending_flushes: list[int] = []
        self.snapshots_loaded = 0
        self.dynamic = False
        self.incarnation = 1
        # Set by `damage`: what the driver passes after storage found the log damaged.
        self.repair_to_offset: int | None = None

    @property
    def voter(self) -> Voter:
        return Voter(self.config.node_id, self.config.directory_id,
                     f"n{self.config.node_id}:9000")

    def base_voters(self) -> VoterSet | None:
        """The voter set in force at the log's start (what a driver reads from the
        snapshot the log starts at)."""
        if not self.dynamic:
            return None
        start = self.log.snapshot_id
        if start.end_offset == 0:
            return EMPTY_VOTER_SET
        return voters_of(_decode_snapshot(self.store.read_all(start)))


class Script:
    def __init__(self) -> None:
        self.now_ms = 0
        self.nodes: dict[int, Node] = {}
        self.queue: list[msgs.Message] = []
        self.sent: list[msgs.Message] = []
        self.cuts: set[tuple[int, int]] = set()

    # ------------------------------------------------------------ machinery

    def _start(self, node: Node) -> None:
        node.raft = RaftNode(
            node.config,
            node.log,
            node.store,
            FixedRandom(node.jitter),
            quorum_state=node.qs,
            now_ms=self.now_ms,
            voters=node.base_voters(),
            repair_to_offset=node.repair_to_offset,
        )
        node.applied = []
        self._drain(node)

    def _drain(self, node: Node) -> None:
        raft = node.raft
        assert raft is not None
        while True:
            ready = raft.ready()
            if ready.quorum_state is not None:
                node.qs = ready.quorum_state
            for message in ready.messages:
                self.queue.append(message)
                self.sent.append(message)
            node.applied.extend(ready.committed)
            if ready.repaired:
                node.repair_to_offset = None
            node.reads.extend(f"{r.read_id}@{r.index}" for r in ready.reads)
            if ready.flush_to_offset is not None:
                node.pending_flushes.append(ready.flush_to_offset)
            if not node.manual_flush and node.pending_flushes:
                self._flush(node)
                continue
            if ready.snapshot_to_load is not None:
                data = node.store.finish_write(ready.snapshot_to_load)
                node.applied = _decode_snapshot(data)
                node.snapshots_loaded += 1
                voters = voters_of(node.applied) if node.dynamic else None
                raft.snapshot_loaded(ready.snapshot_to_load, self.now_ms, voters)
                continue
            if ready.empty:
                return

    def _flush(self, node: Node) -> None:
        assert node.raft is not None
        node.log.sync()
        flushes, node.pending_flushes = node.pending_flushes, []
        for offset in flushes:
            node.raft.flushed(offset, self.now_ms)

    def _live(self) -> list[Node]:
        return [n for n in self.nodes.values() if n.raft is not None]

    def _deliver(self, rounds: int | None) -> None:
        done = 0
        while self.queue and (rounds is None or done < rounds):
            batch, self.queue = self.queue, []
            for message in batch:
                node = self.nodes.get(message.dst)
                if node is None or node.raft is None or (message.src, message.dst) in self.cuts:
                    continue
                node.raft.receive(message, self.now_ms)
                self._drain(node)
            done += 1
            if done > 10_000:
                raise ScriptError("messages never quiesce")

    def _tick(self, ms: int, ids: list[int] | None = None) -> None:
        self.now_ms += ms
        for node in self._live():
            if ids is None or node.config.node_id in ids:
                assert node.raft is not None
                node.raft.tick(self.now_ms)
                self._drain(node)

    def raft(self, node_id: int) -> RaftNode:
        raft = self.nodes[node_id].raft
        if raft is None:
            raise ScriptError(f"node {node_id} is down")
        return raft

    # ------------------------------------------------------------- commands

    def cmd_cluster(self, *args: str) -> None:
        dynamic = "dynamic" in args
        opts = dict(a.split("=", 1) for a in args if a != "dynamic")
        voters = frozenset(int(v) for v in opts.pop("voters").split(","))
        observers = [int(v) for v in opts.pop("observers", "").split(",") if v]
        late = {int(v) for v in opts.pop("late", "").split(",") if v}
        # Batches each log keeps below its snapshot when compacted.
        retain = int(opts.pop("retain", "0"))
        jitter = {
            int(k): float(v)
            for k, v in (p.split(":") for p in opts.pop("jitter", "").split(",") if p)
        }
        overrides: dict[str, Any] = {
            "election_timeout_ms": 100,
            "fetch_max_wait_ms": 20,
            "request_timeout_ms": 60,
            "check_quorum_timeout_ms": 150,
            "begin_quorum_retry_ms": 30,
            "end_quorum_backoff_ms": 10,
        }
        overrides.update({k: int(v) for k, v in opts.items()})
        for i, node_id in enumerate(sorted(voters | set(observers))):
            directory_id = f"d{node_id}.1" if dynamic else ""
            config = RaftConfig(node_id=node_id, cluster_id=CLUSTER_ID, voters=voters,
                                directory_id=directory_id, **overrides)
            self.nodes[node_id] = Node(config, jitter.get(node_id, (0.3 * i) % 1.0), retain)
            self.nodes[node_id].dynamic = dynamic
        if dynamic:
            bootstrap = VoterSet.of(self.nodes[v].voter for v in voters)
            for node_id in voters:
                self.nodes[node_id].log.append(RecordBatch(
                    base_offset=0, epoch=0, append_time_ms=0, is_control=True,
                    origin=EMPTY_ORIGIN, records=(encode_voters(bootstrap),)))
                self.nodes[node_id].log.sync()
        for node_id, node in self.nodes.items():
            if node_id not in late:
                self._start(node)

    def cmd_start(self, node_id: str) -> None:
        self._start(self.nodes[int(node_id)])

    def cmd_run(self, ms: str) -> None:
        for _ in range(int(ms) // STEP_MS):
            self._tick(STEP_MS)
            self._deliver(None)

    def cmd_tick(self, ms: str, ids: str | None = None) -> None:
        self._tick(int(ms), None if ids is None else [int(i) for i in ids.split(",")])

    def cmd_deliver(self, rounds: str | None = None) -> None:
        self.sent = []
        self._deliver(None if rounds is None else int(rounds))

    def cmd_drop(self) -> None:
        self.queue = []
        self.sent = []

    def cmd_partition(self, spec: str) -> None:
        left, _, right = spec.partition("|")
        side = {int(v) for v in left.split(",")}
        other = {int(v) for v in right.split(",")} if right else set(self.nodes) - side
        for a in side:
            for b in other:
                self.cuts |= {(a, b), (b, a)}

    def cmd_oneway(self, spec: str) -> None:
        a, b = spec.split("->")
        self.cuts.add((int(a), int(b)))

    def cmd_heal(self) -> None:
        self.cuts.clear()

    def cmd_propose(self, node_id: str, *records: str) -> None:
        result = self.raft(int(node_id)).propose([r.encode() for r in records], self.now_ms)
        if not result.ok:
            raise ScriptError(f"propose on {node_id} failed: {result}")
        self._drain(self.nodes[int(node_id)])

    def cmd_propose_fail(self, node_id: str, error: str, *records: str) -> None:
        result = self.raft(int(node_id)).propose([r.encode() for r in records], self.now_ms)
        if result.error is not ProposeError[error]:
            raise ScriptError(f"propose on {node_id}: expected {error}, got {result}")

    def cmd_read(self, node_id: str, read_id: str) -> None:
        error = self.raft(int(node_id)).read_index(int(read_id), self.now_ms)
        if error is not None:
            raise ScriptError(f"read {read_id} on {node_id} refused: {error.name}")
        self._drain(self.nodes[int(node_id)])

    def cmd_read_fail(self, node_id: str, error: str, read_id: str) -> None:
        got = self.raft(int(node_id)).read_index(int(read_id), self.now_ms)
        if got is not ProposeError[error]:
            raise ScriptError(f"read {read_id} on {node_id}: expected {error}, got {got}")

    def cmd_crash(self, node_id: str) -> None:
        node = self.nodes[int(node_id)]
        node.raft = None
        node.pending_flushes = []
        node.manual_flush = False
        node.log.crash(0)
        node.store.crash()

    def cmd_damage(self, node_id: str, offset: str) -> None:
        """A crashed node's disk loses flushed records from `offset` (a batch
        boundary) on; it restarts knowing it (storage's recovery point)."""
        node = self.nodes[int(node_id)]
        if node.raft is not None:
            raise ScriptError(f"crash node {node_id} before damaging its disk")
        flushed_end = node.log.end_offset
        node.log.truncate_to(int(offset))
        node.log.sync()
        node.repair_to_offset = flushed_end

    def cmd_restart(self, node_id: str) -> None:
        self._start(self.nodes[int(node_id)])

    def cmd_resign(self, node_id: str) -> None:
        self.raft(int(node_id)).resign(self.now_ms)
        self._drain(self.nodes[int(node_id)])

    def cmd_transfer(self, node_id: str, target: str) -> None:
        error = self.raft(int(node_id)).transfer_leadership(int(target), self.now_ms)
        if error is not None:
            raise ScriptError(f"transfer on {node_id} to {target} refused: {error.name}")
        self._drain(self.nodes[int(node_id)])

    def cmd_transfer_fail(self, node_id: str, target: str, error: str) -> None:
        got = self.raft(int(node_id)).transfer_leadership(int(target), self.now_ms)
        if got is not TransferError[error]:
            raise ScriptError(f"transfer on {node_id} to {target}: expected {error}, got {got}")

    def cmd_compact(self, node_id: str) -> None:
        node = self.nodes[int(node_id)]
        raft = self.raft(int(node_id))
        covered = [b for b in node.applied if b.next_offset <= raft.high_watermark]
        last = covered[-1]
        snapshot_id = SnapshotId(last.next_offset, last.epoch)
        node.store.put(snapshot_id, _encode_snapshot(covered))
        raft.compact(snapshot_id, self.now_ms)

    def cmd_flush(self, *args: str) -> None:
        if args[0] == "manual":
            self.nodes[int(args[1])].manual_flush = True
            return
        node = self.nodes[int(args[0])]
        node.manual_flush = False
        self._flush(node)
        self._drain(node)

    def cmd_inject(self, node_id: str, type_name: str, *fields: str) -> None:
        cls = getattr(msgs, type_name)
        values: dict[str, Any] = {"cluster_id": CLUSTER_ID, "dst": int(node_id)}
        for f in fields:
            k, v = f.split("=", 1)
            values[k] = _parse_value(v)
        self.raft(int(node_id)).receive(cls(**values), self.now_ms)
        self.sent = []
        self._drain(self.nodes[int(node_id)])

    def cmd_wipe(self, node_id: str) -> None:
        old = self.nodes[int(node_id)]
        if old.raft is not None:
            raise ScriptError(f"crash node {node_id} before wiping it")
        fresh = Node(attrs.evolve(old.config, directory_id=f"d{node_id}.{old.incarnation + 1}"),
                     old.jitter)
        fresh.dynamic, fresh.incarnation = True, old.incarnation + 1
        self.nodes[int(node_id)] = fresh

    def _change(self, leader: str, kind: str, node_id: str, *extra: str) -> VoterChangeResult:
        raft = self.raft(int(leader))
        target = self.nodes[int(node_id)].voter
        opts = dict(e.split("=", 1) for e in extra if "=" in e)
        endpoint = extra[0] if kind == "update" else opts.get("endpoint", target.endpoint)
        voter = Voter(target.node_id, opts.get("dir", target.directory_id), endpoint)
        result = raft.change_voters(kind, voter, self.now_ms)
        self._drain(self.nodes[int(leader)])
        return result

    def cmd_add_voter(self, leader: str, node_id: str) -> None:
        result = self._change(leader, "add", node_id)
        if not result.ok:
            raise ScriptError(f"add-voter {node_id} on {leader} failed: {result}")

    def cmd_add_voter_fail(self, leader: str, node_id: str, error: str, *extra: str) -> None:
        result = self._change(leader, "add", node_id, *extra)
        if result.error is not VoterChangeError[error]:
            raise ScriptError(f"add-voter {node_id}: expected {error}, got {result}")

    def cmd_remove_voter(self, leader: str, node_id: str, *extra: str) -> None:
        result = self._change(leader, "remove", node_id, *extra)
        if not result.ok:
            raise ScriptError(f"remove-voter {node_id} on {leader} failed: {result}")

    def cmd_remove_voter_fail(self, leader: str, node_id: str, error: str, *extra: str) -> None:
        result = self._change(leader, "remove", node_id, *extra)
        if result.error is not VoterChangeError[error]:
            raise ScriptError(f"remove-voter {node_id}: expected {error}, got {result}")

    def cmd_update_voter(self, leader: str, node_id: str, endpoint: str) -> None:
        result = self._change(leader, "update", node_id, endpoint)
        if not result.ok:
            raise ScriptError(f"update-voter {node_id} on {leader} failed: {result}")

    def cmd_expect(self, what: str, *args: str) -> None:
        getattr(self, "expect_" + what.replace("-", "_"))(*args)

    # ---------------------------------------------------------- expectations

    def expect_role(self, node_id: str, role: str) -> None:
        actual = self.raft(int(node_id)).role
        if actual is not Role[role.upper()]:
            raise ScriptError(f"node {node_id} is {actual.name}, expected {role}")

    def expect_transfer(self, node_id: str, target: str) -> None:
        actual = self.raft(int(node_id)).transfer_target
        wanted = None if target == "none" else int(target)
        if actual != wanted:
            raise ScriptError(f"node {node_id} transfers to {actual}, expected {target}")

    def expect_leader(self, node_id: str, _epoch_word: str, epoch: str) -> None:
        self.expect_role(node_id, "leader")
        self.expect_epoch(node_id, epoch)
        for node in self._live():
            raft = node.raft
            assert raft is not None
            if raft.epoch == int(epoch) and raft.leader_id != int(node_id):
                raise ScriptError(
                    f"node {node.config.node_id} knows {raft.leader}, not {node_id}@{epoch}"
                )

    def expect_reads(self, node_id: str, *reads: str) -> None:
        actual = self.nodes[int(node_id)].reads
        if actual != list(reads):
            raise ScriptError(f"node {node_id} confirmed reads {actual}, expected {list(reads)}")

    def expect_epoch(self, node_id: str, epoch: str) -> None:
        actual = self.raft(int(node_id)).epoch
        if actual != int(epoch):
            raise ScriptError(f"node {node_id} is in epoch {actual}, expected {epoch}")

    def expect_hw(self, node_id: str, offset: str) -> None:
        actual = self.raft(int(node_id)).high_watermark
        if actual != int(offset):
            raise ScriptError(f"node {node_id} high watermark is {actual}, expected {offset}")

    def expect_end(self, node_id: str, offset: str) -> None:
        actual = self.raft(int(node_id)).log.end_offset
        if actual != int(offset):
            raise ScriptError(f"node {node_id} log ends at {actual}, expected {offset}")

    def expect_start(self, node_id: str, offset: str) -> None:
        actual = self.raft(int(node_id)).log.start_offset
        if actual != int(offset):
            raise ScriptError(f"node {node_id} log starts at {actual}, expected {offset}")

    def expect_retained(self, node_id: str, offset: str) -> None:
        actual = self.raft(int(node_id)).log.retained_start_offset
        if actual != int(offset):
            raise ScriptError(f"node {node_id} retains its log from {actual}, expected {offset}")

    def expect_repairing(self, node_id: str, answer: str) -> None:
        actual = self.raft(int(node_id)).repair is not None
        if actual != (answer == "yes"):
            raise ScriptError(f"node {node_id} repairing: {actual}, expected {answer}")

    def expect_voted(self, node_id: str, candidate: str) -> None:
        actual = self.raft(int(node_id)).voted_for
        expected = None if candidate == "none" else int(candidate)
        if actual != expected:
            raise ScriptError(f"node {node_id} voted for {actual}, expected {expected}")

    def expect_applied(self, node_id: str, *records: str) -> None:
        node = self.nodes[int(node_id)]
        actual = [r.decode() for b in node.applied if not b.is_control for r in b.records]
        if actual != list(records):
            raise ScriptError(f"node {node_id} applied {actual}, expected {list(records)}")

    def expect_logs_match(self, ids: str) -> None:
        logs = {int(i): self.nodes[int(i)].log for i in ids.split(",")}
        ends = {i: log.end_offset for i, log in logs.items()}
        if len(set(ends.values())) != 1:
            raise ScriptError(f"log ends differ: {ends}")
        first = None
        for i, log in logs.items():
            view = [(b.base_offset, b.epoch, b.records) for b in log.batches]
            first = view if first is None else first
            if view != first:
                raise ScriptError(f"node {i}'s log differs: {view} vs {first}")

    def _matching(self, type_name: str, fields: tuple[str, ...]) -> list[msgs.Message]:
        wanted = {k: _parse_value(v) for k, v in (f.split("=", 1) for f in fields)}
        return [
            m
            for m in self.sent
            if type(m).__name__ == type_name and all(getattr(m, k) == v for k, v in wanted.items())
        ]

    def expect_sent(self, type_name: str, *fields: str) -> None:
        if not self._matching(type_name, fields):
            raise ScriptError(f"no {type_name} {fields} among {self.sent}")

    def expect_not_sent(self, type_name: str, *fields: str) -> None:
        found = self._matching(type_name, fields)
        if found:
            raise ScriptError(f"unexpected {found}")

    def expect_voters(self, node_id: str, ids: str) -> None:
        actual = sorted(self.raft(int(node_id)).voters.ids)
        if actual != sorted(int(i) for i in ids.split(",") if i):
            raise ScriptError(f"node {node_id}'s voters are {actual}, expected {ids}")

    def expect_is_voter(self, node_id: str, answer: str) -> None:
        actual = self.raft(int(node_id)).is_voter
        if actual != (answer == "yes"):
            raise ScriptError(f"node {node_id} is_voter={actual}, expected {answer}")

    def expect_snapshots_loaded(self, node_id: str, count: str) -> None:
        actual = self.nodes[int(node_id)].snapshots_loaded
        if actual != int(count):
            raise ScriptError(f"node {node_id} loaded {actual} snapshots, expected {count}")


def _parse_value(text: str) -> Any:
    if text in ("True", "False"):
        return text == "True"
    if text == "None":
        return None
    if text.lstrip("-").isdigit():
        return int(text)
    if text.startswith("diverging:"):
        epoch, end = text.split(":")[1].split(",")
        return EpochEndOffset(int(epoch), int(end))
    if text.startswith("(") and text.endswith(")"):
        return tuple(int(v) for v in text[1:-1].split(",") if v)
    if text.startswith("error:"):
        return msgs.Errors[text.split(":")[1]]
    return text


def _encode_snapshot(batches: list[RecordBatch]) -> bytes:
    return repr([(b.base_offset, b.epoch, b.is_control, b.records) for b in batches]).encode()


def _decode_snapshot(data: bytes) -> list[RecordBatch]:
    import ast

    from controller.logformat import EMPTY_ORIGIN

    return [
        RecordBatch(
            base_offset=base,
            epoch=epoch,
            append_time_ms=0,
            is_control=control,
            origin=EMPTY_ORIGIN,
            records=records,
        )
        for base, epoch, control, records in ast.literal_eval(data.decode())
    ]


def run_script(text: str) -> None:
    script = Script()
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip() if not raw.lstrip().startswith("#") else ""
        if not line:
            continue
        words = shlex.split(line)
        handler = getattr(script, "cmd_" + words[0].replace("-", "_"), None)
        if handler is None:
            raise ScriptError(f"line {lineno}: unknown command {words[0]!r}")
        try:
            handler(*words[1:])
        except ScriptError as exc:
            raise ScriptError(f"line {lineno}: {line}\n  {exc}") from None
        except Exception as exc:
            raise ScriptError(f"line {lineno}: {line}\n  {exc!r}") from exc
