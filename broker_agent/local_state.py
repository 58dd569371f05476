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
durable), every rename (leaders, then followers), one more `syncfs` (names
durable). Each file still appears atomically; a crash in between leaves old states
or temp files, which `load` ignores and the next start's full plan repairs.

What a large plan costs is the file system creating two inodes per new replica
(its directory and its file), so the grouped path does only that: plain `os`
calls relative to one descriptor of `partitions/` (no per-replica `stat`: a
`mkdir` that finds the directory is the check), the JSON from a template, and
the creations and renames spread over `write_threads` threads (the system calls
release the GIL, and creations in different directories run in parallel).

`prewrite` lets a snapshot load write those temp files (`state.json.pre.tmp`)
while it is still decoding; `apply_all` then renames the ones that hold exactly
what the plan writes and removes the rest. A crash can leave such files: in a
directory without a readable state `load` removes them, beside a valid state they
are ignored (and overwritten by the next prewrite).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import json
import os
import shutil
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

from broker_agent.reconciler import (
    BecomeFollower,
    BecomeLeader,
    DeleteReplica,
    Instruction,
    LocalReplica,
    ReplicaRole,
)
from controller.log import get_logger
from controller.storage.fsutil import TEMP_SUFFIX, atomic_write_bytes, fsync_dir

log = get_logger("metakraft.broker")
T = TypeVar("T")

STATE_FILE = "state.json"
# A lower bound of the metadata offset the local state reflects (see `write_offset`).
OFFSET_FILE = "reconciled-offset"
# Plans with more instructions than this get grouped durability (see the docstring).
GROUP_SYNC_MIN = 32
# Threads creating directories and files in a grouped plan (see the docstring), and
# the fewest replicas worth a thread.
WRITE_THREADS = 2
_MIN_PER_THREAD = 256
_TEMP_NAME = STATE_FILE + TEMP_SUFFIX
# Prewritten temp files (see `prewrite`): a name of their own, so a plan applied
# meanwhile (which uses `_TEMP_NAME`) never overwrites or renames one.
_PRE_NAME = STATE_FILE + ".pre" + TEMP_SUFFIX
# Prewrites start the write-back (one syncfs) every so many files, so it overlaps
# with the snapshot decode instead of all landing on the plan's first syncfs.
_PRE_SYNC_EVERY = 50_000
_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC

_libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)


def syncfs(path: Path) -> None:
    """Flush the whole file system holding `path` (Linux syncfs(2))."""
    fd = os.open(path, os.O_RDONLY)
    try:
        _syncfs_fd(fd, path)
    finally:
        os.close(fd)


