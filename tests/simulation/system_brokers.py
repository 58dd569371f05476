"""The whole-system simulation's brokers as Raft observers (system.py): the real
`MetadataLoader` and reconciler on a local replica store that survives crashes, and
the snapshot encoding the simulated controllers and brokers share."""

from __future__ import annotations

from collections.abc import Callable

from broker_agent.delta import ImageChanges, build_image_from_bytes
from broker_agent.image import MetadataImage as BrokerImage
from broker_agent.loader import MetadataLoader
from broker_agent.reconciler import (
    LocalReplica,
    Plan,
    ReplicaRole,
    plan_delta,
    plan_full,
    replica_dir_name,
)
from controller.logformat import RecordBatch
from controller.metadata import MetadataImage
from tests.simulation.nodes import StateMachine


def encode_snapshot(records: list[bytes]) -> bytes:
    return b"".join(len(r).to_bytes(4, "big") + r for r in records)


def decode_snapshot(data: bytes) -> list[bytes]:
    out, pos = [], 0
    while pos < len(data):
        n = int.from_bytes(data[pos:pos + 4], "big")
        out.append(data[pos + 4:pos + 4 + n])
        pos += 4 + n
    return out



class BrokerDisk:
    """What a broker keeps on disk across crashes: its local replicas, and the offset
    its last full reconcile reflected (the daemon's `LocalPartitionStore.read_offset`)."""

    def __init__(self) -> None:
        self.replicas: dict[str, LocalReplica] = {}
        self.offset = -1


class BrokerSM(StateMachine):
    """An observer is a broker: the real `MetadataLoader` (its image delta by delta, or
    built from a snapshot; nothing published until caught up with the high watermark
    of its first fetch), publishing to the real reconciler, whose plans are applied to
    the broker's disk, which survives crashes. The loader's publisher is this class,
    doing synchronously what the daemon's `BrokerAgent` does on its worker thread."""

    def __init__(self, broker_id: int, disk: BrokerDisk, fetched_hw: Callable[[], int]) -> None:
        super().__init__()
        self.broker_id = broker_id
        self.disk = disk
        self.loader = MetadataLoader(self, fetched_hw)
        self.loader.min_start_offset = disk.offset
        self.version = 0  # bumped on every change the checker must look at
        self.checked = -1

    @property
    def reconciled(self) -> bool:
        return self.loader.caught_up

    def start(self, end_offset: int, data: bytes) -> None:
        """At process start: the snapshot the local log starts at."""
        self.loader.start_from(build_image_from_bytes(decode_snapshot(data), end_offset - 1))
        self.applied_offset = end_offset
        self.version += 1

    def apply(self, batch: RecordBatch) -> None:
        assert batch.base_offset == self.applied_offset, (batch.base_offset, self.applied_offset)
        self.loader.on_commit([batch])
        self.applied_offset = batch.next_offset
        self.version += 1

    def load(self, end_offset: int, data: bytes) -> None:
        """A snapshot the leader sent replaces the image."""
        self.loader.snapshot_loaded(build_image_from_bytes(decode_snapshot(data),
                                                           end_offset - 1))
        self.applied_offset = end_offset
        self.version += 1

    def check_caught_up(self) -> None:
        """A fetch answered (the high watermark is known): maybe publish now."""
        if not self.loader.caught_up and self.loader.check_caught_up():
            self.version += 1

    # ImagePublisher
    def publish_full(self, image: BrokerImage) -> None:
        self._apply(plan_full(self.disk.replicas, image, self.broker_id))
        self.disk.offset = image.offset

    def publish_delta(self, previous: BrokerImage, image: BrokerImage,
                      changes: ImageChanges) -> None:
        self._apply(plan_delta(previous, image, changes.changed_partitions,
                               changes.removed_topics, self.broker_id))

    def _apply(self, plan: Plan) -> None:
        for delete in plan.deletes:
            self.disk.replicas.pop(delete.dir_name, None)
        for change in (*plan.leaders, *plan.followers):
            self.disk.replicas[change.replica.dir_name] = change.replica

    def check(self, want: MetadataImage) -> str | None:
        """What is wrong against the controller's image at the same offset, if anything:
        the image always; the local replicas once caught up."""
        image = self.loader.image
        if image.offset != self.applied_offset - 1:
            return f"its image is at {image.offset}, its log applied to {self.applied_offset}"
        view = (want.features, want.brokers,
                tuple((t.name, t.topic_id, t.partitions) for t in want.topics), want.configs)
        if image.comparable() != view:
            return "its image differs from a replay of the committed log"
        if not self.reconciled:
            return None  # catching up: its local replicas are not reconciled yet
        desired = {replica_dir_name(topic.name, index): part.leader == self.broker_id
                   for topic, index, part in image.iter_partitions()
                   if self.broker_id in part.replicas}
        local = {name: r.role is ReplicaRole.LEADER for name, r in self.disk.replicas.items()}
        if local != desired:
            return f"its local replicas {sorted(local)} differ from its assignment {sorted(desired)}"
        return None
