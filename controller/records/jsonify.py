"""Records as JSON-ready dicts, for ``metakraft log dump``, audits and debugging.

Shape: ``{"type": <oneof name>, "version": <int>, "fields": {...}}``. ``fields`` is
protobuf's canonical JSON mapping of the payload with the .proto field names, plus:
- fields without presence are always printed, so a reader sees ``"fenced": false``
  rather than a missing key; fields with presence (proto3 ``optional``, e.g. a
  PartitionChangeRecord's ``leader``) are printed only when set, so "absent =
  unchanged" stays visible;
- 64-bit integers are JSON numbers, not the mapping's quoted strings;
- enums are their names (``"FENCE_CHANGE_FENCE"``).
"""

from __future__ import annotations

from typing import Any

from google.protobuf import json_format

from controller.records import metadata_pb2 as pb
from controller.records.codec import RecordDecodeError
from controller.records.registry import RECORD_TYPES, record_payload, record_type


def record_to_dict(rec: pb.MetadataRecord) -> dict[str, Any]:
    """The record as a JSON-serialisable dict (see the module docstring)."""
    return {
        "type": record_type(rec),
        "version": rec.version,
        "fields": json_format.MessageToDict(
            record_payload(rec),
            always_print_fields_with_no_presence=True,
            preserving_proto_field_name=True,
            unquote_int64_if_possible=True,
        ),
    }


def record_from_dict(data: dict[str, Any]) -> pb.MetadataRecord:
    """Inverse of ``record_to_dict``; ``RecordDecodeError`` on unknown types or fields."""
    try:
        name = data["type"]
        version = data["version"]
        fields = data["fields"]
    except (KeyError, TypeError) as exc:
        raise RecordDecodeError(f"record dict lacks 'type', 'version' or 'fields': {exc}") from exc
    kind = RECORD_TYPES.get(name) if isinstance(name, str) else None
    if kind is None:
        raise RecordDecodeError(f"unknown record type {name!r}")
    if not isinstance(version, int) or isinstance(version, bool) or version < 0:
        raise RecordDecodeError(f"record version must be a non-negative int, got {version!r}")
    rec = pb.MetadataRecord(version=version)
    member = getattr(rec, kind.name)
    member.SetInParent()
    try:
        json_format.ParseDict(fields, member)
    except json_format.ParseError as exc:
        raise RecordDecodeError(f"bad fields for record type {name!r}: {exc}") from exc
    return rec
