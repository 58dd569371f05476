"""Durable file operations: the one place that knows how to write a file atomically.

Every small state file (quorum-state, leader-epoch-checkpoint, meta.properties)
and every snapshot goes through `atomic_write_bytes` or `AtomicFileWriter`:
write a temp file next to the target, fsync it, rename it over the target,
fsync the directory. After a crash a reader sees the old file or the new one,
never a mix; a left-over temp file is garbage that `remove_temp_files` deletes.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import TracebackType
from typing import Any

import crc32c

TEMP_SUFFIX = ".tmp"


def fsync_dir(path: str | os.PathLike[str]) -> None:
    """fsync a directory so created, renamed or deleted entries survive a crash."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fdatasync(fd: int) -> None:
    """fdatasync where the platform has it (Linux), fsync elsewhere.

    fdatasync is enough for our append-only files: it flushes the data and the
    file size, skipping only timestamps.
    """
    sync = getattr(os, "fdatasync", os.fsync)
    sync(fd)


def temp_path_for(path: Path) -> Path:
    return path.with_name(path.name + TEMP_SUFFIX)


class AtomicFileWriter:
    """Write a file in pieces, then `commit()` it atomically; `abort()` removes the temp file.

    Used as a context manager, leaving the block without `commit()` aborts.
    """

    def __init__(self, path: str | os.PathLike[str]):
        self.path = Path(path)
        self.temp_path = temp_path_for(self.path)
        # O_TRUNC: a temp file left by a crashed writer is garbage, overwrite it.
        self._fd: int | None = os.open(self.temp_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC,
                                       0o644)
        self.size_bytes = 0

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._fd is None:
            raise ValueError(f"{self.path}: writer already committed or aborted")
        view = memoryview(data)
        while view:
            written = os.write(self._fd, view)
            view = view[written:]
            self.size_bytes += written

    def commit(self) -> None:
        if self._fd is None:
            raise ValueError(f"{self.path}: writer already committed or aborted")
        fd, self._fd = self._fd, None
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(self.temp_path, self.path)
        fsync_dir(self.path.parent)

    def abort(self) -> None:
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        os.close(fd)
        self.temp_path.unlink(missing_ok=True)

    @property
    def closed(self) -> bool:
        return self._fd is None

    def __enter__(self) -> AtomicFileWriter:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.abort()


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Replace `path` with `data` atomically and durably (temp, fsync, rename, dir fsync)."""
    with AtomicFileWriter(path) as writer:
        writer.write(data)
        writer.commit()


def remove_temp_files(directory: str | os.PathLike[str], suffix: str = TEMP_SUFFIX) -> list[Path]:
    """Delete half-written temp files left by a crash; returns what was removed."""
    removed = []
    for entry in Path(directory).iterdir():
        if entry.name.endswith(suffix) and entry.is_file():
            entry.unlink()
            removed.append(entry)
    if removed:
        fsync_dir(directory)
    return removed


def _canonical_json(data: dict[str, Any]) -> bytes:
    return json.dumps(data, sort_keys=True, separators=(",", ":")).encode("utf-8")


def write_checked_json(path: str | os.PathLike[str], data: dict[str, Any]) -> None:
    """Atomically write `{"data": data, "crc32c": CRC of data's canonical JSON}`:
    a small state file people can read and that tells when it is damaged."""
    outer = {"data": data, "crc32c": crc32c.crc32c(_canonical_json(data))}
    atomic_write_bytes(path, json.dumps(outer, sort_keys=True).encode("utf-8") + b"\n")


def read_checked_json(path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The `data` of a `write_checked_json` file; None if there is no file.
    Raises ValueError (or KeyError, TypeError) when it does not check out."""
    try:
        raw = Path(path).read_bytes()
    except FileNotFoundError:
        return None
    outer = json.loads(raw)
    data = outer["data"]
    if not isinstance(data, dict) or crc32c.crc32c(_canonical_json(data)) != outer["crc32c"]:
        raise ValueError("CRC-32C mismatch")
    return data
