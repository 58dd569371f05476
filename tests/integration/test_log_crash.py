"""Crash safety with a real process: SIGKILL a writer at random moments, reopen, check.

Each round starts `tests/support/log_writer.py` on the same log directory with a
higher epoch, waits for a seeded random number of flush reports plus a seeded
random extra moment, and kills it with SIGKILL. Then the log is reopened and
must hold every record the writer reported flushed with exactly the bytes it
wrote, hold nothing that is not an exact prefix of what it wrote, and accept
appends (the next round appends to it). A kill loses nothing from the page
cache, so every other round also cuts (and may zero-pad) the last segment
anywhere past the flushed end, as a power cut could.
"""

from __future__ import annotations

import importlib.util
import os
import random
import selectors
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

import pytest

from controller.logformat.batch import peek_batch_header
from controller.storage.log import SegmentedLog

REPO = Path(__file__).resolve().parents[2]
WRITER = REPO / "tests" / "support" / "log_writer.py"
ROUNDS = 20
STARTUP_TIMEOUT_S = 20.0
ROUND_TIMEOUT_S = 20.0


def _writer_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("log_writer", WRITER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class LineReader:
    """Reads a child's stdout lines with deadlines (never blocks without a bound)."""

    def __init__(self, proc: subprocess.Popen[bytes]):
        assert proc.stdout is not None
        self.stream = proc.stdout
        os.set_blocking(self.stream.fileno(), False)
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.stream, selectors.EVENT_READ)
        self.buffer = b""
        self.eof = False

    def poll(self, timeout_s: float) -> list[str]:
        """Lines that arrive within `timeout_s` (returns early once some arrived)."""
        lines: list[str] = []
        if self.selector.select(timeout_s):
            chunk = self.stream.read()
            if chunk == b"":
                self.eof = True
            elif chunk:
                self.buffer += chunk
        while b"\n" in self.buffer:
            line, self.buffer = self.buffer.split(b"\n", 1)
            lines.append(line.decode())
        return lines

    def close(self) -> None:
        self.selector.close()


def run_round(log_dir: Path, epoch: int, rng: random.Random) -> tuple[int, int]:
    """One writer life; returns (end offset at start, highest flushed end it reported)."""
    env = dict(os.environ, PYTHONPATH=str(REPO), PYTHONUNBUFFERED="1")
    proc = subprocess.Popen([sys.executable, str(WRITER), str(log_dir), str(epoch),
                             str(rng.randrange(2**32))],
                            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    reader = LineReader(proc)
    start_offset = -1
    flushed = -1
    target_flushes = rng.randint(1, 60)
    extra_wait_s = rng.uniform(0, 0.02)
    seen = 0
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while start_offset < 0:
            assert time.monotonic() < deadline and not reader.eof, "writer did not start"
            for line in reader.poll(0.5):
                if line.startswith("READY "):
                    start_offset = int(line.split()[1])
        deadline = time.monotonic() + ROUND_TIMEOUT_S
        while seen < target_flushes:
            assert time.monotonic() < deadline and not reader.eof, "writer stalled or died"
            for line in reader.poll(0.5):
                assert line.startswith("FLUSHED "), line
                flushed = max(flushed, int(line.split()[1]))
                seen += 1
        # Kill at a random moment between flush reports: keep reading meanwhile.
        kill_at = time.monotonic() + extra_wait_s
        while (remaining := kill_at - time.monotonic()) > 0:
            for line in reader.poll(remaining):
                flushed = max(flushed, int(line.split()[1]))
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        # Lines already written before the kill are claims too.
        while not reader.eof:
            lines = reader.poll(1.0)
            if not lines and not reader.eof:
                break
            for line in lines:
                if line.startswith("FLUSHED "):
                    flushed = max(flushed, int(line.split()[1]))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        reader.close()
        assert proc.stderr is not None
        proc.stderr.close()
        assert proc.stdout is not None
        proc.stdout.close()
    assert proc.returncode == -signal.SIGKILL
    return start_offset, flushed


def lose_unflushed_tail(log_dir: Path, flushed: int, rng: random.Random) -> None:
    """Simulate a power cut on top of the kill: bytes past the flushed end may be lost
    or torn (cut anywhere, possibly followed by zeroes, as a half-written page)."""
    last = sorted(log_dir.glob("*.log"))[-1]
    data = last.read_bytes()
    pos = 0
    if int(last.name[:20]) < flushed:
        # Skip the batches that were flushed: they must survive untouched.
        while pos < len(data) and peek_batch_header(data, pos).base_offset < flushed:
            pos += peek_batch_header(data, pos).size_bytes
    cut = rng.randint(pos, len(data))
    last.write_bytes(data[:cut] + bytes(rng.choice([0, 0, 17, 4096])))


@pytest.mark.integration
def test_sigkill_never_loses_flushed_batches(tmp_path: Path) -> None:
    record_bytes = _writer_module().record_bytes
    rng = random.Random(20261122)
    log_dir = tmp_path / "log"
    started = time.monotonic()
    previous_end = 0
    repaired = 0
    for epoch in range(1, ROUNDS + 1):
        start_offset, flushed = run_round(log_dir, epoch, rng)
        assert start_offset == previous_end  # the reopened log continued where we left it
        assert flushed > start_offset
        if epoch % 2 == 0:
            lose_unflushed_tail(log_dir, flushed, rng)
        with SegmentedLog.open(log_dir) as log:
            repaired += log.recovery.reason != ""
            # Everything reported flushed is there; what follows is an exact prefix.
            assert log.end_offset >= flushed
            batches = log.read_batches(0, 1 << 40)
            offsets = [o for b in batches for o in range(b.base_offset, b.next_offset)]
            assert offsets == list(range(log.end_offset))
            for batch in batches:
                assert all(rec == record_bytes(batch.base_offset + i)
                           for i, rec in enumerate(batch.records))
            epochs = [b.epoch for b in batches]
            assert epochs == sorted(epochs) and epochs[-1] == epoch
            assert [e for e, _ in log.epoch_history()] == sorted(set(epochs))
            previous_end = log.end_offset
    # Budget ~30 s on an idle machine; generous so a loaded CI box does not flake.
    assert time.monotonic() - started < 120
    assert repaired > 0  # some rounds really had a torn tail to cut
    with SegmentedLog.open(log_dir) as log:
        assert log.segment_count > 1  # rolling happened under the kills too
