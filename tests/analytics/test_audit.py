"""Every audit answer checked against the scripted history and the controller's replay."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import analytics
from analytics import audit
from tests.analytics.history import C1, C2, Known
from tests.analytics.replay import replay_steps

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def df(spark: Any, log_dir: tuple[Path, Known]) -> Any:
    frame = analytics.load(spark, str(log_dir[0]))
    return frame.cache()


def test_topic_lifecycle_who_when_epoch(df: Any, log_dir: tuple[Path, Known]) -> None:
    known = log_dir[1]
    rows = [(r.topic_name, r.event, r.partitions, r.principal, r.epoch, r.request_id)
            for r in audit.topic_lifecycle(df).collect()]
    assert rows == [
        ("orders", "created", 3, "alice", 1, "req-a1"),
        ("logs", "created", 2, "bob", 1, "req-b1"),
        ("fragile", "created", 1, "alice", 1, "req-a2"),
        ("orders", "partitions_added", 1, "alice", 1, "req-a5"),
        ("logs", "deleted", 0, "bob", known.failover_epoch, "req-b3"),
    ]


def test_partition_states_equal_replay_after_every_record(
        df: Any, log_dir: tuple[Path, Known]) -> None:
    got = {(r.offset): r for r in audit.partition_states(df).collect()}
    checked = 0
    before: dict[tuple[str, int], Any] = {}  # each partition's replayed state so far
    for offset, rec, state in replay_steps(log_dir[0]):
        kind = rec.WhichOneof("record")
        if kind not in ("partition", "partition_change"):
            continue
        payload = getattr(rec, kind)
        key = (payload.topic_id, payload.partition_id)
        want = state.replication.partition(*key)
        row = got[offset]
        assert want is not None
        assert (row.replicas, row.isr, row.leader, row.leader_epoch, row.partition_epoch,
                row.adding_replicas, row.removing_replicas, row.elr) == (
            list(want.replicas), list(want.isr), want.leader, want.leader_epoch,
            want.partition_epoch, list(want.adding_replicas), list(want.removing_replicas),
            list(want.elr)), offset
        # The prev_* columns are the same partition's state before this record.
        prev = before.get(key)
        assert row.reassigning == bool(want.adding_replicas or want.removing_replicas)
        assert (row.prev_leader, row.prev_isr, row.prev_leader_epoch,
                row.prev_partition_epoch, row.prev_reassigning) == (
            (None,) * 5 if prev is None else (
                prev.leader, list(prev.isr), prev.leader_epoch, prev.partition_epoch,
                bool(prev.adding_replicas or prev.removing_replicas))), offset
        before[key] = want
        checked += 1
    assert checked == len(got) > 20
    assert any(r.reassigning for r in got.values())  # the history reassigns


def test_partition_states_of_a_range_without_topic_records_keep_their_ids(
        spark: Any, df: Any, log_dir: tuple[Path, Known]) -> None:
    # Read from after the first topics were created: their Topic records are not in
    # the range, so they have no name and travel by id (not by index) in the states.
    full = {r.offset: r for r in audit.partition_states(df).collect()}
    topic_offsets = sorted(r.offset for r in df.where("record_type = 'topic'").collect())
    start = topic_offsets[1] + 1
    ranged = analytics.read_log(spark, str(log_dir[0]), startOffset=start)
    got = audit.partition_states(ranged).collect()
    assert got and all(r.offset >= start for r in got)
    named_in_range = {r.topic_id for r in ranged.where("record_type = 'topic'").collect()}
    assert {r.topic_id for r in got} - named_in_range  # some topics come without a name
    for r in got:
        want = full[r.offset]
        assert (r.topic_id, r.partition_id) == (want.topic_id, want.partition_id)
        assert r.topic_name == (want.topic_name if r.topic_id in named_in_range else None)
    # Each partition is its own group: a row's previous ISR is the last ISR set before
    # it in the range for that same partition.
    last_isr: dict[tuple[str, int], Any] = {}
    for r in sorted(got, key=lambda r: r.offset):
        key = (r.topic_id, r.partition_id)
        assert r.prev_isr == last_isr.get(key), r.offset
        last_isr[key] = r.isr


def _replayed_leader_moves(root: Path) -> list[tuple[int, str, int, int, int]]:
    """(offset, topic_id, partition, old leader, new leader) from the replay."""
    moves, leaders = [], {}
    for offset, rec, state in replay_steps(root):
        kind = rec.WhichOneof("record")
        if kind not in ("partition", "partition_change"):
            continue
        p = getattr(rec, kind)
        now = state.replication.partition(p.topic_id, p.partition_id)
        assert now is not None
        key = (p.topic_id, p.partition_id)
        if key in leaders and leaders[key] != now.leader:
            moves.append((offset, p.topic_id, p.partition_id, leaders[key], now.leader))
        leaders[key] = now.leader
    return moves


def test_leader_history_and_churn(df: Any, log_dir: tuple[Path, Known]) -> None:
    moves = _replayed_leader_moves(log_dir[0])
    hist = audit.leader_history(df).where("prev_leader IS NOT NULL").collect()
    assert [(r.offset, r.topic_id, r.partition_id, r.prev_leader, r.leader) for r in hist] == moves
    per_part = Counter((m[1], m[2]) for m in moves)
    churn = {(r.topic_id, r.partition_id): r.leader_changes
             for r in audit.leader_churn_per_partition(df).collect()}
    assert churn == dict(per_part)
    gained = Counter(m[4] for m in moves if m[4] >= 0)
    lost = Counter(m[3] for m in moves if m[3] >= 0)
    per_broker = {r.broker_id: (r.gained, r.lost)
                  for r in audit.leader_churn_per_broker(df).collect()}
    assert per_broker == {b: (gained[b], lost[b]) for b in set(gained) | set(lost)}


def test_isr_shrinks_and_expansions(df: Any, log_dir: tuple[Path, Known]) -> None:
    rows = audit.isr_changes(df).collect()
    # Broker 2 died in epoch 1: every ISR it was in shrank, by the controller itself.
    first = [r for r in rows if r.epoch == 1]
    assert first and all(r.kind == "shrink" and r.removed == [2] and r.principal is None
                         for r in first)
    # ...and it came back under the new controller, expanding the same ISRs.
    back = [r for r in rows if r.principal == "broker-2"]
    assert {(r.topic_id, r.partition_id) for r in back} == {
        (r.topic_id, r.partition_id) for r in first}
    assert all(r.kind == "expand" and r.added == [2] for r in back)
    assert Counter(r.kind for r in rows)["both"] == 2  # reassignment end, unclean election


def test_isr_incidents_group_a_brokers_outage(df: Any, log_dir: tuple[Path, Known]) -> None:
    changes = audit.isr_changes(df).collect()
    incidents = audit.isr_incidents(df).collect()
    # The three brokers that failed (2, then 3, then 1), one incident each, each back in
    # every ISR it left; not one row per partition. A replica dropped by the
    # reassignment (broker 0 from logs-0) is not an outage.
    assert [(r.broker_id, r.outcome) for r in incidents] == [
        (2, "recovered"), (3, "recovered"), (1, "recovered")]
    assert len(incidents) < len(changes)
    broker2 = incidents[0]
    shrunk = {(r.topic_id, r.partition_id) for r in changes if r.epoch == 1}
    assert broker2.partitions_left == broker2.partitions_rejoined == len(shrunk)
    assert broker2.start_offset == min(r.offset for r in changes if r.epoch == 1)
    assert broker2.end_offset == max(r.offset for r in changes if r.principal == "broker-2")
    assert broker2.duration_s > 0


def test_broker_timeline_and_fencing(df: Any, log_dir: tuple[Path, Known]) -> None:
    known = log_dir[1]
    events = [(r.broker_id, r.event, r.principal) for r in audit.broker_timeline(df).collect()
              if r.event in ("fenced", "unfenced") and r.offset > 9]
    assert events == [(2, "fenced", None), (2, "unfenced", "broker-2"), (3, "fenced", None),
                      (1, "fenced", None), (3, "unfenced", "broker-3"),
                      (1, "unfenced", "broker-1")]
    regs = {r.broker_id: r.broker_epoch for r in audit.broker_timeline(df).collect()
            if r.event == "registered"}
    assert regs == known.broker_epochs
    intervals = [(r.broker_id, r.cause, r.ended_by) for r in audit.fencing_intervals(df).collect()
                 if r.cause == "fenced"]
    assert intervals == [(2, "fenced", "unfenced"), (3, "fenced", "unfenced"),
                         (1, "fenced", "unfenced")]


def test_config_history_old_to_new(df: Any) -> None:
    rows = [(r.resource_type, r.resource_name, r.key, r.old_value, r.new_value, r.op,
             r.principal) for r in audit.config_history(df).collect()]
    assert rows == [
        ("topic", "orders", "retention.ms", None, "1000", "set", "alice"),
        ("topic", "orders", "retention.ms", "1000", "2000", "set", "alice"),
        ("topic", "orders", "retention.ms", "2000", None, "delete", "alice"),
    ]


def test_reassignment_start_end_duration(df: Any, log_dir: tuple[Path, Known]) -> None:
    # Each kind the log can hold: a move with a copy phase, a move within the ISR
    # (one record: found from outside, the audit used to report "none" for it), and
    # a cancelled one.
    rows = audit.reassignments(df).collect()
    assert [(r.topic_name, r.partition_id, r.outcome) for r in rows] == [
        ("logs", 0, "completed"), ("fragile", 0, "completed"), ("orders", 0, "cancelled")]
    phased, direct, cancelled = rows
    assert (phased.original, phased.target, phased.started_by) == ([0, 1], [1, 3], "bob")
    assert phased.end_offset > phased.start_offset
    assert phased.duration_s == pytest.approx(2.0)
    assert (direct.original, direct.target, direct.started_by) == ([1, 3], [3, 1], "bob")
    assert direct.end_offset == direct.start_offset and direct.duration_s == 0
    original, target = log_dir[1].cancelled
    assert (cancelled.original, cancelled.target, cancelled.started_by) == (
        list(original), list(target), "alice")
    assert cancelled.end_offset > cancelled.start_offset


def test_elections_per_epoch_and_unclean(df: Any, log_dir: tuple[Path, Known]) -> None:
    known = log_dir[1]
    moves = _replayed_leader_moves(log_dir[0])
    rows = audit.elections_per_epoch(df).collect()
    assert [(r.epoch, r.controller_id) for r in rows] == [(1, C1), (known.failover_epoch, C2)]
    assert sum(r.partition_leader_changes for r in rows) == len(moves)
    assert [r.unclean_elections for r in rows] == [0, 1]
    unclean = audit.unclean_elections(df).collect()
    assert [(r.topic_name, r.partition_id, r.leader, r.isr, r.principal) for r in unclean] == [
        ("fragile", 0, 3, [3], "alice")]


def test_records_per_type_over_time(df: Any, log_dir: tuple[Path, Known]) -> None:
    want = Counter(rec.WhichOneof("record") for _, rec, _ in replay_steps(log_dir[0]))
    rows = audit.records_per_type(df, "1 minute").collect()
    got: Counter[str] = Counter()
    for r in rows:
        got[r.record_type] += r.records
    assert got == want
    assert len({r.bucket_start for r in rows}) >= 2


def test_typed_partition_columns_equal_the_json(df: Any) -> None:
    """The data source's typed partition columns (what `partition_states` reads) hold
    the values of the record's JSON on every Partition/PartitionChange record (null
    where a change record does not set the field), and null on every other record."""
    from pyspark.sql import functions as F

    from analytics.schema import PARTITION_FIELD_COLUMNS

    part = F.from_json("record_json", audit.PARTITION_JSON)["fields"]
    change = F.from_json("record_json", audit.CHANGE_JSON)["fields"]
    kind = F.col("record_type")
    want = []
    for name in PARTITION_FIELD_COLUMNS:
        from_change = (change[name]["ids"] if name.endswith("replicas") or name == "isr"
                       else change[name] if name in ("leader", "leader_recovery_state")
                       else F.lit(None))
        want.append(F.when(kind == "partition", part[name])
                    .when(kind == "partition_change", from_change).alias(name))
    cols = ["offset", *PARTITION_FIELD_COLUMNS]
    got = df.select(*cols).orderBy("offset").collect()
    expected = df.select("offset", *want).orderBy("offset").collect()
    assert [tuple(r) for r in got] == [tuple(r) for r in expected]
    assert any(r.leader == -1 for r in got) and any(r.adding_replicas == [] for r in got)
    assert any(r.leader_recovery_state == audit.RECOVERING for r in got)
