"""The local partition state: `DATA_DIR/partitions/<topic>-<partition>/state.json`.

Each file is replaced atomically (temp file, fsync, rename, directory fsync), so a
crash leaves either the old or the new state, never a torn one; a directory with
no readable `state.json` (a crash between mkdir and the first write) is reported as
`None` and the reconciler rewrites or removes it. A delete removes the whole
directory and fsyncs `partitions/`, so it is not resurrected by a crash.

A large plan (a first start, a snapshot load: up to every local replica) would pay
two fsyncs per replica that way, which is minutes for 100k replicas. `apply_all`
therefore groups durability for plans above `GROUP_SYNC_MIN`: deletes, then every
new file written beside its target (`state.json.tmp`), one `syncfs` (contents
durable), every rename, one more `syncfs` (names durable). Each file still appears
atomically; a crash in between leaves old states or temp files, which `load`
ignores and the next start's full plan repairs.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import logging
import os
import shutil
import threading
from collections.abc import Sequence
from pathlib import Path

from broker_agent.reconciler import (
    BecomeFollower,
    BecomeLeader,
    DeleteReplica,
    Instruction,
    LocalReplica,
    ReplicaRole,
)
from controller.storage.fsutil import TEMP_SUFFIX, atomic_write_bytes, fsync_dir, temp_path_for

logger = logging.getLogger("metakraft.broker")

STATE_FILE = "state.json"
# A lower bound of the metadata offset the local state reflects (see `write_offset`).
OFFSET_FILE = "reconciled-offset"
# Plans with more instructions than this get grouped durability (see the docstring).
GROUP_SYNC_MIN = 32

_libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)


def syncfs(path: Path) -> None:
    """Flush the whole file system holding `path` (Linux syncfs(2))."""
    fd = os.open(path, os.O_RDONLY)
    try:
        if _libc.syncfs(fd) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"syncfs({path}): {os.strerror(err)}")
    finally:
        os.close(fd)


def replica_to_json(replica: LocalReplica) -> dict[str, object]:
    return {"topic": replica.topic, "topic_id": replica.topic_id,
            "partition": replica.partition, "role": replica.role.value,
            "leader": replica.leader, "leader_epoch": replica.leader_epoch,
            "partition_epoch": replica.partition_epoch}


def replica_from_json(doc: dict[str, object]) -> LocalReplica:
    def _int(key: str) -> int:
        value = doc[key]
        if not isinstance(value, int):
            raise ValueError(f"{key}: expected an integer")
        return value

    return LocalReplica(str(doc["topic"]), str(doc["topic_id"]), _int("partition"),
                        ReplicaRole(doc["role"]), _int("leader"), _int("leader_epoch"),
                        _int("partition_epoch"))


class LocalPartitionStore:
    """Reads and changes the replica directories under `DATA_DIR/partitions`.

    Keeps a cache of what it last read or wrote, so the status RPC never reads disk.
    The agent's worker thread changes it while the event loop reads `replicas`: the
    cache is guarded by a lock (the disk has one writer, the worker).
    """

    def __init__(self, data_dir: Path) -> None:
        self.root = data_dir / "partitions"
        self.root.mkdir(parents=True, exist_ok=True)
        self._cache: dict[str, LocalReplica | None] = {}
        self._lock = threading.Lock()

    def read_offset(self) -> int:
        """The offset last recorded by `write_offset` (-1: none)."""
        try:
            return int((self.root.parent / OFFSET_FILE).read_text("ascii").strip())
        except (OSError, ValueError):
            return -1

    def write_offset(self, offset: int) -> None:
        """Record that the local state reflects the image at `offset` or later.

        Written after a full reconcile and on a clean stop only (not per delta: it
        would double the fsyncs), so it is a lower bound. A restarting broker does
        not publish an image older than it: otherwise a lagging high watermark at
        its first fetch (a leader just elected) could roll the disk back for a
        moment."""
        atomic_write_bytes(self.root.parent / OFFSET_FILE, f"{offset}\n".encode())

    def load(self) -> dict[str, LocalReplica | None]:
        """Every replica directory on disk (None: no readable state)."""
        found: dict[str, LocalReplica | None] = {}
        for entry in sorted(self.root.iterdir()):
            if not entry.is_dir():
                continue
            state = entry / STATE_FILE
            try:
                found[entry.name] = replica_from_json(json.loads(state.read_text("utf-8")))
            except (OSError, ValueError, KeyError, TypeError):
                # Only possible after a crash before the first write of the file.
                logger.warning("event=unreadable_replica_state dir=%s", entry.name)
                found[entry.name] = None
        with self._lock:
            self._cache = dict(found)
        return found

    @property
    def replicas(self) -> dict[str, LocalReplica]:
        with self._lock:
            return {name: r for name, r in self._cache.items() if r is not None}

    def apply_all(self, instructions: Sequence[Instruction]) -> None:
        """Apply a plan's instructions in order, durably before returning."""
        if len(instructions) <= GROUP_SYNC_MIN:
            for instruction in instructions:
                self.apply(instruction)
            return
        pending: list[tuple[Path, LocalReplica]] = []
        for instruction in instructions:
            if isinstance(instruction, DeleteReplica):
                assert not pending, "deletes come first in a plan"
                self._remove_tree(instruction.dir_name)
                continue
            replica = instruction.replica
            directory = self.root / replica.dir_name
            directory.mkdir(exist_ok=True)
            temp = temp_path_for(directory / STATE_FILE)
            temp.write_bytes(_encode(replica))
            pending.append((temp, replica))
        syncfs(self.root)
        for temp, replica in pending:
            os.replace(temp, temp.with_name(STATE_FILE))
            with self._lock:
                self._cache[replica.dir_name] = replica
        syncfs(self.root)

    def apply(self, instruction: Instruction) -> None:
        if isinstance(instruction, DeleteReplica):
            self._delete(instruction.dir_name)
        elif isinstance(instruction, BecomeLeader | BecomeFollower):
            self._write(instruction.replica)
        else:  # pragma: no cover - exhaustive
            raise AssertionError(f"unknown instruction {instruction!r}")

    def _write(self, replica: LocalReplica) -> None:
        directory = self.root / replica.dir_name
        if not directory.exists():
            directory.mkdir()
            fsync_dir(self.root)
        atomic_write_bytes(directory / STATE_FILE, _encode(replica))
        with self._lock:
            self._cache[replica.dir_name] = replica

    def _delete(self, dir_name: str) -> None:
        if self._remove_tree(dir_name):
            fsync_dir(self.root)

    def _remove_tree(self, dir_name: str) -> bool:
        directory = self.root / dir_name
        assert "/" not in dir_name and dir_name not in ("", ".", "..")
        with self._lock:
            self._cache.pop(dir_name, None)
        if not directory.exists():
            return False
        shutil.rmtree(directory)
        return True


def _encode(replica: LocalReplica) -> bytes:
    return json.dumps(replica_to_json(replica), sort_keys=True).encode() + b"\n"


__all__ = ["STATE_FILE", "TEMP_SUFFIX", "LocalPartitionStore", "replica_from_json",
           "replica_to_json"]
