"""Each invariant check holds on the real log and catches a violation planted in a copy."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import analytics
from analytics import invariants as inv
from controller.records import (
    BrokerIdList,
    PartitionChangeRecord,
    PartitionRecord,
    RegisterBrokerRecord,
)
from tests.analytics.history import Known
from tests.analytics.plant import copy_log, plant

pytestmark = pytest.mark.spark


def test_real_log_violates_nothing(spark: Any, log_dir: tuple[Path, Known]) -> None:
    df = analytics.load(spark, str(log_dir[0])).cache()
    for name, check in inv.INVARIANTS.items():
        assert check(df).count() == 0, name


def _planted(spark: Any, log_dir: tuple[Path, Known], tmp_path: Path, payloads: list[Any],
             **kw: Any) -> tuple[Any, int]:
    copy = copy_log(log_dir[0], tmp_path / "planted")
    base = plant(copy, payloads, **kw)
    return analytics.load(spark, str(copy)), base


def test_leader_outside_isr_is_caught(spark: Any, log_dir: tuple[Path, Known],
                                      tmp_path: Path) -> None:
    tid = log_dir[1].topic_ids["orders"]
    # orders-0 ends with ISR [2, 3, 1]; broker 0 is a registered broker but not in it.
    df, at = _planted(spark, log_dir, tmp_path,
                      [PartitionChangeRecord(topic_id=tid, partition_id=0, leader=0)])
    rows = inv.leader_in_isr_subset_replicas(df).collect()
    assert [(r.offset, r.violation) for r in rows] == [(at, "leader not in ISR")]


def test_unregistered_replica_is_caught(spark: Any, log_dir: tuple[Path, Known],
                                        tmp_path: Path) -> None:
    tid = log_dir[1].topic_ids["orders"]
    change = PartitionChangeRecord(topic_id=tid, partition_id=1,
                                   replicas=BrokerIdList(ids=[0, 2, 3, 9]))
    df, at = _planted(spark, log_dir, tmp_path, [change])
    rows = inv.replicas_registered(df).collect()
    assert [(r.offset, r.replica) for r in rows] == [(at, 9)]


def test_epoch_going_back_is_caught(spark: Any, log_dir: tuple[Path, Known],
                                    tmp_path: Path) -> None:
    tid = log_dir[1].topic_ids["orders"]
    restated = PartitionRecord(topic_id=tid, partition_id=2, replicas=[3, 0, 1],
                               isr=[0, 3, 1], leader=0, leader_epoch=0, partition_epoch=0)
    df, at = _planted(spark, log_dir, tmp_path, [restated])
    rows = inv.epochs_increase(df).collect()
    assert [(r.offset, r.leader_epoch, r.partition_epoch) for r in rows] == [(at, 0, 0)]
    assert rows[0].prev_leader_epoch > 0


def test_reference_to_removed_topic_is_caught(spark: Any, log_dir: tuple[Path, Known],
                                              tmp_path: Path) -> None:
    tid = log_dir[1].topic_ids["logs"]
    df, at = _planted(spark, log_dir, tmp_path,
                      [PartitionChangeRecord(topic_id=tid, partition_id=1, leader=2)])
    rows = inv.no_reference_after_removal(df).collect()
    assert [(r.offset, r.topic_name, r.record_type) for r in rows] == [
        (at, "logs", "partition_change")]


def test_raft_epoch_going_back_is_caught(spark: Any, log_dir: tuple[Path, Known],
                                         tmp_path: Path) -> None:
    # A batch of epoch 1 after the epoch-2 batches: epoch 2's records now precede it.
    df, at = _planted(spark, log_dir, tmp_path,
                      [PartitionChangeRecord(topic_id=log_dir[1].topic_ids["orders"],
                                             partition_id=0)], epoch=1)
    rows = inv.raft_epochs_monotonic(df).collect()
    assert rows and all(r.epoch == 2 and r.later_lower_epoch == 1 and r.offset < at
                        for r in rows)
    assert {r.offset for r in rows} == set(range(min(r.offset for r in rows), at))


def test_broker_epoch_not_registration_offset_is_caught(
        spark: Any, log_dir: tuple[Path, Known], tmp_path: Path) -> None:
    reg = RegisterBrokerRecord(broker_id=7, incarnation_id="rogue", broker_epoch=999,
                               fenced=True)
    df, at = _planted(spark, log_dir, tmp_path, [reg])
    rows = inv.broker_epoch_is_registration_offset(df).collect()
    assert [(r.broker_id, r.offset, r.broker_epoch) for r in rows] == [(7, at, 999)]


def test_cross_replica_first_divergence(spark: Any, log_dir: tuple[Path, Known],
                                        tmp_path: Path) -> None:
    root = log_dir[0]
    same = copy_log(root, tmp_path / "same")
    assert inv.first_divergence(spark, [str(root), str(same)]).count() == 0
    # A replica whose log diverges: its tail differs from offset `at` on.
    other = copy_log(root, tmp_path / "other")
    tail = plant(other, [RegisterBrokerRecord(broker_id=5, incarnation_id="x",
                                              broker_epoch=0, fenced=True)])
    planted_longer = copy_log(root, tmp_path / "longer")
    plant(planted_longer, [RegisterBrokerRecord(broker_id=6, incarnation_id="y",
                                                broker_epoch=0, fenced=True)])
    rows = inv.first_divergence(spark, [str(root), str(other), str(planted_longer)],
                                committed_offset=tail).collect()
    assert {r.offset for r in rows} == {tail}
    assert [r.record_type for r in rows] == [None, "register_broker", "register_broker"]
    # At or below an earlier committed offset they all agree.
    assert inv.first_divergence(spark, [str(other), str(planted_longer)],
                                committed_offset=tail - 1).count() == 0


def test_eligible_leader_replicas_are_audited(spark: Any, log_dir: tuple[Path, Known],
                                              tmp_path: Path) -> None:
    """KIP-966 in the audit: replicas that leave an ISR below min ISR join the ELR, an
    election from the ELR is named as such, and an ELR member also in the ISR breaks
    the partition invariant."""
    from analytics import audit
    from analytics.state import partitions_at

    tid = log_dir[1].topic_ids["orders"]  # orders-0: replicas and ISR 2, 3, 1
    elr = BrokerIdList
    df, at = _planted(spark, log_dir, tmp_path, [
        PartitionChangeRecord(topic_id=tid, partition_id=0, leader=2, isr=elr(ids=[2]),
                              eligible_leader_replicas=elr(ids=[3, 1])),
        PartitionChangeRecord(topic_id=tid, partition_id=0, leader=3, isr=elr(ids=[3]),
                              eligible_leader_replicas=elr(ids=[1, 2])),
        PartitionChangeRecord(topic_id=tid, partition_id=0,
                              eligible_leader_replicas=elr(ids=[1, 2, 3])),
    ])
    rows = audit.eligible_leader_replicas(df).collect()
    assert [(r.offset, r.prev_elr, r.elr, r.joined, r.left, r.leader, r.elected_from_elr)
            for r in rows] == [
        (at, [], [3, 1], [3, 1], [], 2, False),
        (at + 1, [3, 1], [1, 2], [2], [3], 3, True),
        (at + 2, [1, 2], [1, 2, 3], [3], [], 3, False)]
    bad = inv.leader_in_isr_subset_replicas(df).collect()
    assert [(r.offset, r.violation) for r in bad] == [
        (at + 2, "ELR not within replicas outside the ISR")]
    # What a state query at the end says.
    (part,) = [p for p in partitions_at(df, at + 2).collect()
               if p.topic_id == tid and p.partition_id == 0]
    assert (part.isr, part.elr) == ([3], [1, 2, 3])
