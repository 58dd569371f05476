"""The loader's I/O side: snapshot files read into images, and the `CommitListener`
that connects the broker's `RaftDriver` to the pure `MetadataLoader`."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from broker_agent.delta import SnapshotPartition, build_image_from_bytes
from broker_agent.image import MetadataImage
from broker_agent.loader import MetadataLoader
from controller.gc_policy import gc_paused
from controller.logformat import RecordBatch, SnapshotId
from controller.quorum.contracts import CommitListener
from controller.storage import snapshot_file as sf


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


def monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


class LoaderListener(CommitListener):
    """Feeds the driver's events to the loader; reads the snapshot files it names."""

    def __init__(self, loader: MetadataLoader,
                 prewriter: SnapshotPrewriter | None = None) -> None:
        self.loader = loader
        self.prewriter = prewriter

    def load_latest_snapshot(self, directory: Path) -> None:
        """Before the driver starts: the log begins at the newest snapshot, so must we."""
        latest = sf.latest_snapshot(directory)
        if latest is not None:
            self.loader.start_from(read_snapshot_image(
                directory / latest.file_name, latest.end_offset, self.prewriter))

    def on_commit(self, batches: Sequence[RecordBatch]) -> None:
        self.loader.on_commit(batches)

    def on_leader_change(self, leader_id: int | None, epoch: int) -> None:
        self.loader.on_leader_change(leader_id, epoch)

    def on_snapshot_loaded(self, snapshot_id: SnapshotId, path: Path) -> None:
        self.loader.snapshot_loaded(read_snapshot_image(path, snapshot_id.end_offset,
                                                        self.prewriter))
