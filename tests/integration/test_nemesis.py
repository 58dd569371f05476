"""The network nemesis itself (tests/support/nemesis.py), on a loopback echo server:
traffic passes, a cut is a black hole in the directions cut, heal lets the held
bytes through, delay holds them, a flaky link breaks connections."""

from __future__ import annotations

import socket
import socketserver
import threading
import time
from collections.abc import Iterator

import pytest

from tests.support.nemesis import Nemesis


class _Echo(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        while data := self.request.recv(4096):
            self.request.sendall(data)


@pytest.fixture
def echo() -> Iterator[str]:
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Echo)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture
def nemesis() -> Iterator[Nemesis]:
    n = Nemesis(seed=1)
    yield n
    n.close()


def _dial(address: str) -> socket.socket:
    host, _, port = address.rpartition(":")
    return socket.create_connection((host, int(port)), timeout=5)


def _echoes(conn: socket.socket, data: bytes, timeout_s: float) -> bytes:
    conn.settimeout(timeout_s)
    conn.sendall(data)
    got = b""
    try:
        while len(got) < len(data):
            chunk = conn.recv(4096)
            if not chunk:
                break
            got += chunk
    except TimeoutError:
        pass
    return got


def test_traffic_passes_and_a_cut_is_a_black_hole_until_healed(
        echo: str, nemesis: Nemesis) -> None:
    via = nemesis.link("a", "b", echo)
    with _dial(via) as conn:
        assert _echoes(conn, b"hello", 5) == b"hello"
        nemesis.cut("a", "b", both=False)  # only a -> b
        assert _echoes(conn, b"lost?", 0.3) == b"", "nothing crosses a cut link"
        nemesis.heal("a", "b")
        conn.settimeout(5)
        assert conn.recv(16) == b"lost?", "held, not lost: delivered on heal"


def test_the_answer_direction_can_be_cut_alone(echo: str, nemesis: Nemesis) -> None:
    via = nemesis.link("a", "b", echo)
    with _dial(via) as conn:
        nemesis.cut("b", "a", both=False)  # requests pass, answers do not
        assert _echoes(conn, b"ping", 0.3) == b""
        nemesis.heal()
        conn.settimeout(5)
        assert conn.recv(16) == b"ping"


def test_a_connection_opened_during_a_cut_hears_nothing_until_healed(
        echo: str, nemesis: Nemesis) -> None:
    via = nemesis.link("a", "b", echo)
    nemesis.isolate("a", ["b", "c"])
    with _dial(via) as conn:  # accepted by the proxy, not forwarded
        assert _echoes(conn, b"x", 0.3) == b""
        nemesis.heal()
        conn.settimeout(5)
        assert conn.recv(16) == b"x"


def test_delay_holds_each_chunk(echo: str, nemesis: Nemesis) -> None:
    via = nemesis.link("a", "b", echo)
    with _dial(via) as conn:
        nemesis.delay("a", "b", 300)
        start = time.monotonic()
        assert _echoes(conn, b"slow", 5) == b"slow"
        held_s = time.monotonic() - start
    assert held_s >= 0.3  # a lower bound the delay guarantees, not a speed claim


def test_a_flaky_link_breaks_connections(echo: str, nemesis: Nemesis) -> None:
    via = nemesis.link("a", "b", echo)
    nemesis.flaky("a", "b", 1.0)
    with _dial(via) as conn:
        conn.settimeout(5)
        conn.sendall(b"boom")
        assert conn.recv(16) == b"", "the proxy closed the connection"
