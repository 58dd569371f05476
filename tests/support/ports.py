"""Loopback ports for the servers a test starts, safe under parallel test workers.

Ports the kernel hands out for `bind(port 0)` come from the ephemeral range
(`/proc/sys/net/ipv4/ip_local_port_range`, 32768-60999 here), which every outgoing
connection also draws from: a port picked that way and released for a child process
to bind could be taken in between by any connection on the machine (a CI run once
failed so). And under pytest-xdist, two workers picking at the same time could pick
the same released port.

So each test process draws from a block of its own below the ephemeral range
(`BLOCK_PORTS` ports per xdist worker, from `FIRST_PORT`), in order, wrapping
around; a port that cannot be bound right now (a server of an earlier test still
closing, another program) is skipped. Within one process a port is not handed out
again until its block wraps.
"""

from __future__ import annotations

import os
import threading

from controller.devcluster.ports import port_is_free

FIRST_PORT = 12_000
BLOCK_PORTS = 2_000
# Enough blocks for 8 workers; all below the ephemeral range's start (32768).
MAX_WORKERS = 8


def _worker_index() -> int:
    # "gw3" under pytest-xdist; the main process (no xdist) is worker 0.
    name = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    index = int(name.removeprefix("gw") or 0)
    return index % MAX_WORKERS


class _PortBlock:
    def __init__(self, first: int, size: int) -> None:
        assert first >= 1024 and first + size <= 32_768, (first, size)
        self.first = first
        self.size = size
        self._next = 0
        self._lock = threading.Lock()

    def take(self, count: int) -> list[int]:
        with self._lock:
            chosen: list[int] = []
            for _ in range(self.size):
                if len(chosen) == count:
                    break
                port = self.first + self._next
                self._next = (self._next + 1) % self.size
                if port_is_free(port):
                    chosen.append(port)
            if len(chosen) < count:
                raise OSError(f"only {len(chosen)} of {count} ports free in "
                              f"{self.first}-{self.first + self.size - 1}")
            return chosen


_block = _PortBlock(FIRST_PORT + _worker_index() * BLOCK_PORTS, BLOCK_PORTS)


def free_ports(count: int) -> list[int]:
    """`count` distinct loopback ports, free right now, from this process's block."""
    if count < 0:
        raise ValueError(f"count must be >= 0, got {count}")
    return _block.take(count)
