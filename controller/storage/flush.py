"""`PendingFlush`: the fsyncs of one group commit, runnable off the event loop.

`SegmentedLog.begin_flush()` captures, on the owner's thread, what has to reach
the disk (duplicated descriptors of the files written since the last flush,
whether the directory changed) and the end offset that will then be durable.
`run()` does the slow part and touches no log state, so an asyncio driver can
run it in a worker thread while it keeps appending; `complete_flush()` back on
the owner's thread moves `flushed_offset`. Appends made while `run()` is in
progress are not counted (they may or may not be synced already; the next
flush covers them).
"""

from __future__ import annotations

import os
from pathlib import Path

from controller.storage.fsutil import fdatasync, fsync_dir
from controller.storage.recovery_point import RecoveryPointFile


class PendingFlush:
    def __init__(self, target_offset: int, fds: list[int], directory: Path | None,
                 recovery_point: RecoveryPointFile | None = None):
        self.target_offset = target_offset
        # Our own duplicates: valid even if the log closes or deletes the segment meanwhile.
        self._fds = fds
        self._directory = directory
        self._recovery_point = recovery_point
        self.done = False

    def run(self) -> PendingFlush:
        """fsync everything captured (safe in any thread); returns self for chaining."""
        try:
            for fd in self._fds:
                fdatasync(fd)
            if self._directory is not None:
                fsync_dir(self._directory)
            # Only now is everything below the target on disk: record it before
            # anyone is told (complete_flush), so it is never below an acknowledgement.
            if self._recovery_point is not None:
                self._recovery_point.raise_to(self.target_offset)
        finally:
            self.close()
        self.done = True
        return self

    def close(self) -> None:
        fds, self._fds = self._fds, []
        for fd in fds:
            os.close(fd)
