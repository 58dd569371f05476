"""The audit line's pieces: the per-item error codes counted from any Admin answer."""

from __future__ import annotations

from collections import Counter

from google.protobuf import message as pb_message

from controller.api import admin_pb2 as apb
from controller.api.audit_log import error_codes


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
