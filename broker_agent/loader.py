"""The metadata loader: a Raft observer's committed batches → images → publishers.

`MetadataLoader` is pure (no clock, no files): it takes committed batches, leader
changes and whole images (a snapshot someone else read), and calls its publisher.
The broker daemon feeds it through `snapshot_load.LoaderListener`, the
`CommitListener` of its `RaftDriver` (an observer: its node id is not a voter);
the whole-system simulation feeds the same class directly. It only ever sees
committed batches (the driver hands over nothing above the high watermark), so the
broker never acts on a record the quorum may still discard.

Start-up: the image starts at the newest local snapshot (the log starts there), then
every committed batch is replayed into it, but nothing is published until the
loader has caught up: it has applied everything up to the high watermark the
leader reported in the first successful fetch response (`fetched_high_watermark`),
and at least up to the offset the local state already reflects
(`min_start_offset`). Then the publisher gets the whole image once (`publish_full`:
reconcile against disk) and one delta per committed batch after. A snapshot
fetched from the leader (we were behind its log start) replaces the image and is
published whole again.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from broker_agent.delta import ImageChanges, MetadataDelta
from broker_agent.image import MetadataImage
from controller.log import get_logger
from controller.logformat import RecordBatch
from controller.records import decode_record

log = get_logger("metakraft.broker")


class ImagePublisher(Protocol):
    def publish_full(self, image: MetadataImage) -> None:
        """The whole image (first publication, or after a snapshot load)."""

    def publish_delta(self, previous: MetadataImage, image: MetadataImage,
                      changes: ImageChanges) -> None:
        """One committed batch's changes."""


class MetadataLoader:
    def __init__(self, publisher: ImagePublisher,
                 fetched_high_watermark: Callable[[], int] | None = None,
                 *, clock_ms: Callable[[], int] | None = None) -> None:
        self.publisher = publisher
        self.image = MetadataImage.empty()
        # Supplied once the driver exists (it needs this loader's listener first).
        self._fetched_hw = fetched_high_watermark
        self._catch_up_target: int | None = None
        # The offset the local state already reflects (from the data dir): never
        # publish an older image than that at start-up.
        self.min_start_offset = -1
        self.caught_up = False
        self.leader_id: int | None = None
        # Only for the catch-up log line: how long start-up took.
        self._clock_ms = clock_ms
        self._started_ms = None if clock_ms is None else clock_ms()
        self.batches_applied = 0

    def bind(self, fetched_high_watermark: Callable[[], int]) -> None:
        self._fetched_hw = fetched_high_watermark

    @property
    def applied_offset(self) -> int:
        """The last committed offset in the image (-1: none)."""
        return self.image.offset

    # ---------------------------------------------------------------- stimuli

    def on_commit(self, batches: Sequence[RecordBatch]) -> None:
        for batch in batches:
            if batch.last_offset <= self.image.offset:
                continue  # covered by the snapshot we started from
            previous = self.image
            delta = MetadataDelta(previous)
            if not batch.is_control:
                delta.replay_batch((decode_record(r) for r in batch.records), batch.base_offset)
            self.image, changes = delta.apply()
            # Control batches advance the offset too (the heartbeat reports it).
            self.image = _with_offset(self.image, batch.last_offset)
            self.batches_applied += 1
            if self.caught_up and not changes.empty:
                self.publisher.publish_delta(previous, self.image, changes)
        self.check_caught_up()

    def on_leader_change(self, leader_id: int | None, epoch: int) -> None:
        self.leader_id = leader_id
        log.info("metadata_leader", leader=leader_id, epoch=epoch)

    def start_from(self, image: MetadataImage) -> None:
        """Before the first batch: the image of the snapshot the local log starts at."""
        assert self.batches_applied == 0 and not self.caught_up
        self.image = image
        log.info("snapshot_loaded", source="local", end_offset=image.offset + 1,
                 partitions=image.partition_count())

    def snapshot_loaded(self, image: MetadataImage) -> None:
        """A snapshot fetched from the leader replaces the image."""
        self.image = image
        log.info("snapshot_loaded", source="leader", end_offset=image.offset + 1,
                 partitions=image.partition_count())
        if self.caught_up:
            self.publisher.publish_full(self.image)
        else:
            self.check_caught_up()

    # ---------------------------------------------------------------- catching up

    def check_caught_up(self) -> bool:
        """Publish the whole image the first time we reach the start-up target."""
        if self.caught_up:
            return True
        if self._catch_up_target is None:
            hw = -1 if self._fetched_hw is None else self._fetched_hw()
            if hw < 0:
                return False  # no fetch answered yet: we do not know how far to go
            self._catch_up_target = max(hw, self.min_start_offset + 1)
        # The high watermark is an end offset (exclusive); ours is the last applied.
        if self.image.offset + 1 < self._catch_up_target:
            return False
        self.caught_up = True
        took = None if self._clock_ms is None or self._started_ms is None \
            else self._clock_ms() - self._started_ms
        log.info("caught_up", offset=self.image.offset, target=self._catch_up_target, ms=took)
        self.publisher.publish_full(self.image)
        return True


def _with_offset(image: MetadataImage, offset: int) -> MetadataImage:
    if image.offset == offset:
        return image
    return MetadataImage(offset, image.topics, image.topic_ids, image.brokers, image.configs,
                         image.features)