def _syncfs_fd(fd: int, path: Path) -> None:
    if _libc.syncfs(fd) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"syncfs({path}): {os.strerror(err)}")


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

    def __init__(self, data_dir: Path, write_threads: int = WRITE_THREADS) -> None:
        self.root = data_dir / "partitions"
        self.write_threads = write_threads
        # Seconds per phase of the last grouped `apply_all` (for benchmarks and logs).
        self.last_apply_phases: dict[str, float] = {}
        self.loaded = False
        # Prewritten temp files by dir name (see `prewrite`), and the pending jobs.
        self._prewritten: dict[str, LocalReplica] = {}
        self._prewrite_jobs: list[Future[None]] = []
        self._prewriter: ThreadPoolExecutor | None = None
        self._unsynced_prewrites = 0
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
        with self._lock:  # prewrites in flight are not a crash's leftovers
            cleanup = not (self._prewritten or self._prewrite_jobs)
        root_fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            with os.scandir(root_fd) as entries:
                names = sorted(e.name for e in entries if e.is_dir(follow_symlinks=False))
            for name in names:
                try:
                    found[name] = replica_from_json(json.loads(
                        _read_small(name + "/" + STATE_FILE, root_fd)))
                except (OSError, ValueError, KeyError, TypeError):
                    # Only possible after a crash before the first write of the file
                    # (or a prewrite's directory): drop its temp files too.
                    log.warning("unreadable_replica_state", dir=name)
                    found[name] = None
                    for temp in (_TEMP_NAME, _PRE_NAME) if cleanup else ():
                        with contextlib.suppress(FileNotFoundError):
                            os.unlink(name + "/" + temp, dir_fd=root_fd)
        finally:
            os.close(root_fd)
        with self._lock:
            self._cache = dict(found)
            self.loaded = True
        return found

    def cached(self) -> dict[str, LocalReplica | None]:
        """What `load` found, kept up to date by every change since (this store is the
        only writer of the directory); loads first if it never did."""
        if not self.loaded:
            return self.load()
        with self._lock:
            return dict(self._cache)

    def cached_replica(self, dir_name: str) -> LocalReplica | None:
        with self._lock:
            return self._cache.get(dir_name)

    # ------------------------------------------------------------------ prewrites

    def prewrite(self, replicas: Sequence[LocalReplica]) -> None:
        """Start writing these replicas' states as temp files, in the background.

        Only a hint for a coming large plan (a snapshot is still being decoded):
        nothing visible changes (`load` reads only `state.json`), and `apply_all`
        renames a prewritten file only if it holds exactly the replica the plan
        writes; anything else is written again, and leftovers are removed. A crash
        leaves temp files (and maybe empty directories), as a crash in a plan does.
        """
        if not replicas:
            return
        with self._lock:
            if self._prewriter is None:
                self._prewriter = ThreadPoolExecutor(max(1, self.write_threads),
                                                     thread_name_prefix="prewrite")
            self._prewrite_jobs.append(self._prewriter.submit(self._prewrite_job,
                                                              list(replicas)))

    def _prewrite_job(self, replicas: list[LocalReplica]) -> None:
        try:
            root_fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            try:
                _write_temps(root_fd, replicas, _PRE_NAME)
                with self._lock:
                    self._prewritten.update((r.dir_name, r) for r in replicas)
                    self._unsynced_prewrites += len(replicas)
                    sync_now = self._unsynced_prewrites >= _PRE_SYNC_EVERY
                    if sync_now:
                        self._unsynced_prewrites = 0
                if sync_now:
                    _syncfs_fd(root_fd, self.root)
            finally:
                os.close(root_fd)
        except OSError:
            # Not fatal: the plan writes these itself (and reports its own errors).
            log.warning("prewrite_failed", replicas=len(replicas), exc_info=True)

    def _take_prewrites(self) -> dict[str, LocalReplica]:
        """Wait for the prewrite jobs; the prewritten files (now owned by the caller)."""
        while True:
            with self._lock:
                jobs, self._prewrite_jobs = self._prewrite_jobs, []
                if not jobs:
                    taken, self._prewritten = self._prewritten, {}
                    return taken
            for job in jobs:
                job.result()

    def _discard_prewrites(self, root_fd: int, leftovers: dict[str, LocalReplica]) -> None:
        """Prewritten files no plan used: removed, with their directory if that is
        then empty (the prewrite made it)."""
        for name in leftovers:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name + "/" + _PRE_NAME, dir_fd=root_fd)
            with contextlib.suppress(OSError):  # not empty: it holds a state
                os.rmdir(name, dir_fd=root_fd)

    def close(self) -> None:
        """Stop the prewrite threads (after waiting for them)."""
        with self._lock:
            prewriter, self._prewriter = self._prewriter, None
        if prewriter is not None:
            prewriter.shutdown(wait=True)

    @property
    def replicas(self) -> dict[str, LocalReplica]:
        with self._lock:
            return {name: r for name, r in self._cache.items() if r is not None}

    def apply_all(self, instructions: Sequence[Instruction]) -> None:
        """Apply a plan's instructions in order, durably before returning."""
        clock = time.perf_counter
        started = clock()
        prewritten = self._take_prewrites()
        if len(instructions) <= GROUP_SYNC_MIN:
            for instruction in instructions:
                self.apply(instruction)
            if prewritten:
                self._with_root(lambda fd: self._discard_prewrites(fd, prewritten))
            return
        phases: dict[str, float] = {}

        def phase(name: str) -> None:
            phases[name] = clock() - started - sum(phases.values())

        phase("prewrite wait")
        root_fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            writes: list[LocalReplica] = []
            for instruction in instructions:
                if isinstance(instruction, DeleteReplica):
                    assert not writes, "deletes come first in a plan"
                    self._remove_tree(instruction.dir_name, root_fd)
                    prewritten.pop(instruction.dir_name, None)
                else:
                    writes.append(instruction.replica)
            phase("deletes")
            # Phase 1: every directory and temp file not prewritten (the slow part:
            # inode allocation), on a few threads; system calls release the GIL.
            renames: list[tuple[str, LocalReplica]] = []
            missing: list[LocalReplica] = []
            for replica in writes:
                name = replica.dir_name
                if prewritten.get(name) == replica:
                    del prewritten[name]
                    renames.append((_PRE_NAME, replica))
                else:
                    missing.append(replica)
                    renames.append((_TEMP_NAME, replica))
            self._parallel(lambda part: _write_temps(root_fd, part, _TEMP_NAME), missing)
            phase(f"temp files ({len(missing)}, {len(writes) - len(missing)} prewritten)")
            _syncfs_fd(root_fd, self.root)
            phase("syncfs")
            # Phase 2: the renames, leaders before followers (as a plan orders them).
            for role in (ReplicaRole.LEADER, ReplicaRole.FOLLOWER):
                group = [item for item in renames if item[1].role is role]
                self._parallel(lambda part: _rename_temps(root_fd, part), group)
                with self._lock:
                    self._cache.update((r.dir_name, r) for _, r in group)
            phase("renames")
            self._discard_prewrites(root_fd, prewritten)
            _syncfs_fd(root_fd, self.root)
            phase("syncfs 2")
        finally:
            os.close(root_fd)
        self.last_apply_phases = phases

    def _with_root(self, work: Callable[[int], None]) -> None:
        root_fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            work(root_fd)
        finally:
            os.close(root_fd)

    def _parallel(self, work: Callable[[Sequence[T]], None], items: Sequence[T]) -> None:
        threads = min(self.write_threads, len(items) // _MIN_PER_THREAD)
        if threads <= 1:
            work(items)
            return
        with ThreadPoolExecutor(threads, thread_name_prefix="local-state") as pool:
            # Interleaved slices: neighbours (one topic) go to different threads.
            for future in [pool.submit(work, items[i::threads]) for i in range(threads)]:
                future.result()

    def apply(self, instruction: Instruction) -> None:
        if isinstance(instruction, DeleteReplica):
            self._delete(instruction.dir_name)
        elif isinstance(instruction, BecomeLeader | BecomeFollower):
            self._write(instruction.replica)
        else:  # pragma: no cover - exhaustive
            raise AssertionError(f"unknown instruction {instruction!r}")

    def _write(self, replica: LocalReplica) -> None:
        directory = self.root / replica.dir_name
        try:
            directory.mkdir()
        except FileExistsError:
            pass
        else:
            fsync_dir(self.root)
        atomic_write_bytes(directory / STATE_FILE, encode_replica(replica))
        with self._lock:
            self._cache[replica.dir_name] = replica

    def _delete(self, dir_name: str) -> None:
        def delete(root_fd: int) -> None:
            if self._remove_tree(dir_name, root_fd):
                os.fsync(root_fd)

        self._with_root(delete)

    def _remove_tree(self, dir_name: str, root_fd: int) -> bool:
        assert "/" not in dir_name and dir_name not in ("", ".", "..")
        with self._lock:
            self._cache.pop(dir_name, None)
        try:
            shutil.rmtree(dir_name, dir_fd=root_fd)
        except FileNotFoundError:
            return False
        return True


def _read_small(path: str, dir_fd: int) -> bytes:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC, dir_fd=dir_fd)
    try:
        chunks = []
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _write_temps(root_fd: int, replicas: Sequence[LocalReplica], temp_name: str) -> None:
    """Each replica's directory (if missing) and its temp file `temp_name`."""
    mkdir, open_, write, close = os.mkdir, os.open, os.write, os.close
    for replica in replicas:
        name = replica.dir_name
        try:  # noqa: SIM105 - contextlib.suppress costs more than the mkdir in this loop
            mkdir(name, dir_fd=root_fd)
        except FileExistsError:
            pass
        data = encode_replica(replica)
        fd = open_(name + "/" + temp_name, _CREATE_FLAGS, 0o644, dir_fd=root_fd)
        try:
            while data:
                data = data[write(fd, data):]
        finally:
            close(fd)


