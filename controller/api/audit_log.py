"""One log line per admin write, and per-method request metrics.

"Who changed what" must be answerable from the controller log alone: every Admin
write (create/delete topics, configs, reassignments, ACLs, quorum changes, ...)
logs `event=admin_write` with the principal, the request id, the method, the
resources named by the request and the result: `ok`, the per-item error codes, or
the gRPC status it was refused with. Reads are not logged (they change nothing);
both are counted by `ApiMetrics` when the daemon serves metrics.

The line is rendered and written off the request's path: `finish` hands its parts
to `AUDIT_LINES`, a writer thread that renders the request (protobuf's JSON form:
most of the line's cost) and logs it, in answer order (a line written by its
caller past the bound goes ahead of those still pending). What a crash of the process
can lose: the lines of writes answered in the moment before it that the thread had
not written yet; never more than `MAX_PENDING_LINES` (past that, `finish` writes the
line itself). A clean stop writes every pending line (`AuditLines.flush`).
"""

from __future__ import annotations

import functools
import queue
import threading
import time
from collections import Counter
from typing import Any

import attrs
from google.protobuf import json_format
from google.protobuf import message as pb_message
from google.protobuf.descriptor import Descriptor
from prometheus_client import CollectorRegistry, Histogram
from prometheus_client import Counter as PromCounter

from controller.log import get_logger

log = get_logger("metakraft.audit")

# Bound a line: a request may name thousands of partitions.
MAX_RESOURCES_LOGGED = 20
# Lines handed to the writer thread and not yet written, at most.
MAX_PENDING_LINES = 1_000
_LATENCY_BUCKETS_S = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0)


