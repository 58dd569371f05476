"""Exceptions raised by the storage layer.

Everything derives from `StorageError`, so a daemon can catch one type at its
outer boundary. Each error names the file and/or offset it concerns, because an
operator reading it has to find the damage on disk.
"""

from __future__ import annotations


class StorageError(Exception):
    """Base class of every storage failure."""


class CorruptBatchError(StorageError):
    """A stored or received batch fails a structural or CRC check."""

    def __init__(self, reason: str, offset: int | None = None, position: int | None = None):
        self.reason = reason
        self.offset = offset
        self.position = position
        where = []
        if offset is not None:
            where.append(f"offset {offset}")
        if position is not None:
            where.append(f"byte position {position}")
        prefix = f"corrupt batch at {', '.join(where)}: " if where else "corrupt batch: "
        super().__init__(prefix + reason)


class TruncatedBatchError(CorruptBatchError):
    """The buffer ends before the batch does (a torn write or a short read)."""


class BatchTooLargeError(StorageError, ValueError):
    """A batch given to the encoder breaks `MAX_BATCH_BYTES` or `MAX_RECORDS_PER_BATCH`."""

    def __init__(self, reason: str, offset: int | None = None):
        self.reason = reason
        self.offset = offset
        where = f" (base offset {offset})" if offset is not None else ""
        super().__init__(f"batch too large{where}: {reason}")


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
