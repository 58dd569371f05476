"""The metadata loader: a Raft observer's committed batches → images → publishers.

`MetadataLoader` is the `CommitListener` of the broker's `RaftDriver` (an observer:
its node id is not a voter). It only ever sees committed batches (the driver hands
over nothing above the high watermark), so the broker never acts on a record the
quorum may still discard.

Start-up: the image starts at the newest local snapshot (the log starts there), then
every committed batch is replayed into it, but nothing is published until the
loader has caught up: it has applied everything up to the high watermark the
leader reported in the first successful fetch response
(`RaftDriver.fetched_high_watermark`). Then the publisher gets the whole image once
(`publish_full`: reconcile against disk) and one delta per committed batch after.
A snapshot fetched from the leader (we were behind its log start) replaces the
image and is published whole again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

from broker_agent.bulk import gc_paused
from broker_agent.delta import (
    ImageChanges,
    MetadataDelta,
    SnapshotPartition,
    build_image_from_bytes,
)
from broker_agent.image import MetadataImage
from controller.logformat import RecordBatch, SnapshotId
from controller.quorum.driver import CommitListener
from controller.records import decode_record
from controller.storage import snapshot_file as sf

logger = logging.getLogger("metakraft.broker")


class ImagePublisher(Protocol):
    def publish_full(self, image: MetadataImage) -> None:
        """The whole image (first publication, or after a snapshot load)."""

    def publish_delta(self, previous: MetadataImage, image: MetadataImage,
                      changes: ImageChanges) -> None:
        """One committed batch's changes."""


class SnapshotPrewriter(Protocol):
    """Gets the partitions local to `broker_id` while a snapshot is still decoding
    (`BrokerAgent.prewrite`: their local state is written ahead of the full plan)."""

    broker_id: int

    def prewrite(self, partitions: list[SnapshotPartition]) -> None: ...


def read_snapshot_image(path: Path, end_offset: int,
                        prewriter: SnapshotPrewriter | None = None) -> MetadataImage:
    reader = sf.SnapshotReader.open(path)
    with gc_paused():
        if prewriter is None:
            return build_image_from_bytes(reader.records(), end_offset - 1)
        return build_image_from_bytes(reader.records(), end_offset - 1, prewriter.broker_id,
                                      prewriter.prewrite)


class MetadataLoader(CommitListener):
    def __init__(self, publisher: ImagePublisher,
                 fetched_high_watermark: Callable[[], int] | None = None) -> None:
        self.publisher = publisher
        self.image = MetadataImage.empty()
        # Supplied once the driver exists (it needs this listener first).
        self._fetched_hw = fetched_high_watermark
        self._catch_up_target: int | None = None
        # The offset the local state already reflects (from the data dir): never
        # publish an older image than that at start-up.
        self.min_start_offset = -1
        self.caught_up = False
        self.leader_id: int | None = None
        self.started_s = time.monotonic()
        self.batches_applied = 0
        # Set by the daemon: snapshot loads feed it the local partitions as they decode.
        self.prewriter: SnapshotPrewriter | None = None

    def bind(self, fetched_high_watermark: Callable[[], int]) -> None:
        self._fetched_hw = fetched_high_watermark

    @property
    def applied_offset(self) -> int:
        """The last committed offset in the image (-1: none)."""
        return self.image.offset

    def load_latest_snapshot(self, directory: Path) -> None:
        """Before the driver starts: the log begins at the newest snapshot, so must we."""
        latest = sf.latest_snapshot(directory)
        if latest is not None:
            self.image = read_snapshot_image(directory / latest.file_name, latest.end_offset,
                                             self.prewriter)
            logger.info("event=snapshot_loaded source=local end_offset=%d partitions=%d",
                        latest.end_offset, self.image.partition_count())

    # ---------------------------------------------------------------- CommitListener

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
        logger.info("event=metadata_leader leader=%s epoch=%d", leader_id, epoch)

    def on_snapshot_loaded(self, snapshot_id: SnapshotId, path: Path) -> None:
        self.image = read_snapshot_image(path, snapshot_id.end_offset, self.prewriter)
        logger.info("event=snapshot_loaded source=leader end_offset=%d partitions=%d",
                    snapshot_id.end_offset, self.image.partition_count())
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
        logger.info("event=caught_up offset=%d target=%d ms=%d", self.image.offset,
                    self._catch_up_target, int((time.monotonic() - self.started_s) * 1000))
        self.publisher.publish_full(self.image)
        return True


def _with_offset(image: MetadataImage, offset: int) -> MetadataImage:
    if image.offset == offset:
        return image
    return MetadataImage(offset, image.topics, image.topic_ids, image.brokers, image.configs,
                         image.features)
