"""The controller's state machine on its own: stimuli in, instructions out, no event
loop, no clock (the time is a number the test passes). A small in-memory log stands
in for the Raft node; the test decides what commits and when."""

from __future__ import annotations

import random
from collections.abc import Sequence

import attrs
import pytest

from controller.api.rpcs import ADMIN_RPCS_BY_NAME
from controller.api.seam import (
    Args,
    ControllerTimeoutError,
    NotControllerError,
    Operation,
    RequestIdReusedError,
)
from controller.logformat.batch import EMPTY_ORIGIN, BatchOrigin, RecordBatch
from controller.metadata import (
    LATEST_METADATA_VERSION,
    METADATA_VERSION,
    CreatableTopic,
    FeatureUpdate,
    MetadataState,
)
from controller.quorum.errors import LeadershipTransferringError, NotLeaderError
from controller.quorum_controller.events import (
    MODE_TRANSITIONS,
    Answer,
    Fail,
    Instruction,
    Mode,
    ReadConsistency,
    Request,
)
from controller.quorum_controller.facade import BROKER_HEARTBEAT, REGISTER_BROKER
from controller.quorum_controller.machine import IDLE_TICK_MS, ControllerMachine
from controller.quorum_controller.ports import ControllerSettings
from controller.raft.control import encode_leader_change
from controller.raft.ready import TransferError
from controller.records import decode_record
from tests.support.op_context import StateContext

ME, OTHER = 1, 2
_OPS = {rpc.name: rpc.op for rpc in ADMIN_RPCS_BY_NAME.values() if rpc.op is not None}
CREATE_TOPICS, UPDATE_FEATURES = _OPS["CreateTopics"], _OPS["UpdateFeatures"]
ORIGIN = BatchOrigin("User:test", "test", "req")


class Log:
    """One shared log: what the Raft node would append and commit."""

    def __init__(self) -> None:
        self.batches: list[RecordBatch] = []
        self.committed = 0  # batches committed
        self.epoch = 0
        self.leader: int | None = None

    @property
    def end(self) -> int:
        return self.batches[-1].next_offset if self.batches else 0

    def add(self, records: Sequence[bytes], epoch: int, *, control: bool = False,
            origin: BatchOrigin = EMPTY_ORIGIN) -> int:
        base = self.end
        self.batches.append(RecordBatch(base, epoch, 0, control, origin, tuple(records)))
        return base

    def elect(self, leader: int, *, drop_uncommitted: bool = True) -> None:
        if drop_uncommitted:
            del self.batches[self.committed:]
        self.epoch += 1
        self.leader = leader
        self.add([encode_leader_change(leader, self.epoch, [ME, OTHER], [ME, OTHER])],
                 self.epoch, control=True)

    def commit_all(self) -> list[RecordBatch]:
        news = self.batches[self.committed:]
        self.committed = len(self.batches)
        return news


class Node:
    """`NodeAccess` over the log, as node `node_id` sees it."""

    def __init__(self, log: Log, node_id: int) -> None:
        self.log = log
        self.node_id = node_id
        self.reads: list[int] = []  # read ids the machine asked to confirm
        # A leadership transfer under way (the Raft node refuses appends meanwhile).
        self.transferring_to: int | None = None

    @property
    def next_offset(self) -> int:
        return self.log.end

    @property
    def leader_epoch(self) -> int | None:
        return self.log.epoch if self.log.leader == self.node_id else None

    @property
    def known_leader_id(self) -> int | None:
        return self.log.leader

    @property
    def high_watermark(self) -> int | None:
        return None

    def append(self, records: Sequence[bytes], origin: BatchOrigin) -> int:
        if self.leader_epoch is None:
            raise NotLeaderError(self.log.leader, self.log.epoch)
        if self.transferring_to is not None:
            raise LeadershipTransferringError("transferring")
        return self.log.add(records, self.log.epoch, origin=origin)

    def transfer_leadership(self, target: int) -> TransferError | None:
        if self.leader_epoch is None:
            return TransferError.NOT_LEADER
        self.transferring_to = target
        return None

    def read_index(self, read_id: int) -> None:
        if self.leader_epoch is None:
            raise NotLeaderError(self.log.leader, self.log.epoch)
        self.reads.append(read_id)


