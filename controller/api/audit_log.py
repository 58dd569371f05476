"""One log line per admin write, and per-method request metrics.

"Who changed what" must be answerable from the controller log alone: every Admin
write (create/delete topics, configs, reassignments, ACLs, quorum changes, ...)
logs `event=admin_write` with the principal, the request id, the method, the
resources named by the request and the result: `ok`, the per-item error codes, or
the gRPC status it was refused with. Reads are not logged (they change nothing);
both are counted by `ApiMetrics` when the daemon serves metrics.
"""

from __future__ import annotations

import functools
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
            self.metrics.requests.labels(method=self.method, status=status).inc()
            self.metrics.latency.labels(method=self.method).observe(
                time.perf_counter() - self.started_s)
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
        log.info("admin_write", method=self.method, principal=self.principal,
                 request_id=self.request_id, result=result,
                 request=describe_request(self.request))
