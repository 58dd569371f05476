"""`QuorumStateFile`: the Raft node's current epoch, vote and known leader.

Raft's safety depends on this file: a vote or an epoch bump must be on disk
before it is acknowledged. It is therefore written atomically (fsutil) and
read strictly: a file that exists but does not check out is an error, never a
silent reset to epoch 0 (which could let the node vote twice in one epoch).

Format: one JSON object, human readable, with a CRC-32C of its canonical data::

    {"data": {"epoch": 5, "leader_id": 2, "version": 1, "voted_for": 2}, "crc32c": 123456}
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from controller.logformat.values import QuorumState
from controller.storage.errors import QuorumStateCorruptionError
from controller.storage.fsutil import read_checked_json, write_checked_json

QUORUM_STATE_VERSION = 1


def _optional_int(data: dict[str, Any], key: str) -> int | None:
    value = data[key]
    if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
        raise ValueError(f"{key} must be an integer or null, got {value!r}")
    return value


class QuorumStateFile:
    """Reads and atomically rewrites the quorum-state file at `path`."""

    def __init__(self, path: str | os.PathLike[str]):
        self.path = Path(path)

    def read(self) -> QuorumState | None:
        """The stored state, None if the file does not exist (a new node).

        Raises `QuorumStateCorruptionError` if the file is damaged.
        """
        try:
            data = read_checked_json(self.path)
            if data is None:
                return None
            if data["version"] != QUORUM_STATE_VERSION:
                raise ValueError(f"unknown version {data['version']!r}")
            epoch = data["epoch"]
            if not isinstance(epoch, int) or isinstance(epoch, bool):
                raise ValueError(f"epoch must be an integer, got {epoch!r}")
            return QuorumState(epoch, _optional_int(data, "voted_for"),
                               _optional_int(data, "leader_id"))
        except (ValueError, KeyError, TypeError) as exc:
            raise QuorumStateCorruptionError(
                f"{self.path}: quorum state is damaged ({exc}). Refusing to start with an "
                "unknown vote; restore the file from a backup, or, if this node's log is "
                "also gone, wipe and reformat the data directory") from None

    def read_or_default(self) -> QuorumState:
        state = self.read()
        return state if state is not None else QuorumState()

    def write(self, state: QuorumState) -> None:
        """Persist `state` durably; when this returns, it survives a crash."""
        data = {"version": QUORUM_STATE_VERSION, "epoch": state.epoch,
                "voted_for": state.voted_for, "leader_id": state.leader_id}
        write_checked_json(self.path, data)