class Harness:
    def __init__(self, bootstrap_metadata_version: int = LATEST_METADATA_VERSION) -> None:
        self.log = Log()
        self.node = Node(self.log, ME)
        self.machine = ControllerMachine(
            ControllerSettings(node_id=ME, cluster_id="c", voter_addresses={
                ME: "h:1", OTHER: "h:2"},
                bootstrap_metadata_version=bootstrap_metadata_version), rng=random.Random(0))
        self.now = 1_000
        self.ids = 0
        self.modes: list[Mode] = [self.machine.mode]

    def step(self) -> list[Instruction]:
        self.now += 10
        if self.machine.mode is not self.modes[-1]:
            self.modes.append(self.machine.mode)
        return self.machine.take_instructions()

    def commit(self) -> list[Instruction]:
        if self.machine.committed(self.log.commit_all(), self.now):
            self.machine.tick(self.node, self.now)
        return self.step()

    def elect_me(self) -> list[Instruction]:
        self.log.elect(ME)
        self.machine.leader_changed(ME, self.log.epoch, self.now)
        return self.commit()

    def create(self, name: str) -> Request:
        self.ids += 1
        state = self.machine.state
        return Request(self.ids, CREATE_TOPICS, Args((CreatableTopic(name, 1, 1),)),
                       StateContext(state), self.now, origin=ORIGIN)

    def send(self, req: Request) -> list[Instruction]:
        self.machine.request(req, self.node, self.now)
        return self.step()

    def register_broker(self) -> None:
        from controller.metadata import BrokerRegistrationRequest
        from controller.records.domain import FeatureRange, Listener

        self.ids += 1
        state = self.machine.state
        registration = BrokerRegistrationRequest(
            broker_id=7, cluster_id="c", incarnation_id="i",
            listeners=(Listener("PLAINTEXT", "h", 9092, "PLAINTEXT"),),
            # As a broker agent says it (lifecycle.py).
            features=(FeatureRange(METADATA_VERSION, 1, LATEST_METADATA_VERSION),))
        self.send(Request(self.ids, REGISTER_BROKER, Args((7,), extra=registration),
                          StateContext(state), self.now))
        self.commit()
        from controller.metadata import BrokerHeartbeatRequest

        epoch = state.cluster.broker(7).broker_epoch  # type: ignore[union-attr]
        self.ids += 1
        self.send(Request(self.ids, BROKER_HEARTBEAT,
                          Args((7,), extra=BrokerHeartbeatRequest(7, epoch, 1 << 40)),
                          StateContext(state), self.now))
        self.commit()


def list_topics(h: Harness, consistency: ReadConsistency = ReadConsistency.LINEARIZABLE
                ) -> Request:
    h.ids += 1
    return Request(h.ids, LIST_TOPIC_NAMES, Args(), StateContext(h.machine.state), h.now,
                   consistency=consistency)


# A read answering the topics' names only (what these tests compare).
LIST_TOPIC_NAMES = Operation("ListTopicNames", query=lambda ctx, _args, epoch: tuple(
    t.name for t in ctx.state.replication.list_topics(epoch)))


def replay_of(batches: Sequence[RecordBatch]) -> MetadataState:
    state = MetadataState(cluster_id="c", rng=random.Random(0))
    for batch in batches:
        if not batch.is_control:
            state.replay_encoded(batch.records, batch.base_offset)
    return state


def test_a_standby_answers_not_controller_and_names_the_leader() -> None:
    h = Harness()
    h.log.elect(OTHER)
    h.machine.leader_changed(OTHER, h.log.epoch, h.now)
    [out] = h.send(h.create("t"))
    assert isinstance(out, Fail) and isinstance(out.error, NotControllerError)
    assert out.error.leader_id == OTHER and out.error.leader_address == "h:2"
    assert h.log.end == 1  # only the LeaderChange: nothing appended


