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

import base64
import functools
import queue
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import attrs
from google.protobuf import json_format
from google.protobuf import message as pb_message
from google.protobuf.descriptor import Descriptor, FieldDescriptor
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
    `<field>_count` beside it when it had more.

    The form is `json_format.MessageToDict(preserving_proto_field_name=True,
    always_print_fields_with_no_presence=True)`'s (a test compares them over every
    request type), rendered by a walker made once per message type (`_to_dict`):
    MessageToDict looks up how to render each field on every call, and one line per
    admin write made it about a tenth of the active controller's CPU."""
    body = _to_dict(request.DESCRIPTOR)(request)
    body.pop("header", None)
    for name, value in list(body.items()):
        if isinstance(value, list) and len(value) > MAX_RESOURCES_LOGGED:
            body[name] = value[:MAX_RESOURCES_LOGGED]
            body[f"{name}_count"] = len(value)
    return body


# Renders one field's value (not repeated) in the JSON form.
_Render = Callable[[Any], Any]


def _same(value: Any) -> Any:
    return value


def _render_value(field: FieldDescriptor) -> _Render:
    """The JSON form of one value of `field` (proto3 JSON mapping: 64-bit integers as
    strings, bytes as base64, enums by name or their number when unknown)."""
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        nested = field.message_type
        # Looked up per value, not bound here: a message type may hold itself, and
        # building its walker while building it would not end (`_to_dict` is cached).
        return lambda value: _to_dict(nested)(value)
    if field.type == FieldDescriptor.TYPE_ENUM:
        assert field.enum_type is not None
        names = {v.number: v.name for v in field.enum_type.values}
        return lambda value: names.get(value, value)
    if field.type in _INT64_TYPES:
        return str
    if field.type == FieldDescriptor.TYPE_BYTES:
        return lambda value: base64.b64encode(value).decode("ascii")
    assert field.type not in _FLOAT_TYPES, "messages with floats go to MessageToDict"
    return _same


_FLOAT_TYPES = frozenset((FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT))
_INT64_TYPES = frozenset((FieldDescriptor.TYPE_INT64, FieldDescriptor.TYPE_UINT64,
                          FieldDescriptor.TYPE_SINT64, FieldDescriptor.TYPE_FIXED64,
                          FieldDescriptor.TYPE_SFIXED64))


@functools.cache
def _to_dict(descriptor: Descriptor) -> Callable[[Any], dict[str, Any]]:
    """A function rendering a message of type `descriptor` as MessageToDict does with
    the options above: fields in declaration order; a field with presence (optional,
    a message, a oneof member) only when set; every other field always, repeated ones
    as lists, maps as objects with string keys. A message with a floating-point
    field (none of the admin requests has one) is left to MessageToDict, which knows
    their special values and float32's shortest form."""
    entries = [f.message_type for f in descriptor.fields
               if f.message_type is not None and f.message_type.GetOptions().map_entry]
    if any(f.type in _FLOAT_TYPES for d in (descriptor, *entries) for f in d.fields):
        return lambda msg: json_format.MessageToDict(
            msg, preserving_proto_field_name=True, always_print_fields_with_no_presence=True)
    steps: list[Callable[[Any, dict[str, Any]], None]] = []
    for field in descriptor.fields:
        name = field.name
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            key_field = field.message_type.fields_by_name["key"]
            value_render = _render_value(field.message_type.fields_by_name["value"])
            bool_keys = key_field.type == FieldDescriptor.TYPE_BOOL

            def map_step(msg: Any, out: dict[str, Any], name: str = name,
                         render: _Render = value_render, bool_keys: bool = bool_keys) -> None:
                out[name] = {(("true" if k else "false") if bool_keys else str(k)): render(v)
                             for k, v in getattr(msg, name).items()}
            steps.append(map_step)
        elif field.is_repeated:
            render = _render_value(field)

            def list_step(msg: Any, out: dict[str, Any], name: str = name,
                          render: _Render = render) -> None:
                out[name] = [render(v) for v in getattr(msg, name)]
            steps.append(list_step)
        elif field.has_presence:
            render = _render_value(field)

            def present_step(msg: Any, out: dict[str, Any], name: str = name,
                             render: _Render = render) -> None:
                if msg.HasField(name):
                    out[name] = render(getattr(msg, name))
            steps.append(present_step)
        else:
            render = _render_value(field)

            def plain_step(msg: Any, out: dict[str, Any], name: str = name,
                           render: _Render = render) -> None:
                out[name] = render(getattr(msg, name))
            steps.append(plain_step)

    def to_dict(msg: Any) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for step in steps:
            step(msg, out)
        return out

    return to_dict


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
