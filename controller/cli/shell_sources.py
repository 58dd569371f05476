"""Where `metakraft shell` reads its image from: a snapshot file, a log directory or
the remote tier (each optionally up to `--at-offset`), or a live quorum followed as
a Raft observer.

From files: start at the newest snapshot at or below the wanted offset (the log
directory's own, or the tier's), then replay the batches after it (the tier's
segments, then the local ones) up to the wanted offset. A local log may end with
records not committed yet (what was on disk), and says so.
"""

from __future__ import annotations

import asyncio
import random
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path

from controller.cli.shell_view import ImageSource
from controller.logformat import RecordBatch, SnapshotId
from controller.metadata import MetadataState
from controller.quorum.contracts import CommitListener
from controller.quorum_controller.restore import tier_snapshot_records
from controller.records import decode_record
from controller.records.registry import record_type
from controller.security.tls import TlsCredentials
from controller.storage import snapshot_file as sf
from controller.storage.errors import StorageError
from controller.storage.meta_properties import DataDir, cluster_id_of, format_data_dir
from controller.tier.history import (
    MAX_OFFSET,
    history_batches,
    list_tier,
    local_segments,
    plan_history,
)
from controller.tier.objects import Manifest
from controller.tier.remote import RemoteStorage, open_store


class ShellSourceError(Exception):
    """The image cannot be read from what was given (said in words)."""


class ImageBuilder(CommitListener):
    """Replays snapshots and committed batches into an `ImageSource`; also the Raft
    observer's listener when following a live quorum."""

    def __init__(self, description: str, cluster_id: str = "") -> None:
        self.source = ImageSource(MetadataState(cluster_id=cluster_id, rng=random.Random(0)),
                                  description=description)

    def load_snapshot(self, records: Iterable[bytes], end_offset: int) -> None:
        """Replace the image with a snapshot covering [0, end_offset)."""
        description = self.source.description
        self.source = ImageSource(MetadataState(cluster_id=self.source.state.cluster.cluster_id,
                                                rng=random.Random(0)),
                                  description=description)
        self.source.state.replay_encoded(records, end_offset - 1, step=0)
        self.source.offset = end_offset - 1

    def apply(self, batch: RecordBatch, until: int = MAX_OFFSET) -> None:
        """Replay the records of `batch` above the image's offset and at most `until`."""
        first = max(batch.base_offset, self.source.offset + 1)
        last = min(batch.last_offset, until)
        if first > last:
            return
        records = batch.records[first - batch.base_offset:last - batch.base_offset + 1]
        if batch.is_control:
            for data in records:
                record = decode_record(data)
                if record_type(record) == "leader_change":
                    self.source.leader_change = record.leader_change
        self.source.state.replay_encoded(records, first)
        self.source.offset = last

    # -- CommitListener (live) -------------------------------------------------------

    def on_commit(self, batches: Sequence[RecordBatch]) -> None:
        for batch in batches:
            self.apply(batch)

    def on_snapshot_loaded(self, snapshot_id: SnapshotId, path: Path) -> None:
        self.load_snapshot(sf.SnapshotReader.open(path).records(), snapshot_id.end_offset)


def _wanted(at_offset: int | None) -> int:
    return MAX_OFFSET - 1 if at_offset is None else at_offset


def from_snapshot(path: Path) -> ImageSource:
    try:
        reader = sf.SnapshotReader.open(path)
    except (OSError, StorageError) as exc:
        raise ShellSourceError(f"cannot read snapshot {path}: {exc}") from None
    builder = ImageBuilder(f"snapshot {path}")
    builder.load_snapshot(reader.records(), reader.summary.last_contained_offset + 1)
    return builder.source


def _snapshot_dir(log_dir: Path) -> Path:
    """The snapshots of the data directory `log_dir` is (or whose metadata/ it is)."""
    return DataDir(log_dir.parent if log_dir.name == "metadata" else log_dir).snapshot_dir


def _local_snapshot(log_dir: Path, at: int) -> SnapshotId | None:
    """The newest snapshot of the data directory that ends at or below offset `at` + 1."""
    directory = _snapshot_dir(log_dir)
    if not directory.is_dir():
        return None
    usable = [s for s in sf.list_snapshots(directory) if s.end_offset - 1 <= at]
    return max(usable, key=lambda s: s.end_offset, default=None)


