"""The loader publishes nothing until caught up, then one delta per committed batch."""

from __future__ import annotations

from pathlib import Path

from broker_agent.delta import ImageChanges
from broker_agent.image import MetadataImage
from broker_agent.loader import MetadataLoader
from broker_agent.snapshot_load import LoaderListener
from controller.logformat import EMPTY_ORIGIN, RecordBatch, SnapshotId
from controller.records import MetadataRecord, encode_record
from controller.storage import snapshot_file as sf
from tests.unit.broker_agent.records_support import change, partition, topic


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, int]] = []

    def publish_full(self, image: MetadataImage) -> None:
        self.events.append(("full", image.offset))

    def publish_delta(self, previous: MetadataImage, image: MetadataImage,
                      changes: ImageChanges) -> None:
        assert previous.offset < image.offset
        self.events.append(("delta", image.offset))


def _batch(base: int, records: list[MetadataRecord]) -> RecordBatch:
    return RecordBatch(base, 1, 0, False, EMPTY_ORIGIN, tuple(encode_record(r) for r in records))


def test_nothing_published_before_catching_up_then_deltas() -> None:
    hw = [-1]
    out = Recorder()
    loader = MetadataLoader(out, lambda: hw[0])
    loader.on_commit([_batch(0, [topic("a", "A"), partition("A", 0, (1, 2))])])
    assert out.events == [] and not loader.caught_up  # no fetch answered yet
    hw[0] = 4  # the leader's high watermark at the first answer: offsets [0, 4)
    loader.on_commit([_batch(2, [change("A", 0, leader=2)])])
    assert out.events == []  # applied up to 2 < 3
    loader.on_commit([_batch(3, [change("A", 0, isr=(2,))])])
    assert out.events == [("full", 3)] and loader.caught_up
    loader.on_commit([_batch(4, [change("A", 0, leader=1, isr=(1, 2))])])
    assert out.events == [("full", 3), ("delta", 4)]
    part = loader.image.partition(("A", 0))
    assert part is not None and part.leader_epoch == 2


def test_snapshot_replaces_the_image(tmp_path: Path) -> None:
    out = Recorder()
    loader = MetadataLoader(out, lambda: 10)
    writer = sf.SnapshotWriter(tmp_path, SnapshotId(10, 1))
    writer.append([encode_record(topic("a", "A")), encode_record(partition("A", 0, (1,)))])
    path = writer.freeze()
    LoaderListener(loader).on_snapshot_loaded(SnapshotId(10, 1), path)
    assert loader.caught_up and out.events == [("full", 9)]
    assert loader.image.topic_by_name("a") is not None
    # Batches the snapshot covers are skipped.
    loader.on_commit([_batch(5, [topic("b", "B")])])
    assert loader.image.topic_by_name("b") is None


def test_restart_never_publishes_older_than_the_local_state() -> None:
    out = Recorder()
    loader = MetadataLoader(out, lambda: 1)  # a new leader's lagging high watermark
    loader.min_start_offset = 2  # the data dir already reflects offset 2
    loader.on_commit([_batch(0, [topic("a", "A")])])
    assert out.events == []
    loader.on_commit([_batch(1, [partition("A", 0, (1,)), change("A", 0, isr=(1,))])])
    assert out.events == [("full", 2)]
