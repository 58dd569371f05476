"""`LogRepairMarker`: a replica's note to itself that its log lost records it had
flushed, so it must fetch them again from a leader before it votes.

Written (durably) before recovery cuts the damaged log, removed once the Raft
core says the log holds them again: a crash in between restarts the repair, it
never forgets it. Format: a checksummed JSON file (fsutil.write_checked_json)::

    {"data": {"reason": "...", "repair_to_offset": 1234, "version": 1}, "crc32c": ...}
"""

from __future__ import annotations

import os
from pathlib import Path

import attrs

from controller.storage.errors import CheckpointCorruptionError
from controller.storage.fsutil import fsync_dir, read_checked_json, write_checked_json

_VERSION = 1


@attrs.frozen
class PendingRepair:
    """Fetch from a leader at least up to `repair_to_offset` (the recovery point of
    the damaged log) before voting again; `reason` says what was found."""

    repair_to_offset: int
    reason: str


class LogRepairMarker:
    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def read(self) -> PendingRepair | None:
        try:
            data = read_checked_json(self.path)
            if data is None:
                return None
            if data["version"] != _VERSION:
                raise ValueError(f"unknown version {data['version']!r}")
            offset, reason = data["repair_to_offset"], data["reason"]
            if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
                raise ValueError(f"repair_to_offset must be an offset, got {offset!r}")
            return PendingRepair(offset, str(reason))
        except (ValueError, KeyError, TypeError) as exc:
            raise CheckpointCorruptionError(
                f"{self.path}: the pending log repair note is damaged ({exc}). The log "
                "was damaged before; keep this replica from voting: move the data "
                "directory aside and use `metakraft storage reformat-replica`") from None

    def write(self, repair: PendingRepair) -> None:
        write_checked_json(self.path, {"version": _VERSION, "reason": repair.reason,
                                       "repair_to_offset": repair.repair_to_offset})

    def clear(self) -> None:
        if self.path.exists():
            self.path.unlink()
            fsync_dir(self.path.parent)
