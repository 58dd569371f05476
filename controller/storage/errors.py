"""Exceptions raised by the storage layer.

Everything derives from `StorageError`, so a daemon can catch one type at its
outer boundary. Each error names the file and/or offset it concerns, because an
operator reading it has to find the damage on disk.
"""

from __future__ import annotations

# The batch errors are raised by the batch codec, a layer below storage; defined
# there, named here too so `controller.storage.errors` lists every storage error.
from controller.logformat.errors import (
    BatchTooLargeError,
    CorruptBatchError,
    StorageError,
    TruncatedBatchError,
)

__all__ = [
    "BatchTooLargeError",
    "CheckpointCorruptionError",
    "CorruptBatchError",
    "InvalidAppendError",
    "LogCorruptionError",
    "MetaPropertiesError",
    "OffsetOutOfRangeError",
    "QuorumStateCorruptionError",
    "SnapshotCorruptionError",
    "StorageError",
    "TruncatedBatchError",
]


class LogCorruptionError(StorageError):
    """Damage that recovery must not repair silently (e.g. inside an older segment)."""

    def __init__(self, path: str, reason: str, offset: int | None = None,
                 position: int | None = None):
        self.path = path
        self.reason = reason
        self.offset = offset
        self.position = position
        where = f" at offset {offset}" if offset is not None else ""
        if position is not None:
            where += f" (byte position {position})"
        super().__init__(f"{path}{where}: {reason}")


class InvalidAppendError(StorageError, ValueError):
    """An append that would break the log's invariants (offset gap, epoch going back)."""


class OffsetOutOfRangeError(StorageError, ValueError):
    """An offset outside `[start_offset, end_offset]` or not at a batch boundary."""


class QuorumStateCorruptionError(StorageError):
    """The quorum-state file exists but cannot be trusted."""


class CheckpointCorruptionError(StorageError):
    """The leader-epoch checkpoint file exists but cannot be trusted."""


class SnapshotCorruptionError(StorageError):
    """A snapshot file is damaged: bad CRC, missing header/footer, torn tail."""


class MetaPropertiesError(StorageError):
    """Base class of the data-directory formatting errors."""


class StorageNotFormattedError(MetaPropertiesError):
    """The data directory has no (or an unreadable) meta.properties."""


class ClusterIdMismatchError(MetaPropertiesError):
    """meta.properties names another cluster."""


class NodeIdMismatchError(MetaPropertiesError):
    """meta.properties names another node."""
