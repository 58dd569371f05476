"""``AdminStream``: the sync client's end of the multiplexed ``Admin/Stream`` RPC.

One stream per controller address, used by one thread at a time with ONE request
in flight, so a stream that ends abnormally leaves at most one request without an
answer, and the client judges it exactly as it judges a unary call that failed
the same way (``AdminClient._on_error``).

Deadlines. A sync stream cannot wait for its next message with a timeout, so a
watchdog thread (one per stream, asleep unless a deadline passes) cancels the
stream when the request in flight outlives its deadline; the request also carries
the deadline, so the server answers DEADLINE_EXCEEDED by then in the normal case.
"""

from __future__ import annotations

import math
import queue
import threading
import time
from collections.abc import Iterator
from typing import Any

import grpc

from controller.api import admin_pb2 as apb

STREAM_METHOD = "/metakraft.admin.v1.Admin/Stream"


class StreamItemError(Exception):
    """The request got an answer that is not OK: the status its unary call would have."""

    def __init__(
        self, code: grpc.StatusCode, details: str, trailing: dict[str, str] | None = None
    ) -> None:
        super().__init__(f"{code.name}: {details}")
        self.code = code
        self.details = details
        self.trailing = trailing or {}


_CODES = {code.value[0]: code for code in grpc.StatusCode}


def status_code(value: int) -> grpc.StatusCode:
    # A code this grpc does not know is still a failure, never success.
    return _CODES.get(value, grpc.StatusCode.UNKNOWN)


class _Watchdog:
    """Cancels ``call`` once the armed deadline passes (then the stream is dead)."""

    def __init__(self, call: Any) -> None:  # a grpc call (a Future): cancel()
        self._call = call
        self._cond = threading.Condition()
        self._deadline: float | None = None
        # The time the thread sleeps until: arming an earlier deadline wakes it.
        self._sleeping_until = math.inf
        self._closed = False
        self.fired = False
        threading.Thread(target=self._run, name="admin-stream-deadline", daemon=True).start()

    def arm(self, deadline: float) -> None:
        with self._cond:
            self._deadline = deadline
            if deadline < self._sleeping_until:
                self._cond.notify()

    def disarm(self) -> bool:
        """Whether it fired (the stream is cancelled even if an answer came)."""
        with self._cond:
            self._deadline = None
            return self.fired

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()

    def _run(self) -> None:
        with self._cond:
            while not self._closed:
                now = time.monotonic()
                if self._deadline is not None and now >= self._deadline:
                    self.fired = True
                    self._deadline = None
                    self._call.cancel()
                    return
                self._sleeping_until = math.inf if self._deadline is None else self._deadline
                self._cond.wait(None if self._deadline is None else self._deadline - now)


class AdminStream:
    def __init__(self, channel: grpc.Channel) -> None:
        self._outbox: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        multi: grpc.StreamStreamMultiCallable[bytes, apb.StreamResponse] = channel.stream_stream(
            STREAM_METHOD,
            request_serializer=None,  # bytes, serialized by `call`
            response_deserializer=apb.StreamResponse.FromString,
        )
        requests: Iterator[bytes] = iter(self._outbox.get, None)
        self._call: Any = multi(requests)
        self._watchdog = _Watchdog(self._call)
        self._next_id = 0
        self.broken = False
        # The trailing metadata of the last answer that was OK (e.g. a read's offset).
        self.last_trailing: dict[str, str] = {}

    def usable(self) -> bool:
        """False once the stream ended (its server went away, or it failed)."""
        return not self.broken and bool(self._call.is_active())

    def call(self, method: str, payload: bytes, timeout_s: float) -> bytes:
        """The answer's payload. Raises ``StreamItemError`` for an answer that is not
        OK or for a deadline that passed, ``grpc.RpcError`` when the stream ended
        (its status); in both of the latter cases the stream is ``broken``."""
        self._next_id += 1
        item = apb.StreamRequest(
            id=self._next_id,
            method=method,
            payload=payload,
            timeout_ms=max(1, math.ceil(timeout_s * 1000)),
        )
        self._watchdog.arm(time.monotonic() + timeout_s)
        try:
            self._outbox.put(item.SerializeToString())
            answer: apb.StreamResponse = next(self._call)
        except StopIteration:
            self.broken = True
            raise StreamItemError(
                grpc.StatusCode.UNAVAILABLE, "the stream ended without answering"
            ) from None
        except grpc.RpcError:
            self.broken = True
            if self._watchdog.disarm():
                raise StreamItemError(
                    grpc.StatusCode.DEADLINE_EXCEEDED, f"no answer within {timeout_s:.3f} s"
                ) from None
            raise
        if self._watchdog.disarm():
            self.broken = True  # cancelled just after this answer came: still valid
        if answer.id != item.id:
            self.broken = True
            raise StreamItemError(
                grpc.StatusCode.INTERNAL,
                f"the stream answered request {answer.id} while {item.id} was in flight",
            )
        if answer.status_code:
            raise StreamItemError(
                status_code(answer.status_code), answer.status_details, dict(answer.trailing)
            )
        self.last_trailing = dict(answer.trailing)
        return answer.payload

    def close(self) -> None:
        self.broken = True
        self._watchdog.close()
        self._outbox.put(None)  # half-close: the server finishes and ends the stream
        self._call.cancel()
