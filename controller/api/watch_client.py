"""Following the metadata log from outside: `Watcher`, the client of ``Watch``.

A `Watcher` yields `WatchUpdate`s (events in log order, and the resume token
`next_offset`) and survives what ends a watch at one controller: a controller that
dies, stops, restarts or falls behind, or cuts a slow watcher off. It then watches
again from its own token (the last `next_offset` it received, never the server's
guess), at the next controller, with backoff: no event is lost or repeated across
the resumption. A controller that goes silent (no response, not even the
server's keep-alive progress, for `stall_timeout_ms`) is left the same way.

Only what no other controller would answer differently ends the iteration, as a
`WatchFailedError`: a start offset below the history or beyond the end
(OUT_OF_RANGE), a malformed request, a denied one, or `timeout_ms` without any
controller answering.
"""

from __future__ import annotations

import queue
import random
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

import attrs
import grpc

from controller.api import admin_pb2 as apb
from controller.api import admin_pb2_grpc as apb_grpc
from controller.api.client import AdminClient, AdminClientError
from controller.backoff import Backoff

# Codes after which another controller (or the same, later) may serve the watch.
_RESUMABLE = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.RESOURCE_EXHAUSTED,
                        grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED,
                        grpc.StatusCode.UNKNOWN, grpc.StatusCode.ABORTED})
# The server sends progress at least every 5 s (a keep-alive) while a watch is idle.
DEFAULT_STALL_TIMEOUT_MS = 15_000


class WatchFailedError(AdminClientError):
    def __init__(self, code: grpc.StatusCode | None, details: str) -> None:
        super().__init__(details if code is None else f"{code.name}: {details}")
        self.code = code
        self.details = details


@attrs.frozen
class WatchUpdate:
    """One response: events (possibly none: progress), the resume token, and how far
    the answering controller had committed."""

    events: tuple[apb.WatchEvent, ...]
    next_offset: int
    committed_offset: int
    controller: str


class Watcher:
    def __init__(self, client: AdminClient, *, from_offset: int | None = None,
                 resource_types: Sequence[int] = (), topic: str = "", topic_prefix: str = "",
                 progress_interval_ms: int = 0,
                 stall_timeout_ms: int = DEFAULT_STALL_TIMEOUT_MS) -> None:
        self._client = client
        # The resume token: None until the first response of a watch "from now".
        self.next_offset = from_offset
        self._types = tuple(resource_types)
        self._topic, self._prefix = topic, topic_prefix
        self._progress_ms = progress_interval_ms
        self._stall_s = stall_timeout_ms / 1e3
        self._call: Any = None
        self._closed = False
        # Watches started again after a fault, and the faults (diagnostics, tests).
        self.resumptions = 0
        self.faults: list[str] = []
        self._addresses = client.bootstrap_addresses
        self._next = 0  # the first bootstrap address first (list them to spread watchers)

    def close(self) -> None:
        self._closed = True
        call = self._call
        if call is not None:
            call.cancel()

    def _request(self) -> apb.WatchRequest:
        request = apb.WatchRequest(topic=self._topic, topic_prefix=self._prefix,
                                   progress_interval_ms=self._progress_ms)
        request.resource_types.extend(apb.WatchResourceType.ValueType(t) for t in self._types)
        if self.next_offset is not None:
            request.from_offset = self.next_offset
        return request

    def __iter__(self) -> Iterator[WatchUpdate]:
        backoff = Backoff(0.05, 1.0, random.random)
        timeout_s = self._client.timeout_ms / 1e3
        last_answer = time.monotonic()
        while not self._closed:
            address = self._addresses[self._next % len(self._addresses)]
            stub = apb_grpc.AdminStub(self._client.channel(address))
            call = self._call = stub.Watch(self._request())
            problem = ""
            try:
                for response in self._responses(call):
                    last_answer = time.monotonic()
                    backoff.reset()
                    update = self._take(response, address)
                    if update is not None:
                        yield update
                    if self._closed:
                        return
                problem = "the controller ended the watch"
            except grpc.RpcError as exc:
                code = exc.code()
                if self._closed:
                    return
                if code not in _RESUMABLE:
                    raise WatchFailedError(code, exc.details() or "") from None
                problem = f"{code.name}: {exc.details()}"
            except _StallError:
                problem = f"no response from {address} for {self._stall_s:.0f} s"
            finally:
                call.cancel()
            self.faults.append(f"{address}: {problem}")
            if time.monotonic() - last_answer > timeout_s:
                raise WatchFailedError(None, f"no controller served the watch for "
                                             f"{timeout_s:.0f} s; last: {problem}")
            self._next += 1
            self.resumptions += 1
            time.sleep(backoff.next_delay())

    def _take(self, response: apb.WatchResponse, address: str) -> WatchUpdate | None:
        # A controller never sends what is below the token asked for; kept out
        # anyway, so a server bug cannot make a watcher see an event twice.
        floor = self.next_offset if self.next_offset is not None else -1
        events = tuple(e for e in response.events if e.offset >= floor)
        if self.next_offset is not None and response.next_offset < self.next_offset:
            return None
        self.next_offset = response.next_offset
        return WatchUpdate(events, response.next_offset, response.committed_offset, address)

    def _responses(self, call: Any) -> Iterator[apb.WatchResponse]:
        """The call's responses, read on a thread so a silent controller is noticed."""
        # One response waits at most: a watcher that does not take its events holds
        # the stream still, and the controller cuts it off rather than buffer.
        answers: queue.Queue[Any] = queue.Queue(maxsize=1)
        done = threading.Event()

        def hand_over(item: Any) -> bool:
            while not done.is_set():
                try:
                    answers.put(item, timeout=0.2)
                    return True
                except queue.Full:
                    continue
            return False

        def read() -> None:
            try:
                for response in call:
                    if not hand_over(response):
                        return
                hand_over(None)
            except grpc.RpcError as exc:
                hand_over(exc)

        threading.Thread(target=read, name="watch-reader", daemon=True).start()
        try:
            while True:
                try:
                    item = answers.get(timeout=self._stall_s)
                except queue.Empty:
                    raise _StallError() from None
                if item is None:
                    return
                if isinstance(item, grpc.RpcError):
                    raise item
                yield item
        finally:
            done.set()


class _StallError(Exception):
    pass


__all__ = ["WatchFailedError", "WatchUpdate", "Watcher"]
