"""The controller's own replay of the test log, record by record (the reference)."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

from controller.logformat.batch import RecordBatch, iter_batches
from controller.metadata import MetadataState
from controller.records import MetadataRecord, decode_record
from tests.analytics.history import CLUSTER_ID, SESSION_MS


def batches(root: Path) -> list[RecordBatch]:
    out: list[RecordBatch] = []
    for seg in sorted((root / "metadata").glob("*.log")):
        out.extend(iter_batches(seg.read_bytes()))
    return out


def replay_steps(root: Path) -> Iterator[tuple[int, MetadataRecord, MetadataState]]:
    """(offset, record, state after it) for every record; control records are not
    replayed (the state is yielded unchanged). The same state object is reused."""
    state = MetadataState(cluster_id=CLUSTER_ID, rng=random.Random(0),
                          session_timeout_ms=SESSION_MS)
    for batch in batches(root):
        for i, raw in enumerate(batch.records):
            rec = decode_record(raw)
            if not batch.is_control:
                state.replay(rec, batch.base_offset + i)
            yield batch.base_offset + i, rec, state


def state_at(root: Path, offset: int) -> MetadataState:
    """A fresh state replaying every record at offsets <= `offset`."""
    state = MetadataState(cluster_id=CLUSTER_ID, rng=random.Random(0),
                          session_timeout_ms=SESSION_MS)
    for batch in batches(root):
        if batch.is_control:
            continue
        for i, raw in enumerate(batch.records):
            if batch.base_offset + i <= offset:
                state.replay(decode_record(raw), batch.base_offset + i)
    return state