def test_requests_park_while_pending_and_run_once_active() -> None:
    h = Harness()
    h.log.elect(ME)
    h.machine.leader_changed(ME, h.log.epoch, h.now)
    assert h.machine.mode is Mode.PENDING
    parked = h.create("early")
    assert h.send(parked) == []  # parked, not answered
    forgotten = h.create("gave-up")
    h.send(forgotten)
    h.machine.forget(forgotten.id)
    out = h.commit()  # the LeaderChange commits: active, features bootstrapped, and
    assert h.machine.mode is Mode.ACTIVE and out == []  # the parked request ran:
    assert len(h.log.batches) == 2  # LeaderChange, feature levels, and no topic
    # (no broker yet): its answer waits for the feature batch it read after.
    [answer] = h.commit()
    assert isinstance(answer, Answer) and answer.request_id == parked.id
    assert answer.value[0].error.code.value == "INVALID_REPLICATION_FACTOR"
    assert h.machine.take_instructions() == []  # the forgotten one never ran
    assert h.modes == [Mode.STANDBY, Mode.PENDING, Mode.ACTIVE]


def test_a_write_is_answered_only_once_committed() -> None:
    h = Harness()
    h.elect_me()
    h.register_broker()
    req = h.create("orders")
    assert h.send(req) == []
    assert [t.name for t in h.machine.state.replication.list_topics()] == ["orders"]
    [answer] = h.commit()
    assert isinstance(answer, Answer) and answer.value[0].error.ok
    # The state equals a fresh replay of the committed log.
    assert h.machine.state.to_image() == replay_of(h.log.batches).to_image()


def test_writes_during_a_leadership_transfer_are_refused_whole_and_leadership_kept() -> None:
    h = Harness()
    h.elect_me()
    h.register_broker()
    h.send(h.create("before"))
    h.commit()
    image = h.machine.state.to_image()
    end = h.log.end
    assert h.machine.transfer_leadership(h.node, OTHER) is None
    [out] = h.send(h.create("during"))
    # "Not controller", naming nobody: the client retries elsewhere, and nothing of
    # the write stays (not in the log, not in the state).
    assert isinstance(out, Fail) and isinstance(out.error, NotControllerError)
    assert out.error.leader_id is None
    assert h.log.end == end and h.machine.state.to_image() == image
    # The controller stays active (a transfer that fails leaves it leading).
    assert h.machine.mode is Mode.ACTIVE
    h.node.transferring_to = None  # the transfer was given up
    h.send(h.create("after"))
    [answer] = h.commit()
    assert isinstance(answer, Answer) and answer.value[0].error.ok
    assert h.machine.state.to_image() == replay_of(h.log.batches).to_image()


def test_a_standby_refuses_a_leadership_transfer() -> None:
    h = Harness()
    h.log.elect(OTHER)
    h.machine.leader_changed(OTHER, h.log.epoch, h.now)
    assert h.machine.transfer_leadership(h.node, OTHER) is TransferError.NOT_LEADER


def test_leadership_lost_with_a_write_in_flight_reverts_and_learns_its_fate() -> None:
    h = Harness()
    h.elect_me()
    h.register_broker()
    lost = h.create("lost")
    assert h.send(lost) == []
    # Another leader takes over and its log drops our uncommitted batch.
    h.log.elect(OTHER)
    h.machine.leader_changed(OTHER, h.log.epoch, h.now)
    assert h.machine.mode is Mode.STANDBY
    assert "lost" not in {t.name for t in h.machine.state.replication.list_topics()}
    [out] = h.commit()  # a newer epoch commits over it: it was never applied
    assert isinstance(out, Fail) and isinstance(out.error, NotControllerError)
    assert h.machine.state.to_image() == replay_of(h.log.batches).to_image()


