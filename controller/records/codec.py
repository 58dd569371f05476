"""Record bytes: ``encode_record`` and ``decode_record``.

A decoded record is always usable: exactly one record type is set and its version is
one this code understands. Anything else raises ``RecordDecodeError``, because
replaying a record we cannot read (from a newer schema, or garbage) as an empty or
default-valued one would silently diverge the metadata image.
"""

from __future__ import annotations

from google.protobuf.message import DecodeError
from google.protobuf.unknown_fields import UnknownFieldSet

from controller.records import metadata_pb2 as pb
from controller.records.registry import RECORD_TYPES


class RecordDecodeError(ValueError):
    """Bytes that are not a metadata record this code can read."""


class RecordEncodeError(ValueError):
    """A MetadataRecord that must not be written (no record type, bad version)."""


def encode_record(rec: pb.MetadataRecord) -> bytes:
    """Serialise an envelope. Refuses records that ``decode_record`` would refuse."""
    problem = _check(rec)
    if problem is not None:
        raise RecordEncodeError(problem)
    # deterministic=True fixes map ordering should a map field ever be added, so
    # equal records always give equal bytes (and equal CRCs).
    return rec.SerializeToString(deterministic=True)


def decode_record(data: bytes | bytearray | memoryview) -> pb.MetadataRecord:
    """Parse one envelope; raise ``RecordDecodeError`` naming what is wrong."""
    raw = data if isinstance(data, bytes) else bytes(data)
    rec = pb.MetadataRecord()
    try:
        rec.ParseFromString(raw)
    except DecodeError as exc:
        raise RecordDecodeError(f"malformed metadata record ({len(raw)} bytes): {exc}") from exc
    problem = _check(rec)
    if problem is not None:
        raise RecordDecodeError(f"{problem} ({len(raw)} bytes)")
    return rec


def _check(rec: pb.MetadataRecord) -> str | None:
    """Why ``rec`` is not a valid record, or None if it is."""
    name = rec.WhichOneof("record")
    if name is None:
        unknown = _unknown_field_numbers(rec)
        if unknown:
            numbers = ", ".join(str(n) for n in unknown)
            return (
                f"unknown record type: envelope field number(s) {numbers} are not in "
                "this schema (written by a newer version?)"
            )
        return "empty metadata record: no record type set"
    current = RECORD_TYPES[name].version
    if not 1 <= rec.version <= current:
        return (
            f"unsupported version {rec.version} of record type {name!r} "
            f"(this code understands versions 1..{current})"
        )
    return None


def _unknown_field_numbers(rec: pb.MetadataRecord) -> list[int]:
    unknown = UnknownFieldSet(rec)
    # Indexed rather than iterated: the typeshed stub only declares __getitem__/__len__.
    return sorted({unknown[i].field_number for i in range(len(unknown))})
