"""A network nemesis for real-process tests: a TCP proxy on loopback for every
directed link between two named endpoints, which can cut, slow down or drop the
traffic of a link in one or both directions, and heal.

`link(src, dst, address)` returns the loopback address `src` must dial to reach
`dst` (its config names that, not `dst`'s own port); everything `src` sends on
connections it opens to `dst` is the direction (src, dst), the answers (dst, src).
A test partitions processes that keep running, which kills and pauses cannot show.

A cut is a black hole, as a real partition is: nothing is forwarded either way,
nothing is refused, connections stay open (the kernel buffers, then TCP flow
control stops the sender) and new ones are accepted but hear nothing. Healing lets
the buffered bytes through, as TCP retransmission would after a real partition;
peers whose keepalive gave up meanwhile have already reconnected. Delay holds each
chunk before forwarding it; drop (`flaky`) closes a connection at random when data
crosses it, which gRPC sees as a broken connection.

Everything runs on one asyncio loop in a daemon thread; every call is thread-safe
and bounded (`close()` stops all of it, and the proxies only ever talk to loopback).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import threading
from collections.abc import Iterable

Link = tuple[str, str]
_CHUNK = 64 * 1024
_POLL_S = 0.01


class Nemesis:
    def __init__(self, seed: int = 0) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="nemesis",
                                        daemon=True)
        self._thread.start()
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._cut: set[Link] = set()
        self._delay_s: dict[Link, float] = {}
        self._drop_p: dict[Link, float] = {}
        self._servers: dict[Link, asyncio.Server] = {}
        self._addresses: dict[Link, str] = {}
        self._writers: set[asyncio.StreamWriter] = set()

    # -- topology ----------------------------------------------------------------------

    def link(self, src: str, dst: str, address: str) -> str:
        """The address `src` dials to reach `dst` (served at `address`)."""
        with self._lock:
            known = self._addresses.get((src, dst))
        if known is not None:
            return known
        host, _, port = address.rpartition(":")
        assert host in ("127.0.0.1", "localhost"), "the nemesis proxies loopback only"
        future = asyncio.run_coroutine_threadsafe(self._serve(src, dst, host, int(port)),
                                                  self._loop)
        proxied = future.result(10)
        with self._lock:
            self._addresses[(src, dst)] = proxied
        return proxied

    async def _serve(self, src: str, dst: str, host: str, port: int) -> str:
        async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await self._connection(src, dst, host, port, reader, writer)

        server = await asyncio.start_server(accept, "127.0.0.1", 0)
        self._servers[(src, dst)] = server
        return f"127.0.0.1:{server.sockets[0].getsockname()[1]}"

    async def _connection(self, src: str, dst: str, host: str, port: int,
                          down_reader: asyncio.StreamReader,
                          down_writer: asyncio.StreamWriter) -> None:
        self._writers.add(down_writer)
        try:
            # A connection opened while the link is cut hears nothing until it heals.
            await self._wait_open((src, dst))
            up_reader, up_writer = await asyncio.open_connection(host, port)
        except OSError:
            self._writers.discard(down_writer)
            down_writer.close()
            return
        self._writers.add(up_writer)
        pumps = [asyncio.ensure_future(self._pump(down_reader, up_writer, (src, dst))),
                 asyncio.ensure_future(self._pump(up_reader, down_writer, (dst, src)))]
        await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
        for pump in pumps:
            pump.cancel()
        for writer in (down_writer, up_writer):
            self._writers.discard(writer)
            writer.close()

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                    direction: Link) -> None:
        with contextlib.suppress(OSError, asyncio.IncompleteReadError):
            while True:
                await self._wait_open(direction)
                data = await reader.read(_CHUNK)
                if not data:
                    return
                with self._lock:
                    delay_s = self._delay_s.get(direction, 0.0)
                    drop = self._rng.random() < self._drop_p.get(direction, 0.0)
                if drop:
                    return  # the connection breaks
                if delay_s:
                    await asyncio.sleep(delay_s)
                # Cut while this chunk was read or held: it waits, as TCP would.
                await self._wait_open(direction)
                writer.write(data)
                await writer.drain()

    async def _wait_open(self, direction: Link) -> None:
        while self.is_cut(*direction):
            await asyncio.sleep(_POLL_S)

    # -- faults --------------------------------------------------------------------------

    def is_cut(self, src: str, dst: str) -> bool:
        with self._lock:
            return (src, dst) in self._cut

    def cut(self, a: str, b: str, *, both: bool = True) -> None:
        """Nothing from `a` reaches `b` (and, if `both`, nothing from `b` reaches `a`)."""
        with self._lock:
            self._cut.add((a, b))
            if both:
                self._cut.add((b, a))

    def isolate(self, name: str, others: Iterable[str]) -> None:
        """`name` can neither reach nor be reached by any of `others`."""
        for other in others:
            if other != name:
                self.cut(name, other)

    def delay(self, a: str, b: str, delay_ms: int) -> None:
        with self._lock:
            self._delay_s[(a, b)] = delay_ms / 1000

    def flaky(self, a: str, b: str, drop_p: float) -> None:
        """Each chunk from `a` to `b` breaks its connection with probability `drop_p`."""
        assert 0.0 <= drop_p <= 1.0
        with self._lock:
            self._drop_p[(a, b)] = drop_p

    def heal(self, a: str | None = None, b: str | None = None) -> None:
        """Undo every fault between `a` and `b` (both directions); no names: all."""
        with self._lock:
            if a is None or b is None:
                self._cut.clear()
                self._delay_s.clear()
                self._drop_p.clear()
                return
            for key in ((a, b), (b, a)):
                self._cut.discard(key)
                self._delay_s.pop(key, None)
                self._drop_p.pop(key, None)

    def close(self) -> None:
        async def stop() -> None:
            for server in self._servers.values():
                server.close()
            for writer in list(self._writers):
                writer.close()

        self.heal()
        if self._thread.is_alive():
            with contextlib.suppress(Exception):
                asyncio.run_coroutine_threadsafe(stop(), self._loop).result(5)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(5)
