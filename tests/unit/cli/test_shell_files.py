"""`metakraft shell` over real files: a data directory written with the real log and
snapshot writers (fsync and all), read whole, at an offset (snapshot then log), and
damaged; and the interactive shell under a pseudo-terminal (prompt_toolkit's line
editing and completion)."""

from __future__ import annotations

import os
import pty
import random
import select
import time
from pathlib import Path

import pytest

from controller.cli.shell_sources import ImageBuilder, ShellSourceError, from_files, from_snapshot
from controller.logformat import SnapshotId
from controller.metadata import MetadataState
from controller.records import encode_record
from controller.storage.log import SegmentedLog
from controller.storage.meta_properties import DataDir, format_data_dir
from controller.storage.snapshot_file import SnapshotWriter
from tests.support.processes import REPO_ROOT, metakraft_command
from tests.unit.cli.test_shell import batches


def data_dir_with_log(tmp_path: Path, *, snapshot_after: int | None = None) -> Path:
    """A formatted data directory holding every test batch; with `snapshot_after`, a
    snapshot of the state after that many batches too."""
    root = tmp_path / "data"
    format_data_dir(root, "c" * 22, 1)
    every = batches()
    with SegmentedLog.open(DataDir(root).log_dir) as log:
        for batch in every:
            log.append(batch)
        log.flush()
    if snapshot_after is not None:
        state = MetadataState(cluster_id="c", rng=random.Random(0))
        for batch in every[:snapshot_after]:
            state.replay_encoded(batch.records, batch.base_offset)
        end = every[snapshot_after - 1].next_offset
        writer = SnapshotWriter(DataDir(root).snapshot_dir, SnapshotId(end, 1))
        writer.append(encode_record(r) for r in state.snapshot_records())
        writer.freeze()
    return root


def names(image: object) -> list[str]:
    state = image.state  # type: ignore[attr-defined]
    return sorted(t.name for t in state.replication.list_topics())


def test_a_log_directory_whole_and_at_an_offset(tmp_path: Path) -> None:
    every = batches()
    root = data_dir_with_log(tmp_path, snapshot_after=len(every) - 2)
    whole = from_files(root, None, None)
    assert whole.offset == every[-1].last_offset and names(whole) == ["audit", "orders"]
    # The same as replaying the batches in memory.
    builder = ImageBuilder("memory")
    for batch in every:
        builder.apply(batch)
    assert whole.state.to_image() == builder.source.state.to_image()
    # Before "audit" (the last batch): from the snapshot (which ends before "orders"
    # was created) plus the log up to the offset.
    before_audit = from_files(root, None, every[-1].base_offset - 1)
    assert before_audit.offset == every[-1].base_offset - 1
    assert names(before_audit) == ["orders"]
    # The metadata/ directory itself works too.
    assert names(from_files(DataDir(root).log_dir, None, None)) == ["audit", "orders"]
    # The snapshot file alone.
    snapshot = next(DataDir(root).snapshot_dir.glob("*.checkpoint"))
    assert names(from_snapshot(snapshot)) == []


def test_bad_sources_are_refused_in_words(tmp_path: Path) -> None:
    root = data_dir_with_log(tmp_path)
    with pytest.raises(ShellSourceError, match="before --at-offset 999"):
        from_files(root, None, 999)
    with pytest.raises(ShellSourceError, match="no such log directory"):
        from_files(tmp_path / "nowhere", None, None)
    # A flipped byte in the middle of the log: the read stops naming the damage.
    segment = next(DataDir(root).log_dir.glob("*.log"))
    data = bytearray(segment.read_bytes())
    data[len(data) // 2] ^= 0xFF
    segment.write_bytes(bytes(data))
    with pytest.raises(ShellSourceError, match="cannot read log directory"):
        from_files(root, None, None)
    # A file that is not a snapshot.
    junk = tmp_path / "00000000000000000010-0000000001.checkpoint"
    junk.write_bytes(b"not a snapshot")
    with pytest.raises(ShellSourceError, match="cannot read snapshot"):
        from_snapshot(junk)


def test_the_interactive_shell_completes_paths_and_answers(tmp_path: Path) -> None:
    root = data_dir_with_log(tmp_path)
    pid, fd = pty.fork()
    if pid == 0:  # the child: the shell on the pseudo-terminal
        os.chdir(REPO_ROOT)
        os.environ["PYTHONPATH"] = str(REPO_ROOT)
        command = metakraft_command("shell", "--log-dir", str(root))
        os.execv(command[0], command)
    seen = ""

    def until(text: str, timeout_s: float = 30.0) -> None:
        """Read the terminal until `text` shows (bounded)."""
        nonlocal seen
        deadline = time.monotonic() + timeout_s
        while text not in seen:
            assert time.monotonic() < deadline, f"no {text!r} on the terminal:\n{seen[-2000:]}"
            ready, _, _ = select.select([fd], [], [], 0.1)
            if ready:
                try:
                    seen += os.read(fd, 65536).decode(errors="replace")
                except OSError:
                    break

    try:
        until("metakraft:/ (offset")
        os.write(fd, b"cat /topics/au\t")  # completes the one match
        until("audit/")
        os.write(fd, b"id\r")
        until("\n", 5)
        os.write(fd, b"ls /topics/orders\r")
        until("11")
        os.write(fd, b"exit\r")
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0, seen[-2000:]
    finally:
        try:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
        os.close(fd)
