"""The audit line's pieces: the request as logged (every field, enums by name, a
partition 0 kept), and the per-item error codes counted from any Admin answer."""

from __future__ import annotations

import io
import json
import logging
import threading
from collections import Counter

import pytest
from google.protobuf import message as pb_message

from controller.api import admin_pb2 as apb
from controller.api import audit_log
from controller.api.audit_log import (
    AUDIT_LINES,
    MAX_RESOURCES_LOGGED,
    ApiMetrics,
    AuditLines,
    RequestAudit,
    describe_request,
    error_codes,
)
from controller.log import formatter


def _reference(message: pb_message.Message) -> Counter[str]:
    """Every Error below `message`, found by walking all set fields (slow, obvious)."""
    found: Counter[str] = Counter()
    for field, value in message.ListFields():
        if field.type != field.TYPE_MESSAGE or field.message_type.GetOptions().map_entry:
            continue
        for item in value if field.is_repeated else [value]:
            if item.DESCRIPTOR.name == "Error":
                if item.code and item.code != "NONE":
                    found[item.code] += 1
            else:
                found += _reference(item)
    return found


def test_error_codes_counts_per_item_errors_other_than_none() -> None:
    answer = apb.CreateTopicsResponse(results=[
        apb.CreateTopicResult(name="a", error=apb.Error(code="NONE")),
        apb.CreateTopicResult(name="b", error=apb.Error(code="TOPIC_ALREADY_EXISTS")),
        apb.CreateTopicResult(name="c", error=apb.Error(code="TOPIC_ALREADY_EXISTS")),
        apb.CreateTopicResult(name="d", error=apb.Error(code="POLICY_VIOLATION")),
        apb.CreateTopicResult(name="e"),  # no error message set at all
    ])
    assert error_codes(answer) == Counter({"TOPIC_ALREADY_EXISTS": 2, "POLICY_VIOLATION": 1})
    assert error_codes(apb.ElectLeadersResponse()) == Counter()


def test_error_codes_agrees_with_a_walk_of_every_field_on_every_answer_type() -> None:
    """Fill every Admin response type with an error at every place one can go (two
    items of each repeated field) and compare with the obvious walk."""
    codes = iter(f"CODE_{i % 7}" for i in range(10**6))

    def fill(message: pb_message.Message, depth: int) -> None:
        for field in message.DESCRIPTOR.fields:
            if field.type != field.TYPE_MESSAGE or depth > 3:
                continue
            if field.message_type.GetOptions().map_entry:
                continue
            repeated = field.is_repeated
            items = ([getattr(message, field.name).add() for _ in range(2)] if repeated
                     else [getattr(message, field.name)])
            for item in items:
                if item.DESCRIPTOR.name == "Error":
                    item.code = next(codes)
                else:
                    fill(item, depth + 1)

    answers = [getattr(apb, name)() for name in dir(apb) if name.endswith("Response")]
    assert len(answers) > 15
    for answer in answers:
        fill(answer, 0)
        assert error_codes(answer) == _reference(answer), type(answer).__name__


def _audit_line(request: pb_message.Message, fmt: str) -> str:
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(formatter(fmt))
    logger = logging.getLogger("metakraft.audit")
    old_level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        RequestAudit("AlterPartitionReassignments", True, request, None, "User:alice",
                     "r-1").finish("OK", apb.AlterPartitionReassignmentsResponse())
        assert AUDIT_LINES.flush()  # written by the writer thread
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)
    (line,) = out.getvalue().splitlines()
    return line


