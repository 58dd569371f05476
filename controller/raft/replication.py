"""Replication rules: what the leader answers a Fetch, where a follower truncates,
and the leader's per-epoch bookkeeping (replica progress, parked fetches, the
high watermark, check quorum)."""

from __future__ import annotations

import enum

import attrs

from controller.logformat import EpochEndOffset
from controller.raft.log import RaftLog
from controller.raft.messages import FetchRequest
from controller.raft.reads import ReadBarriers


class FetchCheck(enum.Enum):
    VALID = "valid"
    DIVERGING = "diverging"
    SNAPSHOT = "snapshot"


def check_fetch_position(
    log: RaftLog, fetch_offset: int, last_fetched_epoch: int
) -> tuple[FetchCheck, EpochEndOffset | None]:
    """Does the fetcher's log end (fetch_offset, last_fetched_epoch) match ours?

    It matches when our log has `last_fetched_epoch` and that epoch runs at least
    to `fetch_offset`: all records of one epoch come from its one leader at the
    same offsets, so by Log Matching (§5.3) the fetcher's whole prefix equals ours.
    Otherwise we return our largest epoch <= `last_fetched_epoch` and its end, the
    point the fetcher truncates to. Batches we retain below our snapshot count: a
    fetcher a little behind the snapshot is served records, not the snapshot. An
    offset below what we retain, or an epoch older than all we hold, can only be
    answered with the snapshot.
    """
    if fetch_offset < log.retained_start_offset:
        return FetchCheck.SNAPSHOT, None
    found = log.end_offset_for_epoch(last_fetched_epoch)
    if found is None:
        return FetchCheck.SNAPSHOT, None
    if found.epoch != last_fetched_epoch or fetch_offset > found.end_offset:
        return FetchCheck.DIVERGING, found
    return FetchCheck.VALID, None


def follower_truncation_offset(log: RaftLog, diverging: EpochEndOffset) -> int:
    """Where a follower cuts its log after a divergence answer (KRaft's rule).

    The leader's epoch `diverging.epoch` ends at `diverging.end_offset`; ours at
    our own end for that epoch. Below the smaller of the two both logs hold the
    same records when both have that epoch, so this never cuts a record the
    leader has (and hence never a committed one), nor below our snapshot (the
    leader may answer from batches it retains below its own). The fetcher may have
    to go round again if an older epoch diverges too.
    """
    own = log.end_offset_for_epoch(diverging.epoch)
    own_end = log.start_offset if own is None else own.end_offset
    offset = max(log.start_offset, min(diverging.end_offset, own_end, log.end_offset))
    if offset < log.end_offset:
        # When we lack the leader's epoch, its end can fall inside one of our
        # batches (of an older epoch that differs there anyway): cut at the start
        # of that batch. The true divergence point is a batch start <= offset, so
        # this still cuts nothing the leader has.
        offset = log.read(offset, 1, 0)[0].base_offset
    return offset


@attrs.frozen(slots=True)
class ParkedFetch:
    """A fetch with nothing new to return yet (long poll), answered when records
    arrive, or at `deadline_ms` (brought forward when only the high watermark moved:
    `RaftConfig.high_watermark_linger_ms`)."""

    request: FetchRequest
    deadline_ms: int


@attrs.frozen(slots=True)
class ReplicaProgress:
    """The leader's view of one replica, for reporting only (DescribeQuorum).

    `log_end_offset` is the offset of its last fetch that matched our log (-1 before
    one in this epoch); `last_fetch_ms` the node clock at its last fetch (-1: none).
    """

    replica_id: int
    is_voter: bool
    log_end_offset: int
    last_fetch_ms: int
    # The directory id an observer last fetched with ("" for voters: see the set).
    directory_id: str = ""
    # The node clock when its fetch last reached our log end (-1: not in this epoch).
    last_caught_up_ms: int = -1
    # What its software supports, as its last fetch said ((0, 0): not said).
    supported_versions: tuple[int, int] = (0, 0)
    # The oldest offset its local log holds, as its last fetch said (-1: not said).
    retained_start_offset: int = -1


