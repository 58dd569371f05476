"""The leader's ISR reports without I/O (`IsrReporter.proposals` / `answered`): what an
answer proves decides whether the proposal may be dropped.

Found by the whole-system simulation: a report whose call failed was dropped, the
controller had committed it anyway, and the leader's high watermark then passed
records the new ISR member did not have (acknowledged, then lost when that member
was elected). A proposal stays pending, counted by the high watermark, until the
controller refuses it at our partition epoch or the metadata brings the change.
"""

from __future__ import annotations

from pathlib import Path

import attrs

from broker_agent.replica.config import DataPlaneConfig
from broker_agent.replica.isr_reports import IsrReporter, Proposed
from broker_agent.replica.partition import PartitionReplica
from broker_agent.replica.records import DataRecord, encode_produce_batch
from controller.api import broker_pb2 as bpb
from controller.storage.log import LogConfig

LEADER, FOLLOWER = 1, 2
KEY = ("topic-id", 0)
CONFIG = DataPlaneConfig(replica_lag_time_max_ms=1_000)


@attrs.define
class Host:
    """The reporter's view of one broker (`IsrHost`)."""

    partitions: dict[tuple[str, int], PartitionReplica]
    broker_id: int = LEADER
    config: DataPlaneConfig = CONFIG
    metrics: None = None
    now_ms: int = 0

    def broker_epoch(self) -> int:
        return 10

    def clock_ms(self) -> int:
        return self.now_ms

    def may_join_isr(self, broker_id: int) -> bool:
        return True


def leader_with_a_caught_up_follower(tmp_path: Path) -> tuple[Host, PartitionReplica]:
    """Leader 1 of replicas (1, 2) with ISR (1,); broker 2 has fetched everything."""
    replica = PartitionReplica(LEADER, "t", KEY[0], KEY[1], tmp_path / "t-0", LogConfig())
    replica.become_leader(1, 1, (LEADER, FOLLOWER), (LEADER,), now_ms=0)
    append(replica, "a", "b")
    replica.read_for_follower(FOLLOWER, replica.log_end_offset, -1, 1 << 20, 0, broker_epoch=7)
    return Host({KEY: replica}), replica


def append(replica: PartitionReplica, *values: str) -> None:
    batch = encode_produce_batch([DataRecord(None, v.encode()) for v in values])
    replica.append_as_leader(batch, None, "", "", 0)
    assert replica.log is not None
    replica.log.flush()
    replica.maybe_advance_high_watermark()


def item_result(code: str, state_epoch: int | None = None) -> bpb.AlterPartitionResponse:
    response = bpb.AlterPartitionResponse(error=bpb.Error(code="NONE"))
    result = response.results.add(topic_id=KEY[0], partition=KEY[1], error=bpb.Error(code=code))
    if state_epoch is not None:
        result.state.partition_epoch = state_epoch
    return response


def propose(reporter: IsrReporter) -> tuple[bpb.AlterPartitionRequest, Proposed]:
    request, proposed = reporter.proposals()
    assert list(proposed) == [KEY], proposed
    return request, proposed


def test_a_report_of_unknown_outcome_stays_pending_and_is_sent_again(tmp_path: Path) -> None:
    host, replica = leader_with_a_caught_up_follower(tmp_path)
    reporter = IsrReporter(host)
    request, proposed = propose(reporter)
    (item,) = request.items
    assert [(m.broker_id, m.broker_epoch) for m in item.new_isr] == [(LEADER, 10),
                                                                     (FOLLOWER, 7)]
    assert replica.pending_isr == (LEADER, FOLLOWER)
    reporter.answered(proposed, None, "deadline exceeded")
    # It may have committed: the HW keeps counting broker 2, which has not fetched
    # the new records, so they are not acknowledged on the leader alone.
    assert replica.pending_isr == (LEADER, FOLLOWER)
    hw = replica.high_watermark
    append(replica, "c")
    assert replica.high_watermark == hw
    # Sent again, unchanged, next turn; a whole-request error is no answer either.
    again, proposed = propose(reporter)
    assert again.items[0] == item
    reporter.answered(proposed, bpb.AlterPartitionResponse(
        error=bpb.Error(code="NOT_CONTROLLER", message="moved")))
    again, proposed = propose(reporter)
    assert again.items[0] == item
    # The committed change arrives through the metadata: applied, nothing pending.
    replica.become_leader(1, 2, (LEADER, FOLLOWER), (LEADER, FOLLOWER), now_ms=0)
    assert replica.pending_isr is None
    assert reporter.proposals()[1] == {}


def test_a_refusal_at_our_partition_epoch_drops_the_proposal(tmp_path: Path) -> None:
    host, replica = leader_with_a_caught_up_follower(tmp_path)
    reporter = IsrReporter(host)
    _, proposed = propose(reporter)
    reporter.answered(proposed, item_result("INELIGIBLE_REPLICA"))
    assert replica.pending_isr is None  # not applied: the leader decides again
    _, proposed = propose(reporter)
    reporter.answered(proposed, item_result("INVALID_UPDATE_VERSION", state_epoch=1))
    assert replica.pending_isr is None


def test_a_refusal_naming_a_newer_partition_epoch_waits_for_the_metadata(
        tmp_path: Path) -> None:
    """The partition changed since we proposed (maybe by this very proposal, sent
    twice): only the metadata says what the ISR is now."""
    host, replica = leader_with_a_caught_up_follower(tmp_path)
    reporter = IsrReporter(host)
    _, proposed = propose(reporter)
    reporter.answered(proposed, item_result("INVALID_UPDATE_VERSION", state_epoch=2))
    assert replica.pending_isr == (LEADER, FOLLOWER)
    assert reporter.proposals()[1] == {}  # not sent again: the answer was definite


def test_an_accepted_report_waits_for_the_metadata_unless_already_applied(
        tmp_path: Path) -> None:
    host, replica = leader_with_a_caught_up_follower(tmp_path)
    reporter = IsrReporter(host)
    _, proposed = propose(reporter)
    reporter.answered(proposed, item_result("NONE", state_epoch=2))
    assert replica.pending_isr == (LEADER, FOLLOWER)  # committed, not here yet
    replica.become_leader(1, 2, (LEADER, FOLLOWER), (LEADER, FOLLOWER), now_ms=0)
    assert (replica.isr, replica.pending_isr) == ((LEADER, FOLLOWER), None)
    assert reporter.expands == 1