def test_a_write_kept_by_the_next_leader_succeeds_after_all() -> None:
    h = Harness()
    h.elect_me()
    h.register_broker()
    kept = h.create("kept")
    h.send(kept)
    h.log.elect(OTHER, drop_uncommitted=False)
    h.machine.leader_changed(OTHER, h.log.epoch, h.now)
    [out] = h.commit()
    assert isinstance(out, Answer) and out.request_id == kept.id
    assert "kept" in {t.name for t in h.machine.state.replication.list_topics()}


def test_an_orphan_whose_fate_never_arrives_is_reported_unknown() -> None:
    h = Harness()
    h.elect_me()
    h.register_broker()
    h.send(h.create("orphan"))
    h.log.elect(OTHER, drop_uncommitted=False)  # not committed yet, and nobody says more
    h.machine.leader_changed(OTHER, h.log.epoch, h.now)
    h.machine.tick(h.node, h.now + h.machine.settings.orphan_timeout_ms)
    [out] = h.step()
    assert isinstance(out, Fail) and isinstance(out.error, ControllerTimeoutError)


def test_shut_down_answers_every_waiter() -> None:
    h = Harness()
    h.elect_me()
    h.register_broker()
    h.send(h.create("a"))
    h.machine.shut_down()
    [out] = h.step()
    assert isinstance(out, Fail)


def test_modes_change_only_through_the_table() -> None:
    assert MODE_TRANSITIONS[Mode.STANDBY] == {Mode.PENDING}
    assert Mode.ACTIVE not in MODE_TRANSITIONS[Mode.STANDBY]
    h = Harness()
    with pytest.raises(AssertionError):
        h.machine._become(Mode.ACTIVE)  # STANDBY -> ACTIVE skips PENDING


def test_a_linearizable_read_waits_for_confirmation_then_for_its_index() -> None:
    h = Harness()
    h.elect_me()
    h.register_broker()
    assert h.send(h.create("a")) == []
    h.commit()
    read = list_topics(h)
    assert h.send(read) == [] and h.node.reads == [read.id]  # asked the node to confirm
    # Meanwhile another write appends (uncommitted): the read must not see it.
    h.send(h.create("b"))
    committed = h.machine.committed_offset
    # Confirmed at an index past what this node has committed: it waits for that.
    h.machine.reads_confirmed([(read.id, committed + 1)])
    assert h.step() == []
    out = h.commit()
    answers = [o for o in out if o.request_id == read.id]
    assert len(answers) == 1 and isinstance(answers[0], Answer)
    # Read at the committed offset: "b" committed by then, so it is in the answer.
    assert answers[0].value == ("a", "b") and answers[0].read_offset == h.log.end


def test_a_confirmed_read_at_a_committed_index_is_answered_at_once() -> None:
    h = Harness()
    h.elect_me()
    h.register_broker()
    h.send(h.create("a"))
    h.commit()
    read = list_topics(h)
    h.send(read)
    h.send(h.create("b"))  # appended, not committed
    h.machine.reads_confirmed([(read.id, h.machine.committed_offset)])
    [answer] = h.step()
    assert isinstance(answer, Answer) and answer.value == ("a",)
    assert answer.read_offset == h.machine.committed_offset


def test_reads_waiting_for_confirmation_fail_not_controller_on_leadership_loss() -> None:
    h = Harness()
    h.elect_me()
    read = list_topics(h)
    h.send(read)
    h.log.elect(OTHER)
    h.machine.leader_changed(OTHER, h.log.epoch, h.now)
    [failed] = h.step()
    assert isinstance(failed, Fail) and isinstance(failed.error, NotControllerError)
    assert failed.error.leader_id == OTHER
    # A confirmation that arrives late is ignored.
    h.machine.reads_confirmed([(read.id, 0)])
    assert h.step() == []


def test_a_stale_read_is_answered_at_once_by_a_standby_with_its_offset() -> None:
    h = Harness()
    h.log.elect(OTHER)
    h.machine.leader_changed(OTHER, h.log.epoch, h.now)
    h.commit()
    linearizable = h.send(list_topics(h))
    assert len(linearizable) == 1 and isinstance(linearizable[0], Fail)
    [answer] = h.send(list_topics(h, ReadConsistency.STALE))
    assert isinstance(answer, Answer) and answer.value == ()
    assert answer.read_offset == h.machine.committed_offset == h.log.end


