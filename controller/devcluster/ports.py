"""Free loopback ports for the dev cluster.

A port is "free" when we can bind it right now. Picking binds every wanted port at
once (so the kernel hands out distinct ones) and releases them just before the
processes start; another program can still take one in between, which the
supervisor notices as a bind failure and answers by picking again.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Collection

LOOPBACK = "127.0.0.1"


def port_is_free(port: int, host: str = LOOPBACK) -> bool:
    """Whether `port` can be bound on `host` now (SO_REUSEADDR, as servers bind)."""
    if not 0 < port < 65536:
        return False
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # A server that just exited leaves TIME_WAIT connections; gRPC binds over them.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def pick_free_ports(count: int, host: str = LOOPBACK, *,
                    avoid: Collection[int] = (), attempts: int = 20) -> list[int]:
    """`count` distinct free ports, none of them in `avoid` (ports already given out).

    The OS may hand back a port in `avoid` (it was released, not in use): such a port
    is held open and another drawn, up to `attempts` extra draws.
    """
    if count < 0:
        raise ValueError(f"count must be >= 0, got {count}")
    held: list[socket.socket] = []
    chosen: list[int] = []
    try:
        draws_left = count + attempts
        while len(chosen) < count:
            if draws_left == 0:
                raise OSError(f"could not find {count} free ports on {host}")
            draws_left -= 1
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            held.append(sock)  # kept bound until the end, so the next draw differs
            sock.bind((host, 0))
            port = int(sock.getsockname()[1])
            if port not in avoid:
                chosen.append(port)
        return chosen
    finally:
        for sock in held:
            with contextlib.suppress(OSError):
                sock.close()