def from_files(log_dir: Path | None, tier: str | None, at_offset: int | None) -> ImageSource:
    """The image of a log directory, the tier, or both (one history), at `at_offset`
    (None: the end of what they hold)."""
    at = _wanted(at_offset)
    where = " and ".join(x for x in (f"tier {tier}" if tier else "",
                                     f"log directory {log_dir}" if log_dir else "") if x)
    try:
        cluster_id = cluster_id_of(log_dir) if log_dir is not None else None
        local = local_segments(log_dir) if log_dir is not None else []
        store: RemoteStorage | None = None
        tier_segments: tuple[Manifest, ...] = ()
        tier_snapshots: tuple[Manifest, ...] = ()
        if tier is not None:
            store = open_store(tier)
            listing = list_tier(store, cluster_id)
            cluster_id = cluster_id or listing.cluster_id
            tier_segments, tier_snapshots = listing.segments, listing.snapshots
    except (OSError, ValueError) as exc:
        raise ShellSourceError(f"cannot read {where}: {exc}") from None
    builder = ImageBuilder(where + ("" if at_offset is None else f" at offset {at_offset}"),
                           cluster_id or "")
    local_snap = _local_snapshot(log_dir, at) if log_dir is not None else None
    remote_snaps = [m for m in tier_snapshots if m.end_offset - 1 <= at]
    remote_snap = max(remote_snaps, key=lambda m: m.end_offset, default=None)
    try:
        if local_snap is not None and (remote_snap is None
                                       or local_snap.end_offset >= remote_snap.end_offset):
            assert log_dir is not None
            path = _snapshot_dir(log_dir) / local_snap.file_name
            builder.load_snapshot(sf.SnapshotReader.open(path).records(), local_snap.end_offset)
        elif remote_snap is not None:
            assert store is not None
            load_tier_snapshot(builder, store, remote_snap)
        start = builder.source.offset + 1
        pieces = plan_history(tier_segments, local, start=start, end=at + 1)
        if pieces and pieces[0].start > start:
            raise ShellSourceError(
                f"the history held starts at offset {pieces[0].start}, and no snapshot at "
                f"or below offset {at} covers [{start}, {pieces[0].start})")
        for _piece, batch in history_batches(store, pieces):
            builder.apply(batch, at)
    except ShellSourceError:
        raise
    except Exception as exc:  # a damaged object or segment: say which, in words
        raise ShellSourceError(f"cannot read {where}: {type(exc).__name__}: {exc}") from None
    if at_offset is not None and builder.source.offset < at_offset:
        raise ShellSourceError(f"{where} end at offset {builder.source.offset}, before "
                               f"--at-offset {at_offset}")
    return builder.source


def load_tier_snapshot(builder: ImageBuilder, store: RemoteStorage, manifest: Manifest
                       ) -> None:
    """A tier snapshot object, checked against its manifest."""
    builder.load_snapshot(tier_snapshot_records(store, manifest), manifest.end_offset)


class LiveFollower:
    """Follows a live quorum as a Raft observer (what a broker does), feeding an
    `ImageBuilder`: committed batches only, a snapshot from the leader when behind
    its log start. Its node id is a random high one (it shows among the observers of
    `quorum describe` while it runs) and its log lives in a temporary directory,
    removed on `stop`. Over TLS the certificate needs CLUSTER_ACTION on the cluster
    (a super user has it), as a broker's does."""

    def __init__(self, builder: ImageBuilder, cluster_id: str, voters: dict[int, str],
                 tls: TlsCredentials | None) -> None:
        self.builder = builder
        self.node_id = random.randrange(OBSERVER_IDS_START, 2**31 - 1)
        self._tmp = tempfile.TemporaryDirectory(prefix="metakraft-shell-")
        data_dir = Path(self._tmp.name) / "data"
        format_data_dir(data_dir, cluster_id, self.node_id)
        from controller.quorum.driver import RaftDriver
        from controller.quorum.driver_config import DriverConfig

        self.driver = RaftDriver(DriverConfig(node_id=self.node_id, cluster_id=cluster_id,
                                              voter_addresses=voters, data_dir=data_dir,
                                              tls=tls), builder)

    async def start(self, timeout_s: float) -> None:
        """Start following; return once caught up with the high watermark the leader
        first reported (ShellSourceError if not within `timeout_s`)."""
        await self.driver.start()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while not self.caught_up:
            if loop.time() > deadline:
                raise ShellSourceError(
                    f"not caught up with the quorum within {timeout_s:.0f} s (applied up to "
                    f"offset {self.builder.source.offset}, high watermark "
                    f"{self.driver.fetched_high_watermark}); is the certificate allowed "
                    "CLUSTER_ACTION? see the controllers' access_denied lines")
            await asyncio.sleep(_CATCH_UP_POLL_S)

    @property
    def caught_up(self) -> bool:
        high_watermark = self.driver.fetched_high_watermark
        return high_watermark > 0 and self.builder.source.offset + 1 >= high_watermark

    async def stop(self) -> None:
        await self.driver.stop(resign=False)
        self._tmp.cleanup()


# Live observers take node ids from here up: far above broker and controller ids.
OBSERVER_IDS_START = 2_000_000_000
_CATCH_UP_POLL_S = 0.02