def test_a_partition_0_reassignment_is_logged_as_partition_0_in_json_and_logfmt() -> None:
    request = apb.AlterPartitionReassignmentsRequest(
        header=apb.RequestHeader(request_id="r-1"),
        partitions=[apb.ReassignablePartition(topic="orders", partition=0, replicas=[2, 3])])
    want = {"partitions": [{"topic": "orders", "partition": 0, "replicas": [2, 3],
                            "cancel": False}]}
    assert describe_request(request) == want
    event = json.loads(_audit_line(request, "json"))
    assert (event["method"], event["principal"], event["result"]) == (
        "AlterPartitionReassignments", "User:alice", "ok")
    assert event["request"] == want
    # logfmt: the request is one field holding the same JSON, quoted.
    line = _audit_line(request, "kv")
    value = line.split(" request=", 1)[1]
    assert value.startswith('"') and value.endswith('"'), line
    assert json.loads(value[1:-1].replace('\\"', '"')) == want


def test_acl_enums_are_logged_by_name() -> None:
    request = apb.CreateAclsRequest(creations=[apb.AclBinding(
        resource_type=apb.ACL_RESOURCE_TYPE_TOPIC, resource_name="orders",
        pattern_type=apb.ACL_PATTERN_TYPE_LITERAL, principal="User:bob", host="*",
        operation=apb.ACL_OPERATION_WRITE, permission=apb.ACL_PERMISSION_ALLOW)])
    (binding,) = describe_request(request)["creations"]
    assert binding["resource_type"] == "ACL_RESOURCE_TYPE_TOPIC"
    assert binding["operation"] == "ACL_OPERATION_WRITE"
    assert binding["permission"] == "ACL_PERMISSION_ALLOW"


def test_long_requests_are_cut_with_a_count() -> None:
    names = [f"t{i}" for i in range(MAX_RESOURCES_LOGGED + 5)]
    described = describe_request(apb.DeleteTopicsRequest(names=names))
    assert described["names"] == names[:MAX_RESOURCES_LOGGED]
    assert described["names_count"] == len(names)
    assert "header" not in describe_request(apb.DeleteTopicsRequest(
        header=apb.RequestHeader(request_id="x")))


