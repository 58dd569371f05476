"""The metadata log's format and values, below both the Raft core and the storage
layer: record batches and their codec (`batch`), snapshot ids, the quorum state and
epoch boundaries (`values`), the codec's errors. Pure: no file, socket or clock."""

from controller.logformat.batch import (
    EMPTY_ORIGIN,
    HEADER_SIZE,
    MAGIC,
    MAX_APPEND_BYTES,
    MAX_BATCH_BYTES,
    MAX_RECORDS_PER_BATCH,
    BatchOrigin,
    RecordBatch,
    decode_batch,
    encode_batch,
)
from controller.logformat.values import (
    EMPTY_SNAPSHOT,
    EPOCH_LIMIT,
    SNAPSHOT_SUFFIX,
    EpochEndOffset,
    LeaderAndEpoch,
    QuorumState,
    SnapshotId,
    parse_snapshot_file_name,
)

__all__ = [
    "EMPTY_ORIGIN",
    "EMPTY_SNAPSHOT",
    "EPOCH_LIMIT",
    "HEADER_SIZE",
    "MAGIC",
    "MAX_APPEND_BYTES",
    "MAX_BATCH_BYTES",
    "MAX_RECORDS_PER_BATCH",
    "SNAPSHOT_SUFFIX",
    "BatchOrigin",
    "EpochEndOffset",
    "LeaderAndEpoch",
    "QuorumState",
    "RecordBatch",
    "SnapshotId",
    "decode_batch",
    "encode_batch",
    "parse_snapshot_file_name",
]
