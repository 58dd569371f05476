"""Raft control records, encoded in one place.

The leader writes a LeaderChange record as the first batch of its epoch: it
gives the epoch a record of its own, so the high watermark can move past the
epoch start (Raft §5.4.2) even when no client writes, and it tells every log
reader who led from where.
"""

from __future__ import annotations

from collections.abc import Iterable

from controller.records import metadata_pb2 as pb
from controller.records.codec import encode_record
from controller.records.registry import make_record


def encode_leader_change(
    leader_id: int, epoch: int, voters: Iterable[int], granting_voters: Iterable[int]
) -> bytes:
    """The bytes of a LeaderChange record (controller.records schema)."""
    payload = pb.LeaderChangeRecord(
        leader_id=leader_id,
        epoch=epoch,
        voters=sorted(voters),
        granting_voters=sorted(granting_voters),
    )
    return encode_record(make_record(payload))