def test_lines_are_written_off_the_caller_and_at_most_the_bound_are_pending(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The writer thread is held: the first 5 lines wait for it (what a crash could
    lose), the next ones are written by the caller itself; once it runs, every line
    is out, none twice."""
    release = threading.Event()
    written: list[tuple[str, str]] = []

    def write(method: str, principal: str, request_id: str, result: str,
              request: pb_message.Message) -> None:
        writer = threading.current_thread().name == "admin-write-log"
        if writer:
            release.wait(10)
        written.append((request_id, "writer" if writer else "caller"))

    monkeypatch.setattr(audit_log, "_write", write)
    lines = AuditLines(max_pending=5)
    try:
        for i in range(12):
            lines.submit("DeleteTopics", "User:bob", f"r-{i}", "ok",
                         apb.DeleteTopicsRequest(names=[f"t{i}"]))
        assert lines.pending == 5 and lines.written_inline == 7
        assert written == [(f"r-{i}", "caller") for i in range(5, 12)]
        release.set()
        assert lines.flush()
    finally:
        release.set()
    assert sorted(rid for rid, _ in written) == sorted(f"r-{i}" for i in range(12))
    assert [rid for rid, by in written if by == "writer"] == [f"r-{i}" for i in range(5)]
    assert lines.pending == 0


def test_requests_are_counted_and_timed_per_method_and_status() -> None:
    from prometheus_client import CollectorRegistry

    registry = CollectorRegistry()
    metrics = ApiMetrics(registry)
    request = apb.CreateTopicsRequest()
    failed = apb.CreateTopicsResponse(results=[apb.CreateTopicResult(
        name="t", error=apb.Error(code="TOPIC_ALREADY_EXISTS"))])
    for status, response in (("OK", failed), ("OK", apb.CreateTopicsResponse()),
                             ("UNAVAILABLE", None)):
        RequestAudit("CreateTopics", False, request, metrics).finish(status, response)
    RequestAudit("DescribeTopics", False, request, metrics).finish("OK", None)

    def sample(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(name, labels)

    assert sample("metakraft_api_requests_total", method="CreateTopics", status="OK") == 2
    assert sample("metakraft_api_requests_total", method="CreateTopics",
                  status="UNAVAILABLE") == 1
    assert sample("metakraft_api_requests_total", method="DescribeTopics", status="OK") == 1
    assert sample("metakraft_api_request_duration_seconds_count", method="CreateTopics") == 3
    assert sample("metakraft_api_item_errors_total", method="CreateTopics",
                  code="TOPIC_ALREADY_EXISTS") == 1


def _filled(message: pb_message.Message, depth: int = 0) -> pb_message.Message:
    """`message` with every field set away from its default (two items per repeated
    field and map, 64-bit values past 2**53, an enum number the .proto does not name)."""
    fd = message.DESCRIPTOR.fields[0].__class__  # FieldDescriptor
    for field in message.DESCRIPTOR.fields:
        if field.containing_oneof is not None and field.containing_oneof.fields[0] is not field:
            continue  # one member of a oneof
        entry = field.message_type
        if entry is not None and entry.GetOptions().map_entry:
            target = getattr(message, field.name)
            for n in (1, 2):
                key = _scalar(entry.fields_by_name["key"], n)
                value_field = entry.fields_by_name["value"]
                if value_field.type == fd.TYPE_MESSAGE:
                    if depth < 3:
                        _filled(target[key], depth + 1)
                else:
                    target[key] = _scalar(value_field, n)
        elif field.type == fd.TYPE_MESSAGE:
            if depth >= 3:
                continue
            if field.is_repeated:
                for _ in (1, 2):
                    _filled(getattr(message, field.name).add(), depth + 1)
            else:
                _filled(getattr(message, field.name), depth + 1)
        elif field.is_repeated:
            getattr(message, field.name).extend([_scalar(field, 1), _scalar(field, 2)])
        else:
            setattr(message, field.name, _scalar(field, 1))
    return message


def _scalar(field: object, n: int) -> object:
    f = field
    t = f.type  # type: ignore[attr-defined]
    if t == f.TYPE_STRING:  # type: ignore[attr-defined]
        return f"s{n}"
    if t == f.TYPE_BYTES:  # type: ignore[attr-defined]
        return bytes([0, 255, n])
    if t == f.TYPE_BOOL:  # type: ignore[attr-defined]
        return n == 1
    if t == f.TYPE_ENUM:  # type: ignore[attr-defined]
        values = f.enum_type.values  # type: ignore[attr-defined]
        return values[-1].number if n == 1 else 99
    if t in (f.TYPE_INT64, f.TYPE_SINT64, f.TYPE_SFIXED64):  # type: ignore[attr-defined]
        return -(2**60) - n
    if t in (f.TYPE_UINT64, f.TYPE_FIXED64):  # type: ignore[attr-defined]
        return 2**63 + n
    if t in (f.TYPE_UINT32, f.TYPE_FIXED32):  # type: ignore[attr-defined]
        return 2**31 + n
    return -7 - n


def _every_message() -> list[type[pb_message.Message]]:
    from controller.api import broker_pb2

    found = []
    for module in (apb, broker_pb2):
        for descriptor in module.DESCRIPTOR.message_types_by_name.values():
            found.append(getattr(module, descriptor.name))
    return found


@pytest.mark.parametrize("message_type", _every_message(), ids=lambda t: t.__name__)
def test_the_logged_form_is_message_to_dicts_for_every_message(
        message_type: type[pb_message.Message]) -> None:
    """describe_request renders as json_format.MessageToDict(preserving_proto_field_name,
    always_print_fields_with_no_presence) does, empty and with every field set; the
    header left out."""
    from google.protobuf import json_format

    for message in (message_type(), _filled(message_type())):
        want = json_format.MessageToDict(message, preserving_proto_field_name=True,
                                         always_print_fields_with_no_presence=True)
        want.pop("header", None)
        for name, value in list(want.items()):
            if isinstance(value, list) and len(value) > MAX_RESOURCES_LOGGED:
                want[name] = value[:MAX_RESOURCES_LOGGED]
                want[f"{name}_count"] = len(value)
        assert describe_request(message) == want
