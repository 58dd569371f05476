"""Formatting a controller for a dynamic quorum, and reading the voter set a node
starts from.

`metakraft storage format --initial-controllers 1@host:port:DIRID,...` formats the
first voters: each gets its directory id from the list and the same first batch in
its log, a VotersRecord at offset 0 (epoch 0) naming every initial voter. A
controller that joins later is formatted with `--no-initial-controllers`: an empty
log, no voters known; it learns the voter set by fetching, as an observer, until
`metakraft quorum add-controller` makes it a voter.
"""

from __future__ import annotations

import os
from pathlib import Path

from controller.logformat import EMPTY_ORIGIN, RecordBatch, SnapshotId
from controller.quorum.log_adapter import DurableRaftLog
from controller.raft.control import encode_voters, voters_from_record
from controller.raft.voters import EMPTY_VOTER_SET, Voter, VoterSet
from controller.records import RecordDecodeError, decode_record
from controller.storage.meta_properties import (
    DataDir,
    MetaProperties,
    format_data_dir,
    validate_directory_id,
)
from controller.storage.snapshot_file import head_records

# How many records after a snapshot's header may precede its voter set (it is first).
_SNAPSHOT_VOTERS_SCAN = 4


def parse_initial_controllers(text: str) -> VoterSet:
    """`1@host:port:DIRID,2@host:port:DIRID` -> the voter set (ValueError if malformed)."""
    voters = []
    for part in text.split(","):
        part = part.strip()
        node, at, rest = part.partition("@")
        endpoint, colon, directory_id = rest.rpartition(":")
        if not at or not colon or not node.isdigit() or ":" not in endpoint:
            raise ValueError(f"bad controller {part!r}: expected ID@HOST:PORT:DIRECTORY_ID")
        validate_directory_id(directory_id)
        voters.append(Voter(int(node), directory_id, endpoint))
    if len({v.node_id for v in voters}) != len(voters):
        raise ValueError("a node id is listed twice in the initial controllers")
    return VoterSet.of(voters)


def format_controller(data_dir: str | os.PathLike[str], cluster_id: str, node_id: int, *,
                      initial_controllers: VoterSet | None, ignore_formatted: bool = False
                      ) -> bool:
    """Format for a dynamic quorum: as one of `initial_controllers` (None: a controller
    that joins later). True if formatted, False if skipped (`ignore_formatted`)."""
    directory_id = None
    if initial_controllers is not None:
        me = initial_controllers.get(node_id)
        if me is None:
            raise ValueError(
                f"node {node_id} is not among the initial controllers "
                f"{initial_controllers.describe()}; a controller that joins later is "
                "formatted with --no-initial-controllers")
        directory_id = me.directory_id
    formatted = format_data_dir(data_dir, cluster_id, node_id, ignore_formatted,
                                directory_id=directory_id, kraft_version=1)
    if formatted and initial_controllers is not None:
        write_bootstrap_voters(DataDir(Path(data_dir)), initial_controllers)
    return formatted


def write_bootstrap_voters(layout: DataDir, voters: VoterSet) -> None:
    """The log's first batch: the initial voter set, at offset 0 in epoch 0, durable."""
    log = DurableRaftLog.open(layout)
    try:
        assert log.end_offset == 0, "bootstrap voters go into an empty log"
        log.append(RecordBatch(base_offset=0, epoch=0, append_time_ms=0, is_control=True,
                               origin=EMPTY_ORIGIN, records=(encode_voters(voters),)))
        log.flush()
    finally:
        log.close()


def snapshot_voters(path: str | os.PathLike[str]) -> VoterSet | None:
    """The voter set a snapshot file carries (right after its header), None if it has
    none (a static quorum's snapshot). Reads only the file's first batches: the
    controller loads, and so verifies, the whole file."""
    for data in head_records(path, _SNAPSHOT_VOTERS_SCAN):
        try:
            record = decode_record(data)
        except RecordDecodeError:
            return None  # not metadata records (the state machine's own format)
        if record.WhichOneof("record") == "voters":
            return voters_from_record(record.voters)
    return None


def starting_voters(meta: MetaProperties, layout: DataDir,
                    snapshot_id: SnapshotId) -> VoterSet | None:
    """The voter set in force where the log starts: the snapshot's, else none yet for
    a dynamic quorum (the log's VotersRecords follow), else None (static: the
    configured voters)."""
    if snapshot_id.end_offset > 0:
        found = snapshot_voters(layout.snapshot_dir / snapshot_id.file_name)
        if found is not None:
            return found
    return EMPTY_VOTER_SET if meta.kraft_version >= 1 else None
