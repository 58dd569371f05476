"""The Admin service's ``Watch`` RPC: a server stream of decoded committed changes.

One watch is one loop: read the batch holding the next offset (`HistoryReader`:
local log, else tier), decode it (`WatchHub.changes`, shared), keep what the watch
wants and its caller may see (`WatchSpec.select`), send it; at the committed end,
wait for the next commit (`WatchHub.wait_beyond`). Nothing is queued for a watcher:
it reads at its own pace, and a send that does not complete within
`send_timeout_ms` (the watcher stopped reading) ends the watch with
RESOURCE_EXHAUSTED and the offset to resume from, so the controller holds at most
one response per watcher. The contract is in admin.proto (WatchRequest).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any, NoReturn, Protocol

import attrs
import grpc
from google.protobuf import message as pb_message

from controller.api import admin_pb2 as apb
from controller.log import get_logger
from controller.records.codec import RecordDecodeError
from controller.security.access import (
    Access,
    UnauthenticatedError,
    cluster_action,
    topic_action,
)
from controller.security.acl import Operation as AclOperation
from controller.watch.events import TOPIC_KINDS, TopicNames, WatchSpec, spec_from_request
from controller.watch.history import HistoryReader, HistoryUnavailableError
from controller.watch.hub import WatchHub

log = get_logger(__name__)

# Trailing metadata of every end of a watch but the client's own: where to resume.
RESUME_OFFSET_KEY = "x-metakraft-resume-offset"
# An OUT_OF_RANGE answer to a start below the history: the oldest offset held.
OLDEST_OFFSET_KEY = "x-metakraft-oldest-offset"

DEFAULT_PROGRESS_INTERVAL_MS = 1_000
MIN_PROGRESS_INTERVAL_MS = 50
# An idle watch gets an empty response this often, so its client can tell an idle
# cluster from a controller that went silent (watch_client's stall timeout).
KEEPALIVE_S = 5.0


def _positive(_inst: object, attribute: attrs.Attribute[int], value: int) -> None:
    if value <= 0:
        raise ValueError(f"{attribute.name} must be > 0, got {value}")


@attrs.frozen(kw_only=True)
class WatchSettings:
    # Watches open at once on one controller; more are refused TOO_MANY_WATCHERS.
    max_watchers: int = attrs.field(default=1_000, validator=_positive)
    # A response the watcher has not taken within this is its end (WATCH_TOO_SLOW).
    send_timeout_ms: int = attrs.field(default=10_000, validator=_positive)
    # A start above the committed end waits this long for it (after a failover, a
    # standby may not have heard of the offset a watcher already saw).
    start_wait_ms: int = attrs.field(default=2_000, validator=_positive)
    # Bounds of one response.
    max_events_per_response: int = attrs.field(default=500, validator=_positive)
    max_response_bytes: int = attrs.field(default=1 << 20, validator=_positive)


def _response(events: list[bytes], next_offset: int, committed_offset: int) -> bytes:
    """A WatchResponse, serialized, from events serialized once for every watch that
    sends them (a message is its fields' encodings in any order)."""
    tail = apb.WatchResponse(next_offset=next_offset,
                             committed_offset=committed_offset).SerializeToString()
    return b"".join(_EVENTS_TAG + _varint(len(e)) + e for e in events) + tail


# WatchResponse.events: field 1, length-delimited.
_EVENTS_TAG = bytes([1 << 3 | 2])


def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


class WatchedNode(Protocol):
    """What a watch asks of its controller."""

    @property
    def is_active(self) -> bool: ...

    def topic_name(self, topic_id: str) -> str | None: ...


class WatchEnded(Exception):
    def __init__(self, code: grpc.StatusCode, details: str,
                 trailing: tuple[tuple[str, str], ...] = ()) -> None:
        super().__init__(details)
        self.code, self.details, self.trailing = code, details, trailing


class WatchService:
    def __init__(self, hub: WatchHub, history: HistoryReader, node: WatchedNode,
                 access: Access, settings: WatchSettings | None = None,
                 clock_s: Callable[[], float] = time.monotonic) -> None:
        self.hub = hub
        self.history = history
        self.node = node
        self.access = access
        self.settings = settings or WatchSettings()
        self.clock_s = clock_s
        self.closing = False
        self.events_sent = 0

    def close(self) -> None:
        """The server stops: every watch ends UNAVAILABLE with its resume offset."""
        self.closing = True
        self.hub.wake_all()

    async def serve(self, raw: bytes, context: Any) -> None:
        """The ``Watch`` handler (raw request bytes; serialized responses written on
        `context`)."""
        watch = _Watch(self, context)
        try:
            await watch.run(raw)
        except WatchEnded as end:
            log.info("watch_ended", peer=context.peer(), principal=watch.principal,
                     code=end.code.name, next_offset=watch.next_offset,
                     events=watch.events_sent, reason=end.details)
            await context.abort(end.code, end.details, trailing_metadata=end.trailing)


class _Watch:
    """One watch's state (the loop of the module docstring)."""

    def __init__(self, service: WatchService, context: Any) -> None:
        self.s = service
        self.context = context
        self.principal = ""
        self.next_offset = -1
        self.events_sent = 0
        self._last_sent_offset = -1
        self._last_sent_s = 0.0

    def _end(self, code: grpc.StatusCode, details: str) -> NoReturn:
        trailing: tuple[tuple[str, str], ...] = ()
        if self.next_offset >= 0:
            trailing = ((RESUME_OFFSET_KEY, str(self.next_offset)),)
        raise WatchEnded(code, details, trailing)

    async def run(self, raw: bytes) -> None:
        s, hub = self.s, self.s.hub
        try:
            request = apb.WatchRequest.FromString(raw)
        except pb_message.DecodeError as exc:
            self._end(grpc.StatusCode.INVALID_ARGUMENT, f"malformed Watch request: {exc}")
        try:
            spec = spec_from_request(request)
            progress_ms = request.progress_interval_ms or DEFAULT_PROGRESS_INTERVAL_MS
            if progress_ms < MIN_PROGRESS_INTERVAL_MS:
                raise ValueError(f"progress_interval_ms {progress_ms} is below "
                                 f"{MIN_PROGRESS_INTERVAL_MS}")
            if request.HasField("from_offset") and request.from_offset < 0:
                raise ValueError(f"from_offset {request.from_offset} is negative")
        except ValueError as exc:
            self._end(grpc.StatusCode.INVALID_ARGUMENT, f"malformed Watch request: {exc}")
        try:
            caller = s.access.caller(self.context)
        except UnauthenticatedError as exc:
            self._end(grpc.StatusCode.UNAUTHENTICATED, f"Watch: {exc}")
        self.principal = caller.principal

        def may_topic(name: str) -> bool:
            return s.access.allowed(caller, topic_action(AclOperation.DESCRIBE, name))

        may_cluster = s.access.allowed(caller, cluster_action(AclOperation.DESCRIBE))
        if spec.topic and not may_topic(spec.topic):
            self._end(grpc.StatusCode.PERMISSION_DENIED,
                      f"Watch: {caller.principal} may not DESCRIBE topic {spec.topic!r}")
        asked = set(request.resource_types)
        if (not spec.topic_filtered and not may_cluster
                and any(kind.value in asked for kind in spec.kinds - TOPIC_KINDS)):
            self._end(grpc.StatusCode.PERMISSION_DENIED,
                      f"Watch: {caller.principal} may not DESCRIBE the cluster (needed "
                      "for broker, ACL, quorum, feature and internal changes)")
        if hub.watchers >= s.settings.max_watchers:
            self._end(grpc.StatusCode.RESOURCE_EXHAUSTED,
                      f"TOO_MANY_WATCHERS: this controller serves {hub.watchers} watches "
                      "(max_watchers); watch at another controller, or later")
        hub.watchers += 1
        try:
            await self._follow(request, spec, progress_ms / 1e3, may_topic, may_cluster)
        finally:
            hub.watchers -= 1

    async def _start_offset(self, request: apb.WatchRequest) -> int:
        s, hub = self.s, self.s.hub
        start = request.from_offset if request.HasField("from_offset") else hub.committed_offset
        deadline_s = s.clock_s() + s.settings.start_wait_ms / 1e3
        while start > hub.committed_offset and not s.closing:
            left_s = deadline_s - s.clock_s()
            if left_s <= 0:
                break
            await hub.wait_beyond(start - 1, left_s)
        if start > hub.committed_offset:
            if s.node.is_active:
                self._end(grpc.StatusCode.OUT_OF_RANGE,
                          f"from_offset {start} is beyond the committed end "
                          f"{hub.committed_offset}")
            self._end(grpc.StatusCode.UNAVAILABLE,
                      f"BEHIND: this controller has committed up to {hub.committed_offset}, "
                      f"not yet {start}; retry, or watch at another controller")
        try:
            oldest = await s.history.oldest_offset()
        except HistoryUnavailableError as exc:
            self._end(grpc.StatusCode.UNAVAILABLE, f"{exc}; retry, or watch elsewhere")
        if start < oldest:
            raise WatchEnded(grpc.StatusCode.OUT_OF_RANGE,
                             f"from_offset {start} is below the oldest offset held, {oldest} "
                             "(older offsets were compacted into a snapshot and no tier "
                             "holds them)", ((OLDEST_OFFSET_KEY, str(oldest)),))
        return start

    async def _follow(self, request: apb.WatchRequest, spec: WatchSpec, progress_s: float,
                      may_topic: Callable[[str], bool], may_cluster: bool) -> None:
        s, hub = self.s, self.s.hub
        self.next_offset = await self._start_offset(request)
        log.info("watch_started", peer=self.context.peer(), principal=self.principal,
                 from_offset=self.next_offset, kinds=",".join(sorted(k.name for k in spec.kinds)),
                 topic=spec.topic or None, topic_prefix=spec.topic_prefix or None)
        names = TopicNames(s.node.topic_name)
        settings = s.settings
        await self._send([])  # the watch is open: its start offset
        caught_up_sent = False
        while True:
            if s.closing:
                self._end(grpc.StatusCode.UNAVAILABLE,
                          "the controller is stopping; resume at another controller")
            end = hub.committed_offset
            if self.next_offset >= end:
                # At the end: progress if there is news (at once the first time the
                # watch catches up, then at most every progress interval), a
                # keep-alive when there has been none for a while, else wait.
                now = s.clock_s()
                news = self.next_offset > self._last_sent_offset
                due = self._last_sent_s + (progress_s if news else KEEPALIVE_S)
                if (news and not caught_up_sent) or now >= due:
                    caught_up_sent = True
                    await self._send([])
                    continue
                await hub.wait_beyond(self.next_offset, max(due - now, 0.001))
                continue
            try:
                batches = await s.history.read(self.next_offset, end)
            except HistoryUnavailableError as exc:
                self._end(grpc.StatusCode.UNAVAILABLE,
                          f"{exc}; watch at another controller, which may hold it")
            pending: list[bytes] = []
            pending_bytes = 0
            for batch in batches:
                try:
                    changes = hub.changes(batch)
                except RecordDecodeError as exc:
                    self._end(grpc.StatusCode.INTERNAL,
                              f"the batch at offset {batch.base_offset} does not decode: {exc}")
                for change, name in spec.select(changes, self.next_offset, names, may_topic,
                                                may_cluster):
                    event = change.wire(name)
                    pending.append(event)
                    pending_bytes += len(event)
                    if (len(pending) >= settings.max_events_per_response
                            or pending_bytes >= settings.max_response_bytes):
                        self.next_offset = change.offset + 1
                        await self._send(pending)
                        pending, pending_bytes = [], 0
                self.next_offset = max(self.next_offset, batch.next_offset)
            if pending or s.clock_s() >= self._last_sent_s + progress_s:
                await self._send(pending)
            else:
                await asyncio.sleep(0)  # a long stretch of history that matches nothing

    async def _send(self, events: list[bytes]) -> None:
        s = self.s
        response = _response(events, self.next_offset, s.hub.committed_offset)
        try:
            async with asyncio.timeout(s.settings.send_timeout_ms / 1e3):
                await self.context.write(response)
        except TimeoutError:
            self.next_offset = self._last_sent_offset
            self._end(grpc.StatusCode.RESOURCE_EXHAUSTED,
                      f"WATCH_TOO_SLOW: the watcher took no events for "
                      f"{s.settings.send_timeout_ms} ms; resume from the last offset it got")
        self._last_sent_offset = self.next_offset
        self._last_sent_s = s.clock_s()
        self.events_sent += len(events)
        s.events_sent += len(events)