class ApiMetrics:
    """Per-method request counts, item error codes and handling time."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.requests = PromCounter(
            "metakraft_api_requests", "Admin API requests answered, by method and gRPC status.",
            ["method", "status"], registry=registry)
        self.item_errors = PromCounter(
            "metakraft_api_item_errors",
            "Items of Admin API answers that carried an error code, by method and code.",
            ["method", "code"], registry=registry)
        self.latency = Histogram(
            "metakraft_api_request_duration_seconds",
            "Time to answer an Admin API request, by method.", ["method"],
            registry=registry, buckets=_LATENCY_BUCKETS_S)
        # The labelled children by label values: `labels()` validates and locks on
        # every call (~3 µs each); two per request. Bounded by methods x statuses.
        self._counted: dict[tuple[str, str], Any] = {}
        self._timed: dict[str, Any] = {}

    def count(self, method: str, status: str, elapsed_s: float) -> None:
        """One answered request: its status and how long it took."""
        counter = self._counted.get((method, status))
        if counter is None:
            counter = self._counted[(method, status)] = self.requests.labels(
                method=method, status=status)
        timer = self._timed.get(method)
        if timer is None:
            timer = self._timed[method] = self.latency.labels(method=method)
        counter.inc()
        timer.observe(elapsed_s)


def describe_request(request: pb_message.Message) -> dict[str, Any]:
    """The request as its protobuf JSON form (field names as in the .proto, enums by
    name, fields at their defaults included: partition 0 is a partition), without its
    header; a repeated field keeps its first `MAX_RESOURCES_LOGGED` items and gets a
    `<field>_count` beside it when it had more."""
    body = json_format.MessageToDict(request, preserving_proto_field_name=True,
                                     always_print_fields_with_no_presence=True)
    body.pop("header", None)
    for name, value in list(body.items()):
        if isinstance(value, list) and len(value) > MAX_RESOURCES_LOGGED:
            body[name] = value[:MAX_RESOURCES_LOGGED]
            body[f"{name}_count"] = len(value)
    return body


def error_codes(response: pb_message.Message, depth: int = 0) -> Counter[str]:
    """Codes of the `Error` messages in an answer other than NONE (per-item results)."""
    found: Counter[str] = Counter()
    if depth > 3:
        return found
    for name, repeated, is_error in _error_fields(response.DESCRIPTOR):
        if repeated:
            items = getattr(response, name)
        elif response.HasField(name):
            items = (getattr(response, name),)
        else:
            continue
        for item in items:
            if not is_error:
                found.update(error_codes(item, depth + 1))
            elif item.code and item.code != "NONE":
                found[item.code] += 1
    return found


@functools.cache
def _error_fields(descriptor: Descriptor) -> tuple[tuple[str, bool, bool], ...]:
    """(name, repeated, is an Error) of the message fields of `descriptor` that are
    `Error`s or may hold one: the walk above visits only those (one per answer type,
    computed once; every admin write's answer is walked)."""
    return tuple((f.name, f.is_repeated, f.message_type.name == "Error")
                 for f in descriptor.fields
                 if f.message_type is not None and _may_hold_error(f.message_type, set()))


def _may_hold_error(descriptor: Descriptor, seen: set[str]) -> bool:
    if descriptor.name == "Error":
        return True
    if descriptor.full_name in seen:
        return False
    seen.add(descriptor.full_name)
    return any(f.message_type is not None and _may_hold_error(f.message_type, seen)
               for f in descriptor.fields)


class AuditLines:
    """The writer thread of the `admin_write` lines (see the module docstring)."""

    def __init__(self, max_pending: int = MAX_PENDING_LINES) -> None:
        self._max_pending = max_pending
        self._queue: queue.SimpleQueue[tuple[str, str, str, str, pb_message.Message] | None] \
            = queue.SimpleQueue()
        # Lines handed over and lines written: each counted by one thread only (the
        # caller's, the writer's), so their difference is what is pending.
        self._submitted = 0
        self._written = 0
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.written_inline = 0

    def submit(self, method: str, principal: str, request_id: str, result: str,
               request: pb_message.Message) -> None:
        if self.pending >= self._max_pending:
            self.written_inline += 1
            _write(method, principal, request_id, result, request)
            return
        if self._thread is None:
            self._start()
        self._submitted += 1
        self._queue.put((method, principal, request_id, result, request))

    @property
    def pending(self) -> int:
        return self._submitted - self._written

    def _start(self) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="admin-write-log",
                                                daemon=True)
                self._thread.start()

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            try:
                _write(*item)
            except Exception:  # a line that does not render must not stop the others
                log.exception("admin_write_line_failed", method=item[0])
            finally:
                self._written += 1

    def flush(self, timeout_s: float = 5.0) -> bool:
        """Wait (at most `timeout_s`) until every line handed over is written."""
        deadline = time.monotonic() + timeout_s
        while self.pending > 0 and time.monotonic() < deadline:
            time.sleep(0.001)
        return self.pending <= 0


def _write(method: str, principal: str, request_id: str, result: str,
           request: pb_message.Message) -> None:
    log.info("admin_write", method=method, principal=principal, request_id=request_id,
             result=result, request=describe_request(request))


# The process's one writer of admin_write lines.
AUDIT_LINES = AuditLines()


@attrs.define
class RequestAudit:
    """Filled while one request is handled; `finish` logs and counts it."""

    method: str
    write: bool
    request: pb_message.Message
    metrics: ApiMetrics | None
    principal: str = ""
    request_id: str = ""
    started_s: float = attrs.field(factory=time.perf_counter)

    def finish(self, status: str, response: pb_message.Message | None) -> None:
        codes = error_codes(response) if response is not None else Counter()
        if self.metrics is not None:
            self.metrics.count(self.method, status, time.perf_counter() - self.started_s)
            for code, count in codes.items():
                self.metrics.item_errors.labels(method=self.method, code=code).inc(count)
        if not self.write or status == "FAILED_PRECONDITION":
            return  # a read, or refused by a controller that is not the active one
        if status != "OK":
            result = status
        elif codes:
            result = ",".join(f"{code}:{n}" for code, n in sorted(codes.items()))
        else:
            result = "ok"
        AUDIT_LINES.submit(self.method, self.principal, self.request_id, result,
                           self.request)
