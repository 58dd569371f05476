"""Log storage: batches, segmented log, snapshots, quorum state, formatting.

Data directory layout (one per controller; `DataDir` in meta_properties.py)::

    DIR/meta.properties            cluster.id, node.id, version (written by `storage format`)
    DIR/quorum-state               current epoch, voted-for, leader (QuorumStateFile)
    DIR/leader-epoch-checkpoint    epoch -> start offset (LeaderEpochCheckpoint)
    DIR/log-recovery-point         how far the log was fsynced (RecoveryPointFile)
    DIR/log-repair-pending         only while a damaged log is being repaired (LogRepairMarker)
    DIR/metadata/                  log segments <base:020d>.log + sparse <base:020d>.index
    DIR/snapshots/                 <end_offset:020d>-<epoch:010d>.checkpoint

Snapshots live in their own directory so each module owns the files of one
directory exclusively (log recovery never has to skip or clean snapshot files
and the other way round).

Snapshot files are in `controller.storage.snapshot_file` (not re-exported here):
they need controller.records for the header/footer records, while everything
re-exported below treats records as opaque bytes. The batch format and the log's
value types (snapshot ids, the quorum state) are one layer down, in
`controller.logformat`, shared with the Raft core.
"""

from controller.storage.errors import (
    BatchTooLargeError,
    CheckpointCorruptionError,
    ClusterIdMismatchError,
    CorruptBatchError,
    InvalidAppendError,
    LogCorruptionError,
    MetaPropertiesError,
    NodeIdMismatchError,
    OffsetOutOfRangeError,
    QuorumStateCorruptionError,
    SnapshotCorruptionError,
    StorageError,
    StorageNotFormattedError,
    TruncatedBatchError,
)
from controller.storage.flush import PendingFlush
from controller.storage.leader_epoch import (
    UNDEFINED_EPOCH,
    UNDEFINED_OFFSET,
    EpochHistory,
    LeaderEpochCheckpoint,
    end_offset_for_epoch,
)
from controller.storage.log import LogConfig, RecoveryReport, SegmentedLog
from controller.storage.meta_properties import (
    AlreadyFormattedError,
    DataDir,
    MetaProperties,
    check_meta_properties,
    format_data_dir,
    random_cluster_id,
    read_meta_properties,
)
from controller.storage.quorum_state import QuorumStateFile

__all__ = [
    "UNDEFINED_EPOCH",
    "UNDEFINED_OFFSET",
    "AlreadyFormattedError",
    "BatchTooLargeError",
    "CheckpointCorruptionError",
    "ClusterIdMismatchError",
    "CorruptBatchError",
    "DataDir",
    "EpochHistory",
    "InvalidAppendError",
    "LeaderEpochCheckpoint",
    "LogConfig",
    "LogCorruptionError",
    "MetaProperties",
    "MetaPropertiesError",
    "NodeIdMismatchError",
    "OffsetOutOfRangeError",
    "PendingFlush",
    "QuorumStateCorruptionError",
    "QuorumStateFile",
    "RecoveryReport",
    "SegmentedLog",
    "SnapshotCorruptionError",
    "StorageError",
    "StorageNotFormattedError",
    "TruncatedBatchError",
    "check_meta_properties",
    "end_offset_for_epoch",
    "format_data_dir",
    "random_cluster_id",
    "read_meta_properties",
]