def _rename_temps(root_fd: int, renames: Sequence[tuple[str, LocalReplica]]) -> None:
    rename = os.rename
    for temp_name, replica in renames:
        name = replica.dir_name
        rename(name + "/" + temp_name, name + "/" + STATE_FILE, src_dir_fd=root_fd,
               dst_dir_fd=root_fd)


_JSON_STRINGS: dict[str, str] = {}


def _json_str(value: str) -> str:
    found = _JSON_STRINGS.get(value)
    if found is None:
        if len(_JSON_STRINGS) > 100_000:
            _JSON_STRINGS.clear()
        found = _JSON_STRINGS[value] = json.dumps(value)
    return found


def encode_replica(replica: LocalReplica) -> bytes:
    """`state.json`: the bytes of `json.dumps(replica_to_json(r), sort_keys=True)` and a
    newline, from a template (a test checks they are equal)."""
    return (f'{{"leader": {replica.leader:d}, "leader_epoch": {replica.leader_epoch:d}, '
            f'"partition": {replica.partition:d}, '
            f'"partition_epoch": {replica.partition_epoch:d}, '
            f'"role": {_json_str(replica.role.value)}, "topic": {_json_str(replica.topic)}, '
            f'"topic_id": {_json_str(replica.topic_id)}}}\n').encode()


__all__ = ["STATE_FILE", "TEMP_SUFFIX", "LocalPartitionStore", "encode_replica",
           "replica_from_json", "replica_to_json"]