# ---------------------------------------------------------------- exactly-once writes

def remembered_create(h: Harness, name: str, request_id: str,
                      method: str = "CreateTopics") -> Request:
    """A create as the API sends it: with a request id and the answer's codec (named
    `method`: a create under another RPC's name reuses the id for another method)."""
    h.ids += 1
    args = Args((CreatableTopic(name, 1, 1),))
    return Request(h.ids, attrs.evolve(CREATE_TOPICS, name=method), args,
                   StateContext(h.machine.state), h.now,
                   origin=BatchOrigin("User:test", "test", request_id),
                   codec=ADMIN_RPCS_BY_NAME["CreateTopics"].codec(args))


def test_a_retry_of_a_committed_write_gets_the_first_answer_and_does_nothing() -> None:
    h = Harness()
    h.elect_me()
    h.register_broker()
    h.send(remembered_create(h, "a", "req-a"))
    [first] = h.commit()
    assert isinstance(first, Answer) and first.value[0].error.ok
    batches = len(h.log.batches)
    [again] = h.send(remembered_create(h, "a", "req-a"))
    assert isinstance(again, Answer) and again.value == first.value  # not TOPIC_ALREADY_EXISTS
    assert len(h.log.batches) == batches, "the retry appended nothing"
    # Another id is another request: the topic exists now (nothing to append).
    [other] = h.send(remembered_create(h, "a", "req-other"))
    assert isinstance(other, Answer) and other.value[0].error.code.value == \
        "TOPIC_ALREADY_EXISTS"


def test_a_retry_of_an_uncommitted_write_is_answered_when_it_commits() -> None:
    h = Harness()
    h.elect_me()
    h.register_broker()
    assert h.send(remembered_create(h, "a", "req-a")) == []
    assert h.send(remembered_create(h, "a", "req-a")) == []  # joins the first
    out = h.commit()
    assert len(out) == 2 and all(isinstance(o, Answer) and o.value[0].error.ok for o in out)
    assert sum(1 for b in h.log.batches if b.origin.request_id == "req-a") == 1


def test_the_next_leader_answers_a_retry_from_the_replicated_table() -> None:
    h = Harness()
    h.elect_me()
    h.register_broker()
    h.send(remembered_create(h, "a", "req-a"))
    [first] = h.commit()
    # Another controller, fed the same committed log, takes over.
    other = Harness()
    other.log = h.log
    other.node = Node(h.log, OTHER)
    other.machine = ControllerMachine(
        ControllerSettings(node_id=OTHER, cluster_id="c", voter_addresses={
            ME: "h:1", OTHER: "h:2"}), rng=random.Random(1))
    other.machine.committed(h.log.batches, other.now)
    h.log.elect(OTHER)
    other.machine.leader_changed(OTHER, h.log.epoch, other.now)
    other.commit()
    assert other.machine.mode is Mode.ACTIVE
    [again] = other.send(remembered_create(other, "a", "req-a"))
    assert isinstance(again, Answer) and again.value == first.value


def test_below_metadata_version_4_no_request_result_is_written() -> None:
    h = Harness(bootstrap_metadata_version=3)
    h.elect_me()
    h.register_broker()
    h.send(remembered_create(h, "a", "req-a"))
    [first] = h.commit()
    assert isinstance(first, Answer) and first.value[0].error.ok
    written = {decode_record(r).WhichOneof("record") for b in h.log.batches for r in b.records
               if not b.is_control}
    assert "request_result" not in written
    # A retry is not recognised at this level: it runs again (at-least-once).
    [again] = h.send(remembered_create(h, "a", "req-a"))
    assert isinstance(again, Answer) and again.value[0].error.code.value == \
        "TOPIC_ALREADY_EXISTS"
    # Raised to 4, the table is on.
    state = h.machine.state
    h.ids += 1
    h.send(Request(h.ids, UPDATE_FEATURES, Args((FeatureUpdate(METADATA_VERSION, 4),)),
                   StateContext(state), h.now))
    h.commit()
    h.send(remembered_create(h, "b", "req-b"))
    h.commit()
    [retried] = h.send(remembered_create(h, "b", "req-b"))
    assert isinstance(retried, Answer) and retried.value[0].error.ok


