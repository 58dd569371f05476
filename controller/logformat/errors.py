"""What the batch codec raises. `StorageError` is the base of every failure of the
log and its files (the storage layer's errors derive from it too), so a daemon can
catch one type at its outer boundary."""

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
