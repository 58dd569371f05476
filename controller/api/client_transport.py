"""The transport under ``AdminClient`` (controller/api/client.py): finding the
controller, deadlines, retries and the multiplexed stream.

Finding the controller. Any controller answers: the active one serves, the others
answer FAILED_PRECONDITION naming the leader in trailing metadata
(``x-metakraft-leader-address``), and the client goes there. When the leader is
unknown (an election), it walks the bootstrap addresses with bounded exponential
backoff. The last controller that answered is tried first next time.

Following the leader, not the connection. Each attempt has its own deadline,
``attempt_timeout_ms`` (1 s by default) under the call's ``timeout_ms``: an attempt
that gets no answer in time (a hung or partitioned leader, a connection that broke)
is abandoned, the controller it went to is passed over, and the next attempt asks
the next bootstrap address, which answers or names the new leader. A hung leader
so costs a client about one election plus one attempt, not its whole timeout.

What is retried (until ``timeout_ms`` runs out), always with the call's one request
id:
- reads: every transport fault (unreachable, busy, not controller, a timeout);
- writes: the same. The controllers keep a replicated table of recent writes by
  (principal, request id), so a retry of a write that was applied -- even by a
  leader that died before answering -- gets the first answer instead of being
  applied again (exactly once; the window is the table's: 10 minutes and 20,000
  writes by default). Only when the call's deadline passes with the outcome still
  unknown does a write raise ``OutcomeUnknownError`` (the request id to look for).
  A busy controller refused the write before queueing it: ``ControllerOverloadedError``,
  not retried (the caller decides when to try again).

Transport. Requests go over one multiplexed ``Admin/Stream`` per controller
(``stream_client.AdminStream``), far cheaper per request than a unary call for
both sides; the rules above are the same because the stream carries one request
at a time and a stream failure is judged like the failure of that unary call. A
controller without ``Stream`` (UNIMPLEMENTED) is then called unary.
"""
from __future__ import annotations

import random
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any, Self

import grpc
from google.protobuf import message_factory

from controller import rpc
from controller.api import admin_pb2 as apb
from controller.api import admin_pb2_grpc as apb_grpc
from controller.api.handlers import (
    BUSY_KEY,
    HIGH_WATERMARK_KEY,
    LEADER_ADDRESS_KEY,
    LEADER_ID_KEY,
    READ_OFFSET_KEY,
)
from controller.api.rpcs import ADMIN_RPCS_BY_NAME, AdminRpc
from controller.api.seam import (
    Args,
    ReadConsistency,
)
from controller.api.stream_client import AdminStream, StreamItemError
from controller.backoff import Backoff
from controller.security.tls import TlsCredentials

DEFAULT_TIMEOUT_MS = 30_000
# One attempt's deadline: long enough for a large write in a healthy cluster (the
# retry of a slow write joins it), short enough that a hung leader costs ~1 s.
DEFAULT_ATTEMPT_TIMEOUT_MS = 1_000
_BACKOFF_FIRST_MS = 25
_BACKOFF_MAX_MS = 1_000
# Redirects followed back to back before backing off (a leader change in progress
# can bounce a request between two nodes for a moment).
_FREE_REDIRECTS = 3
_RESPONSE_CLASSES = {
    m.name: message_factory.GetMessageClass(m.output_type)
    for m in apb.DESCRIPTOR.services_by_name["Admin"].methods
}


_CONSISTENCY_TO_PB = {
    ReadConsistency.LINEARIZABLE: apb.READ_CONSISTENCY_LINEARIZABLE,
    ReadConsistency.STALE: apb.READ_CONSISTENCY_STALE,
}


class AdminClientError(Exception):
    """Base of the client's errors."""


class ControllerUnreachableError(AdminClientError):
    """No controller answered in time. A write was never delivered: not applied."""


class ControllerOverloadedError(AdminClientError):
    """The controller refused the request as busy before queueing it: not applied."""


class OutcomeUnknownError(AdminClientError):
    """A write was sent but no answer came: it may or may not be applied."""

    def __init__(self, message: str, request_id: str) -> None:
        super().__init__(message)
        self.request_id = request_id