def record_types(h: Harness) -> list[str | None]:
    return [decode_record(r).WhichOneof("record") for b in h.log.batches if not b.is_control
            for r in b.records]


@pytest.mark.parametrize(("level", "expect_no_ops"), [(6, True), (5, False)])
def test_an_idle_active_controller_appends_no_ops_from_level_6(level: int,
                                                                expect_no_ops: bool) -> None:
    h = Harness(bootstrap_metadata_version=level)
    h.elect_me()
    h.commit()
    before = record_types(h)
    h.now += 400
    h.machine.tick(h.node, h.now)  # not idle long enough
    assert record_types(h) == before
    h.now += 200
    h.machine.tick(h.node, h.now)
    h.commit()
    added = record_types(h)[len(before):]
    assert added == (["no_op"] if expect_no_ops else [])
    # Other writes keep the log moving: no no-op right after one.
    h.send(h.create("t"))
    h.commit()
    h.now += 100
    h.machine.tick(h.node, h.now)
    assert "no_op" not in record_types(h)[len(before) + len(added):]


def test_an_idle_machine_asks_for_a_tick_only_when_a_timer_is_due() -> None:
    """`next_tick_ms`: idle, the next no-op or broker session expiry (at most a second
    away); within `tick_interval_ms` while an answer waits for a commit. A tick
    before the time finds nothing due; at it, the due thing happens."""
    h = Harness()
    assert h.machine.next_tick_ms(h.now) == h.now + IDLE_TICK_MS  # a standby
    h.elect_me()
    h.commit()
    idle_ms = h.machine.settings.metadata_max_idle_interval_ms
    no_op_due = h.machine.next_tick_ms(h.now)
    assert h.now < no_op_due <= h.now + idle_ms
    before = record_types(h)
    h.now = no_op_due - 1
    h.machine.tick(h.node, h.now)
    assert record_types(h) == before
    h.now = no_op_due
    h.machine.tick(h.node, h.now)
    assert record_types(h)[len(before):] == ["no_op"]
    h.commit()
    # A live broker: its session expiry is a deadline too (here sooner than the no-op).
    h.machine.settings = attrs.evolve(h.machine.settings, metadata_max_idle_interval_ms=0)
    h.machine.state.cluster.session_timeout_ms = 300
    h.register_broker()
    # A write waits for its commit: the machine ticks at the short interval.
    h.machine.request(h.create("t"), h.node, h.now)
    assert h.machine.next_tick_ms(h.now) == h.now + h.machine.settings.tick_interval_ms
    h.commit()
    h.machine.tick(h.node, h.now)
    contact = h.machine.state.cluster.heartbeat_state(7).last_contact_ms  # type: ignore[union-attr]
    fence_due = h.machine.next_tick_ms(h.now)
    assert fence_due == contact + 300 + 1
    written = len(record_types(h))
    h.now = fence_due - 1
    h.machine.tick(h.node, h.now)
    assert len(record_types(h)) == written
    h.now = fence_due
    h.machine.tick(h.node, h.now)
    # The fence (and its partition's leader change before it).
    assert record_types(h)[written:] == ["partition_change", "broker_registration_change"]
    h.commit()
    # No unfenced broker left: a broker unfenced from now on expires a session after
    # its heartbeat at the earliest (the bound when that is sooner than the idle tick).
    h.machine.tick(h.node, h.now)
    assert h.machine.state.cluster.session_deadline_ms is None
    assert h.machine.next_tick_ms(h.now) == h.now + 300 + 1
    h.machine.state.cluster.session_timeout_ms = 60_000
    assert h.machine.next_tick_ms(h.now) == h.now + IDLE_TICK_MS


