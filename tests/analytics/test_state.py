"""State at offset X equals the controller's own replay up to X (with and without snapshots)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import analytics
from analytics import state as st
from controller.metadata import MetadataState
from tests.analytics.history import Known
from tests.analytics.replay import state_at

pytestmark = pytest.mark.spark

_RESOURCE = {1: "topic", 2: "broker", 3: "cluster"}


def _expected(state: MetadataState) -> tuple[Any, ...]:
    image = state.to_image()
    topics = sorted((t.name, t.topic_id) for t in image.topics)
    parts = sorted(
        (t.name, i, list(p.replicas), list(p.isr), p.leader, p.leader_epoch, p.partition_epoch)
        for t in image.topics for i, p in enumerate(t.partitions))
    brokers = sorted((b.broker_id, b.broker_epoch, b.incarnation_id, b.fenced)
                     for b in image.brokers)
    configs = sorted((_RESOURCE[t], n, k, v) for t, n, k, v in image.configs)
    return topics, parts, brokers, configs


def _actual(df: Any, offset: int) -> tuple[Any, ...]:
    topics = sorted((r.topic_name, r.topic_id) for r in st.topics_at(df, offset).collect())
    parts = sorted((r.topic_name, r.partition_id, r.replicas, r.isr, r.leader, r.leader_epoch,
                    r.partition_epoch) for r in st.partitions_at(df, offset).collect())
    brokers = sorted((r.broker_id, r.broker_epoch, r.incarnation_id, r.fenced)
                     for r in st.brokers_at(df, offset).collect())
    configs = sorted((r.resource_type, r.resource_name, r.key, r.value)
                     for r in st.configs_at(df, offset).collect())
    return topics, parts, brokers, configs


def test_state_at_offsets_equals_replay(spark: Any, log_dir: tuple[Path, Known]) -> None:
    root, known = log_dir
    df = analytics.load(spark, str(root)).cache()
    for offset in (25, known.end_offset - 1):
        assert _actual(df, offset) == _expected(state_at(root, offset)), offset


def test_state_at_offset_from_snapshot_plus_log(spark: Any, log_dir: tuple[Path, Known]) -> None:
    root, known = log_dir
    df = analytics.load(spark, str(root), snapshots=True).cache()
    # Above the snapshot: snapshot + later records; at the snapshot: the snapshot alone.
    for offset in (known.snapshot_offset + 15,):
        assert _actual(df, offset) == _expected(state_at(root, offset)), offset
