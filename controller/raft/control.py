"""Raft control records (LeaderChange, Voters), encoded and decoded in one place.

The leader writes a LeaderChange record as the first batch of its epoch: it
gives the epoch a record of its own, so the high watermark can move past the
epoch start (Raft §5.4.2) even when no client writes, and it tells every log
reader who led from where.
"""

from __future__ import annotations

from collections.abc import Iterable

from controller.raft.voters import Voter, VoterSet
from controller.records import metadata_pb2 as pb
from controller.records.codec import decode_record, encode_record
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


def encode_voters(voters: VoterSet) -> bytes:
    """The bytes of a VotersRecord (a dynamic voter set)."""
    assert voters.dynamic, "a static voter set is never written"
    payload = pb.VotersRecord(
        voters=[
            pb.VotersRecord.Voter(
                node_id=v.node_id, directory_id=v.directory_id, endpoint=v.endpoint
            )
            for v in voters
        ]
    )
    return encode_record(make_record(payload))


def voters_from_record(record: pb.VotersRecord) -> VoterSet:
    """The voter set a VotersRecord holds; ValueError when it is not a valid one."""
    return VoterSet.of(
        Voter(v.node_id, v.directory_id, v.endpoint) for v in record.voters
    )


def voters_in(records: Iterable[bytes]) -> VoterSet | None:
    """The last voter set among a control batch's records, None if it has none.
    A record that does not decode is a corrupt log: the error propagates."""
    found = None
    for data in records:
        record = decode_record(data)
        if record.WhichOneof("record") == "voters":
            found = voters_from_record(record.voters)
    return found