class RequestFailedError(AdminClientError):
    """The controller refused the whole request (malformed, too large, internal)."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(f"{code.name}: {details}")
        self.code = code
        self.details = details


def parse_bootstrap(addresses: Sequence[str]) -> list[str]:
    """Validate HOST:PORT addresses (also comma-separated within one string)."""
    found: list[str] = []
    for chunk in addresses:
        for address in (a.strip() for a in chunk.split(",")):
            if not address:
                continue
            host, sep, port = address.rpartition(":")
            if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
                raise ValueError(f"bootstrap address {address!r} is not HOST:PORT")
            if address not in found:
                found.append(address)
    if not found:
        raise ValueError("no bootstrap address given (HOST:PORT[,HOST:PORT...])")
    return found


def _trailing(exc: grpc.RpcError) -> dict[str, str]:
    call: Any = exc  # a grpc.Call as well, for unary calls
    try:
        pairs = call.trailing_metadata() or ()
    except AttributeError:
        return {}
    return {str(k): str(v) for k, v in pairs}


def _never_sent(exc: grpc.RpcError) -> bool:
    """gRPC could not pick a connection for the call, so it never left the client."""
    return "failed to connect to all addresses" in (exc.details() or "")


class AdminTransport:
    def __init__(
        self,
        bootstrap: Sequence[str],
        *,
        timeout_ms: int = DEFAULT_TIMEOUT_MS,
        tls: TlsCredentials | None = None,
        limits: rpc.RpcLimits | None = None,
        sleep: Callable[[float], None] = time.sleep,
        consistency: ReadConsistency = ReadConsistency.LINEARIZABLE,
        attempt_timeout_ms: int = DEFAULT_ATTEMPT_TIMEOUT_MS,
        session_consistent: bool = True,
    ) -> None:
        if timeout_ms <= 0 or attempt_timeout_ms <= 0:
            raise ValueError("timeouts must be positive")
        self._attempt_timeout_ms = attempt_timeout_ms
        self._bootstrap = parse_bootstrap(bootstrap)
        self._timeout_ms = timeout_ms
        self._tls = tls
        self._limits = limits or rpc.RpcLimits()
        self._sleep = sleep
        self._channels: dict[str, grpc.Channel] = {}
        # One stub per channel: a stub builds a callable for each of the service's
        # methods, too much to redo on every call.
        self._stubs: dict[str, Any] = {}
        self._streams: dict[str, AdminStream] = {}
        # Controllers that answered UNIMPLEMENTED to Stream: called unary.
        self._unary_only: set[str] = set()
        self._next_bootstrap = 0
        # The address that last answered as the active controller.
        self.leader_address: str | None = None
        self.leader_id: int | None = None
        # The request id of the last call (to look for in the log after an unknown outcome).
        self.last_request_id = ""
        # Writes resent after an attempt whose outcome was unknown (diagnostics, tests).
        self.outcome_unknown_retries = 0
        # How reads are served (STALE: any controller answers at once, maybe behind),
        # and the committed end offset the last read was served at.
        self.consistency = consistency
        self.last_read_offset: int | None = None
        # A stale read's answer: the high watermark the answering controller knew.
        self.last_high_watermark: int | None = None
        # Session consistency (ZooKeeper's session guarantee): the highest committed
        # end offset any answer named, sent as every read's min_offset, so no read
        # shows older state than this client already saw, whichever controller
        # answers. Another client may be handed it to continue the session.
        self.session_consistent = session_consistent
        self.session_offset = 0

    def close(self) -> None:
        for stream in self._streams.values():
            stream.close()
        self._streams.clear()
        for channel in self._channels.values():
            channel.close()
        self._channels.clear()
        self._stubs.clear()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    @property
    def bootstrap_addresses(self) -> tuple[str, ...]:
        return tuple(self._bootstrap)

    @property
    def timeout_ms(self) -> int:
        return self._timeout_ms

    def channel(self, address: str) -> grpc.Channel:
        """This client's channel to `address` (its TLS and message limits), for calls
        the retry loop does not make (`watch_client.Watcher`)."""
        return self._channel(address)

    # -- the retry loop ----------------------------------------------------------------

    def _channel(self, address: str) -> grpc.Channel:
        channel = self._channels.get(address)
        if channel is None:
            channel = self._channels[address] = rpc.create_sync_channel(address, self._limits,
                                                                           self._tls)
        return channel

    def _skip(self, address: str) -> None:
        """Try another controller next: the known leader is forgotten if it was this
        one, and the bootstrap walk moves past it."""
        if address == self.leader_address:
            self.leader_address = None
        if address in self._bootstrap:
            self._next_bootstrap = self._bootstrap.index(address) + 1

    def _drop(self, address: str) -> None:
        # A failed channel may sit in reconnect backoff; a fresh one tries at once.
        self._close_stream(address)
        channel = self._channels.pop(address, None)
        self._stubs.pop(address, None)
        if channel is not None:
            channel.close()
        self._skip(address)

    def _close_stream(self, address: str) -> None:
        stream = self._streams.pop(address, None)
        if stream is not None:
            stream.close()

    def _forget_dead_stream(self, address: str) -> None:
        """A stream that ended (its server went away, or a deadline cancelled it) is
        replaced."""
        stream = self._streams.get(address)
        if stream is not None and not stream.usable():
            self._close_stream(address)

    def streaming_to(self, address: str) -> bool:
        """Whether this client holds a live stream to ``address`` (diagnostics, tests).

        A write sent on a stream whose end the client has not yet seen (gRPC records
        it on its own thread) gets no answer; it is resent under the same request id
        (the controllers apply it at most once)."""
        stream = self._streams.get(address)
        return stream is not None and stream.usable()

    def _send(self, target: str, method: str, request: Any,
              timeout_s: float) -> tuple[Any, dict[str, str]]:
        """The response and the call's trailing metadata."""
        if target in self._unary_only:
            stub = self._stubs.get(target)
            if stub is None:
                stub = self._stubs[target] = apb_grpc.AdminStub(self._channel(target))
            response, call = getattr(stub, method).with_call(request, timeout=timeout_s)
            return response, {str(k): str(v) for k, v in call.trailing_metadata() or ()}
        stream = self._streams.get(target)
        if stream is None:
            stream = self._streams[target] = AdminStream(self._channel(target))
        payload = stream.call(method, request.SerializeToString(), timeout_s)
        return _RESPONSE_CLASSES[method].FromString(payload), stream.last_trailing

    def _new_request_id(self) -> str:
        """One per call, kept across its retries (what makes them exactly-once)."""
        return uuid.uuid4().hex

    def _target(self) -> str:
        if self.leader_address is not None:
            return self.leader_address
        return self._bootstrap[self._next_bootstrap % len(self._bootstrap)]

    def _call(self, method: str, request: Any, *, attempt_timeout_ms: int | None = None) -> Any:
        spec = ADMIN_RPCS_BY_NAME[method]
        write = spec.write
        request_id = self._new_request_id()
        self.last_request_id = request_id
        request.header.request_id = request_id
        if not write:
            request.header.consistency = _CONSISTENCY_TO_PB[self.consistency]
            if self.session_consistent:
                request.header.min_offset = self.session_offset
            self.last_read_offset = self.last_high_watermark = None
        deadline = time.monotonic() + self._timeout_ms / 1000
        backoff = Backoff(_BACKOFF_FIRST_MS / 1000, _BACKOFF_MAX_MS / 1000, random.random)
        redirects = 0
        problem = "no attempt made"
        # A controller's answer that it is behind the session (worth more to the
        # caller than the last attempt's timeout, which may follow it).
        behind = ""
        unknown_before = self.outcome_unknown_retries
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0 and write and self.outcome_unknown_retries > unknown_before:
                raise OutcomeUnknownError(
                    f"{method} got no answer within {self._timeout_ms} ms; an attempt may "
                    f"have been applied (at most once): check before retrying, or retry "
                    f"with request id {request_id} (last problem: {problem})", request_id)
            if remaining <= 0:
                raise ControllerUnreachableError(
                    f"no controller answered {method} within {self._timeout_ms} ms "
                    f"(tried {', '.join(self._bootstrap)}); last problem: {problem}"
                    + (f"; before that {behind}" if behind and behind != problem else "")
                    + ("" if self._tls is not None else
                       " (if the controllers require TLS, give the client a certificate: "
                       "--command-config or METAKRAFT_COMMAND_CONFIG)")
                )
            target = self._target()
            self._forget_dead_stream(target)
            retry_now = False
            attempt_s = min(remaining, (attempt_timeout_ms or self._attempt_timeout_ms) / 1000)
            try:
                response, trailing = self._send(target, method, request, attempt_s)
                if (self.consistency is ReadConsistency.LINEARIZABLE or write) and not spec.local:
                    self.leader_address = target  # only the active one answers these
                offset = trailing.get(READ_OFFSET_KEY, "")
                if offset.isdigit():
                    self.session_offset = max(self.session_offset, int(offset))
                    if not write:
                        self.last_read_offset = int(offset)
                high_watermark = trailing.get(HIGH_WATERMARK_KEY, "")
                if not write and high_watermark.isdigit():
                    self.last_high_watermark = int(high_watermark)
                return response
            except StreamItemError as item:
                problem = f"{target}: {item.code.name}: {item.details}"
                behind = problem if item.details.startswith("BEHIND") else behind
                retry_now = self._on_error(
                    item.code,
                    item.details,
                    item.trailing,
                    False,
                    target,
                    method,
                    write,
                    request_id,
                    item,
                )
            except grpc.RpcError as exc:
                code, details = exc.code(), exc.details() or ""
                problem = f"{target}: {code.name}: {details}"
                behind = problem if details.startswith("BEHIND") else behind
                if code is grpc.StatusCode.UNIMPLEMENTED and target not in self._unary_only:
                    # A controller without Stream: the request was never handled.
                    self._close_stream(target)
                    self._unary_only.add(target)
                    continue
                retry_now = self._on_error(
                    code,
                    details,
                    _trailing(exc),
                    _never_sent(exc),
                    target,
                    method,
                    write,
                    request_id,
                    exc,
                )
            if retry_now and redirects < _FREE_REDIRECTS:
                redirects += 1
                continue
            redirects = 0
            self._sleep(min(backoff.next_delay(), max(0.0, deadline - time.monotonic())))

    def _on_error(
        self,
        code: grpc.StatusCode,
        details: str,
        trailing: dict[str, str],
        never_sent: bool,
        target: str,
        method: str,
        write: bool,
        request_id: str,
        exc: Exception,
    ) -> bool:
        """Raise if the error must not be retried; else prepare the next attempt and
        return whether it may go at once (a redirect to a named leader). The status
        is a unary call's or a stream answer's (``exc``: what to chain)."""
        if code is grpc.StatusCode.FAILED_PRECONDITION:
            # Not the active controller; the request was not appended (seam contract).
            leader = trailing.get(LEADER_ADDRESS_KEY)
            leader_id = trailing.get(LEADER_ID_KEY)
            self.leader_id = int(leader_id) if leader_id and leader_id.isdigit() else None
            if leader and leader != target:
                self.leader_address = leader
                return True
            self._skip(target)
            return False
        if code is grpc.StatusCode.UNAVAILABLE and details.startswith("BEHIND"):
            # A healthy controller that has not applied what this session saw yet:
            # ask the next one (its channel is fine).
            self._skip(target)
            return False
        if code is grpc.StatusCode.UNAVAILABLE:
            busy = trailing.get(BUSY_KEY) == "true"
            if write and busy:
                raise ControllerOverloadedError(
                    f"{method} was refused by a busy controller ({target}) and not applied; "
                    "retry later"
                ) from exc
            if write and not never_sent:
                self.outcome_unknown_retries += 1  # maybe sent: resent under the same id
            if not busy:
                self._drop(target)
            return False
        if code is grpc.StatusCode.DEADLINE_EXCEEDED:
            # The attempt (or the controller's wait for the write's fate) timed out:
            # ask elsewhere. A write is resent under the same id: exactly once.
            if write:
                self.outcome_unknown_retries += 1
            self._drop(target)
            return False
        raise RequestFailedError(code, details) from exc

    # -- the RPCs ----------------------------------------------------------------------

    def call(self, rpc: AdminRpc, args: Args, *, attempt_timeout_ms: int | None = None) -> Any:
        """Any Admin RPC by its row: `args` to the request, the response to the answer
        (the typed methods below are this, with their arguments spelt out)."""
        response = self._call(rpc.name, rpc.encode_request(args),
                              attempt_timeout_ms=attempt_timeout_ms)
        return rpc.decode_answer(response, args)