@attrs.define(slots=True)
class LeaderState:
    """What a leader tracks for its one epoch; dropped when it stops leading.

    Invariants: `fetch_offsets` holds only offsets validated against our log in
    `epoch` and only for voters (observers never count); `epoch_start_offset` is
    the offset of our LeaderChange batch.
    """

    node_id: int
    epoch: int
    voters: frozenset[int]
    epoch_start_offset: int
    started_ms: int
    fetch_offsets: dict[int, int] = attrs.field(factory=dict)
    # Last time each voter fetched (check quorum).
    last_contact_ms: dict[int, int] = attrs.field(factory=dict)
    # Last time each replica's fetch reached our log end (reported only).
    caught_up_ms: dict[int, int] = attrs.field(factory=dict)
    parked: dict[int, ParkedFetch] = attrs.field(factory=dict)
    # Voters that have not fetched in this epoch yet: they get BeginQuorumEpoch.
    awaiting_begin: set[int] = attrs.field(factory=set)
    last_begin_sent_ms: int = 0
    # Observer id -> (last valid fetch offset or -1, last fetch ms, directory id).
    # Reported (replica_progress), and read when a voter is added (caught up?).
    observer_fetches: dict[int, tuple[int, int, str]] = attrs.field(factory=dict)
    # Each replica's supported versions, from its last fetch (FetchRequest).
    supported_versions: dict[int, tuple[int, int]] = attrs.field(factory=dict)
    # Each replica's retained log start, from its last fetch (-1: not said).
    retained_starts: dict[int, int] = attrs.field(factory=dict)
    # A leadership transfer under way (`LeaderMixin.transfer_leadership`): the voter
    # to take over, and when the attempt is given up. Invariant: while set, nothing
    # but control batches is appended, so the log end the target must reach stays put.
    transfer_target: int | None = None
    transfer_deadline_ms: int = 0
    # Linearizable reads waiting for a majority to confirm our leadership.
    reads: ReadBarriers = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self.reads = ReadBarriers(self.node_id, self.voters)

    def record_fetch(
        self,
        replica_id: int,
        fetch_offset: int | None,
        now_ms: int,
        *,
        is_voter: bool = True,
        directory_id: str = "",
        caught_up: bool = False,
        supported_versions: tuple[int, int] = (0, 0),
        retained_start_offset: int = -1,
    ) -> None:
        """`is_voter`: the fetch came from the voter of this id (its directory id
        matches); a replica of a voter's id with another directory is an observer."""
        self.supported_versions[replica_id] = supported_versions
        self.retained_starts[replica_id] = retained_start_offset
        if caught_up:
            self.caught_up_ms[replica_id] = now_ms
        if replica_id not in self.voters or not is_voter:
            # None: its position did not match our log, so its log end is unknown.
            self.observer_fetches[replica_id] = (
                -1 if fetch_offset is None else fetch_offset,
                now_ms,
                directory_id,
            )
            return
        self.last_contact_ms[replica_id] = now_ms
        self.awaiting_begin.discard(replica_id)
        if fetch_offset is not None:
            self.fetch_offsets[replica_id] = fetch_offset

    def record_contact(self, replica_id: int, now_ms: int) -> None:
        if replica_id in self.voters:
            self.last_contact_ms[replica_id] = now_ms

    def set_voters(self, voters: frozenset[int], now_ms: int) -> None:
        """The voter set changed (a change appended or truncated away). A new
        voter keeps the progress it made as an observer; a removed one becomes an
        observer. A new voter counts as heard from now (check quorum gives it a
        full timeout to fetch as a voter)."""
        for added in voters - self.voters:
            seen = self.observer_fetches.pop(added, None)
            if seen is not None and seen[0] >= 0:
                self.fetch_offsets[added] = seen[0]
            self.last_contact_ms[added] = now_ms
        for removed in self.voters - voters:
            # It shows up as an observer at its next fetch (with its directory id); an
            # entry already there is another replica of that id fetching, kept as is.
            self.fetch_offsets.pop(removed, None)
            self.last_contact_ms.pop(removed, None)
            self.awaiting_begin.discard(removed)
            self.parked.pop(removed, None)
        self.voters = voters
        self.reads.voters = voters
    def live_voters(self, now_ms: int, timeout_ms: int) -> frozenset[int]:
        """Voters heard from within `timeout_ms` (us included, if we are one)."""
        return frozenset(
            v
            for v in self.voters
            if v == self.node_id or now_ms - self.last_contact_ms.get(v, -timeout_ms - 1)
            <= timeout_ms
        )

    def high_watermark_candidate(self, own_flushed_offset: int) -> int | None:
        """The largest offset stored on a majority of voters, or None while it
        does not yet cover our epoch start.

        Raft §5.4.2 (Figure 8): counting replicas of records from an older epoch
        must never commit them; only once a record of our own epoch is on a
        majority does everything before it commit with it.
        """
        if not self.voters:
            return None
        offsets = [
            own_flushed_offset if v == self.node_id else self.fetch_offsets.get(v, 0)
            for v in self.voters
        ]
        offsets.sort(reverse=True)
        candidate = offsets[len(self.voters) // 2]
        return candidate if candidate > self.epoch_start_offset else None

    def has_quorum_contact(self, now_ms: int, timeout_ms: int) -> bool:
        """Have a majority of voters (us included) been heard from within timeout?"""
        times = [
            now_ms if v == self.node_id else self.last_contact_ms.get(v, self.started_ms)
            for v in self.voters
        ]
        if not times:
            return False
        times.sort(reverse=True)
        return now_ms - times[len(self.voters) // 2] <= timeout_ms

    def replica_progress(
        self, own_end_offset: int, now_ms: int, own_versions: tuple[int, int] = (0, 0),
        own_retained_start: int = -1,
    ) -> tuple[ReplicaProgress, ...]:
        """Voters (by id, us with our own log end) then observers (by id)."""
        versions, starts = self.supported_versions, self.retained_starts
        voters = tuple(
            ReplicaProgress(v, True, own_end_offset, now_ms, "", now_ms, own_versions,
                            own_retained_start)
            if v == self.node_id
            else ReplicaProgress(
                v,
                True,
                self.fetch_offsets.get(v, -1),
                self.last_contact_ms.get(v, -1),
                "",
                self.caught_up_ms.get(v, -1),
                versions.get(v, (0, 0)),
                starts.get(v, -1),
            )
            for v in sorted(self.voters)
        )
        observers = tuple(
            ReplicaProgress(o, False, offset, at, directory_id, self.caught_up_ms.get(o, -1),
                            versions.get(o, (0, 0)), starts.get(o, -1))
            for o, (offset, at, directory_id) in sorted(self.observer_fetches.items())
        )
        return voters + observers

    def successors_by_progress(self) -> tuple[int, ...]:
        """Other voters, most caught up first (EndQuorumEpoch's preference order)."""
        others = [v for v in self.voters if v != self.node_id]
        others.sort(key=lambda v: (-self.fetch_offsets.get(v, -1), v))
        return tuple(others)
