"""The log's small value types, shared by the Raft core and the storage layer (one
definition each): snapshot ids and their file names, the durable quorum state,
epoch boundaries.

They are frozen so that a value handed out in a `Ready` or a message can never
be changed behind the core's back.
"""

from __future__ import annotations

import attrs

SNAPSHOT_SUFFIX = ".checkpoint"


@attrs.frozen(slots=True, order=True)
class SnapshotId:
    """A snapshot covers every record below `end_offset`; `epoch` is the epoch of
    the record at `end_offset - 1` (0 for the empty snapshot at offset 0).

    Ordered by (end_offset, epoch) so the newest snapshot is the max.
    """

    end_offset: int
    epoch: int

    def __attrs_post_init__(self) -> None:
        assert self.end_offset >= 0 and self.epoch >= 0, self

    @property
    def file_name(self) -> str:
        """The snapshot file's name: `<end offset, 20 digits>-<epoch, 10 digits>.checkpoint`."""
        return f"{self.end_offset:020d}-{self.epoch:010d}{SNAPSHOT_SUFFIX}"


def parse_snapshot_file_name(name: str) -> SnapshotId | None:
    """The id a snapshot file name stands for; None if it is not one."""
    if not name.endswith(SNAPSHOT_SUFFIX):
        return None
    offset_text, dash, epoch_text = name[: -len(SNAPSHOT_SUFFIX)].partition("-")
    if (not dash or len(offset_text) != 20 or len(epoch_text) != 10
            or not offset_text.isdigit() or not epoch_text.isdigit()):
        return None
    return SnapshotId(int(offset_text), int(epoch_text))


# The snapshot every log implicitly starts from: nothing, at epoch 0.
EMPTY_SNAPSHOT = SnapshotId(0, 0)

# Epochs go on the wire as int32. A message with an epoch above this is refused, so
# no message can move a replica so close to the top that its elections run out of
# epochs (one forged Fetch at 2**31 - 1 once left every voter unable to elect for
# ever): a million elections of headroom, more than any real quorum will hold.
EPOCH_LIMIT = 2**31 - 1 - 2**20


@attrs.frozen(slots=True)
class EpochEndOffset:
    """`epoch` is the largest epoch <= the one asked about that the log knows, and
    `end_offset` is one past its last record (the start of the next epoch)."""

    epoch: int
    end_offset: int


@attrs.frozen(slots=True)
class QuorumState:
    """What must be durable before any message depending on it leaves the node.

    Invariant: `voted_for` is the only vote this node cast in `epoch` (None when
    it cast none); `leader_id` is the leader this node knows for `epoch`.
    """

    epoch: int = 0
    voted_for: int | None = None
    leader_id: int | None = None

    def __attrs_post_init__(self) -> None:
        if self.epoch < 0:
            raise ValueError(f"epoch must be >= 0, got {self.epoch}")


@attrs.frozen(slots=True)
class LeaderAndEpoch:
    """Who leads in `epoch` as far as this node knows (None: unknown)."""

    leader_id: int | None
    epoch: int