def test_a_request_id_reused_by_another_method_is_refused() -> None:
    h = Harness()
    h.elect_me()
    h.register_broker()
    h.send(remembered_create(h, "a", "req-a"))
    h.commit()
    [refused] = h.send(remembered_create(h, "b", "req-a", method="DeleteTopics"))
    assert isinstance(refused, Fail) and isinstance(refused.error, RequestIdReusedError)


class CountingSnapshots:
    """A SnapshotPolicy that starts a job only when told to (`snapshot_next`)."""

    def __init__(self) -> None:
        self.started: list[int] = []
        self._next = False

    def committed(self, batch_bytes: int, committed_next: int, epoch: int,
                  now_ms: int) -> bool:
        if self._next:
            self._next = False
            self.started.append(committed_next - 1)
            return True
        return False

    @property
    def pinned_offset(self) -> int | None:
        return None

    def reset(self) -> None:
        self._next = False

    def snapshot_next(self) -> None:
        self._next = True


def test_an_unsafe_downgrade_is_followed_by_a_snapshot_at_once() -> None:
    from controller.metadata import UpgradeType

    h = Harness()
    snapshots = CountingSnapshots()
    h.machine.snapshots = snapshots
    h.elect_me()
    h.register_broker()
    assert snapshots.started == []  # raising or setting a level is no reason
    state = h.machine.state
    h.ids += 1
    h.send(Request(h.ids, UPDATE_FEATURES, Args((FeatureUpdate(
        METADATA_VERSION, 3, UpgradeType.UNSAFE_DOWNGRADE),)), StateContext(state), h.now))
    h.commit()
    assert snapshots.started == [h.log.end - 1]


def test_a_read_waits_for_its_min_offset_then_answers_or_says_how_far_behind() -> None:
    """Session consistency: a read names the newest offset its client has seen; a
    controller that has not applied that far waits (it never answers older state),
    and past `stale_read_wait_ms` refuses, naming how far behind it is."""
    from controller.api.seam import BehindError

    h = Harness()
    h.elect_me()
    h.register_broker()
    end = h.machine.committed_offset
    h.ids += 1
    ahead = Request(h.ids, LIST_TOPIC_NAMES, Args(), StateContext(h.machine.state), h.now,
                    consistency=ReadConsistency.STALE, min_offset=end + 1)
    assert h.send(ahead) == []  # not applied that far yet: it waits
    create = h.create("orders")
    assert h.send(create) == []
    answers = {a.request_id: a for a in h.commit()}
    read = answers[ahead.id]
    assert isinstance(read, Answer) and read.value == ("orders",)
    assert read.read_offset is not None and read.read_offset >= end + 1
    # The write's answer names the committed end that covers it (what a client sends
    # as its next min_offset).
    written = answers[create.id]
    assert isinstance(written, Answer) and written.read_offset == h.machine.committed_offset
    # Asked for an offset nobody has reached: refused once the wait is over.
    h.ids += 1
    far = Request(h.ids, LIST_TOPIC_NAMES, Args(), StateContext(h.machine.state), h.now,
                  consistency=ReadConsistency.STALE, min_offset=h.machine.committed_offset + 50)
    assert h.send(far) == []
    h.machine.tick(h.node, h.now + h.machine.settings.stale_read_wait_ms - 20)
    assert h.step() == []
    h.machine.tick(h.node, h.now + h.machine.settings.stale_read_wait_ms)
    [refused] = h.step()
    assert isinstance(refused, Fail) and isinstance(refused.error, BehindError)
    assert refused.error.applied_offset == h.machine.committed_offset
    assert "50 short of the requested min_offset" in str(refused.error)
    # A linearizable read waits the same way.
    h.ids += 1
    lin = Request(h.ids, LIST_TOPIC_NAMES, Args(), StateContext(h.machine.state), h.now,
                  min_offset=h.machine.committed_offset)
    h.send(lin)
    h.machine.reads_confirmed([(lin.id, h.machine.committed_offset)])
    [confirmed] = h.step()
    assert isinstance(confirmed, Answer) and confirmed.value == ("orders",)
