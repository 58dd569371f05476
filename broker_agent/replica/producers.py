"""Idempotent producers: which batches each producer id already wrote to a partition.

Rebuilt from the log's batch stamps by every replica (records.py), so a new leader
still recognises a batch retried across a failover.
"""

from __future__ import annotations

from collections import deque

from broker_agent.replica import data_pb2 as dpb
from broker_agent.replica.errors import DataPlaneError
from broker_agent.replica.records import ProducerStamp

# Batches remembered per producer for duplicate detection (Kafka keeps 5).
PRODUCER_BATCHES_KEPT = 5


class ProducerTable:
    """Per producer id, the last batches it wrote: (first seq, last seq, base offset,
    last offset). A retry of one of them is a duplicate; anything but the next
    sequence after the last is out of order."""

    def __init__(self) -> None:
        self._batches: dict[int, deque[tuple[int, int, int, int]]] = {}

    def check(self, stamp: ProducerStamp, count: int) -> tuple[int, int] | None:
        """(base offset, last offset) of an already-written batch with this stamp;
        None when it is the next one; DataPlaneError when out of order."""
        kept = self._batches.get(stamp.producer_id)
        if not kept:
            return None  # a new producer (or one whose state expired) starts anywhere
        for first, last, base, last_offset in kept:
            if first == stamp.base_sequence and last == stamp.base_sequence + count - 1:
                return base, last_offset
        expected = kept[-1][1] + 1
        if stamp.base_sequence != expected:
            raise DataPlaneError(
                dpb.OUT_OF_ORDER_SEQUENCE_NUMBER,
                f"producer {stamp.producer_id}: sequence {stamp.base_sequence}, expected "
                f"{expected}; nothing was appended")
        return None

    def record(self, stamp: ProducerStamp, count: int, base_offset: int) -> None:
        kept = self._batches.setdefault(stamp.producer_id,
                                        deque(maxlen=PRODUCER_BATCHES_KEPT))
        kept.append((stamp.base_sequence, stamp.base_sequence + count - 1, base_offset,
                     base_offset + count - 1))

    def clear(self) -> None:
        self._batches.clear()

    def __len__(self) -> int:
        return len(self._batches)
