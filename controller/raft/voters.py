"""The voter set and its history in the log (dynamic membership, KIP-853).

A replica is a node id plus a *directory id*: a random id written into the data
directory when it is formatted. A disk that is wiped and formatted again gets a new
directory id, so it comes back as a new replica with an empty log, never as the
voter it replaces: it may not vote or count toward a majority until the quorum adds
it (Raft's safety rests on a voter never forgetting what it stored).

Where the voter set comes from:

* **static** (a quorum formatted without initial controllers): the node ids of the
  configuration, no directory ids; it cannot change (`VoterSet.dynamic` False).
* **dynamic**: a VotersRecord (ids, directory ids, endpoints) written at format time
  as the log's first batch and by the leader on every change. Each replica uses the
  *latest* voter set in its log, committed or not (Raft thesis §4.1): a change takes
  effect when appended, and one truncated away is undone. A snapshot carries the
  set in force at its offset.

`VoterHistory` keeps the sets by the offset of their record, so truncation and
compaction move it with the log.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Iterator

import attrs

# A directory id is 22 characters of URL-safe base64; anything this long is garbage.
MAX_DIRECTORY_ID_CHARS = 64
# The most voters a quorum may have (each voter is in every majority computation).
MAX_VOTERS = 31
_MAX_ENDPOINT_CHARS = 255


@attrs.frozen(slots=True)
class Voter:
    node_id: int
    # "" for a voter of a static set (no directory ids to check).
    directory_id: str = ""
    # host:port of its Raft service ("" when not known: a static set).
    endpoint: str = ""

    def __attrs_post_init__(self) -> None:
        if not 0 <= self.node_id < 2**31:
            raise ValueError(f"voter id {self.node_id} out of range")
        if len(self.directory_id) > MAX_DIRECTORY_ID_CHARS:
            raise ValueError(f"directory id of voter {self.node_id} is too long")
        if len(self.endpoint) > _MAX_ENDPOINT_CHARS:
            raise ValueError(f"endpoint of voter {self.node_id} is too long")

    def describe(self) -> str:
        return f"{self.node_id}@{self.endpoint or '?'}:{self.directory_id or '-'}"


@attrs.frozen(slots=True)
class VoterSet:
    """Voters sorted by node id; node ids are unique.

    `dynamic`: the set came from the log (it may change, and directory ids are
    checked); False for the static set of a quorum formatted without one.
    """

    voters: tuple[Voter, ...]
    dynamic: bool = True

    def __attrs_post_init__(self) -> None:
        ids = [v.node_id for v in self.voters]
        if ids != sorted(set(ids)):
            raise ValueError(f"voter ids must be unique and sorted, got {ids}")
        if len(ids) > MAX_VOTERS:
            raise ValueError(f"{len(ids)} voters (at most {MAX_VOTERS})")
        if self.dynamic and any(not v.directory_id for v in self.voters):
            raise ValueError("every voter of a dynamic voter set needs a directory id")

    @classmethod
    def of(cls, voters: Iterable[Voter], *, dynamic: bool = True) -> VoterSet:
        return cls(tuple(sorted(voters, key=lambda v: v.node_id)), dynamic)

    @classmethod
    def static(cls, node_ids: Iterable[int]) -> VoterSet:
        return cls.of((Voter(n) for n in set(node_ids)), dynamic=False)

    @property
    def ids(self) -> frozenset[int]:
        return frozenset(v.node_id for v in self.voters)

    @property
    def majority(self) -> int:
        return len(self.voters) // 2 + 1

    def __len__(self) -> int:
        return len(self.voters)

    def __iter__(self) -> Iterator[Voter]:
        return iter(self.voters)

    def get(self, node_id: int) -> Voter | None:
        for voter in self.voters:
            if voter.node_id == node_id:
                return voter
        return None

    def is_voter(self, node_id: int, directory_id: str) -> bool:
        """Is the replica (node_id, directory_id) a voter? A static set checks ids only."""
        voter = self.get(node_id)
        if voter is None:
            return False
        return not voter.directory_id or voter.directory_id == directory_id

    def directory_id_of(self, node_id: int) -> str:
        voter = self.get(node_id)
        return "" if voter is None else voter.directory_id

    def with_voter(self, voter: Voter) -> VoterSet:
        """This set with `voter` added, or replacing the voter of the same id."""
        return VoterSet.of([v for v in self.voters if v.node_id != voter.node_id] + [voter],
                           dynamic=self.dynamic)

    def without(self, node_id: int) -> VoterSet:
        return VoterSet.of([v for v in self.voters if v.node_id != node_id],
                           dynamic=self.dynamic)

    def describe(self) -> str:
        return "{" + ", ".join(v.describe() for v in self.voters) + "}"


EMPTY_VOTER_SET = VoterSet((), dynamic=True)


class VoterHistory:
    """The voter sets of the log, by the offset of their record.

    `base` is in force from the log's start (the snapshot's set, the static set, or
    none yet for a fresh replica of a dynamic quorum); each entry from its offset on.

    Invariants: entry offsets strictly increase and are >= `base_offset`.
    """

    def __init__(self, base: VoterSet, base_offset: int) -> None:
        self.base = base
        self.base_offset = base_offset
        self._entries: list[tuple[int, VoterSet]] = []

    @property
    def latest(self) -> VoterSet:
        return self._entries[-1][1] if self._entries else self.base

    @property
    def latest_offset(self) -> int | None:
        """Offset of the latest set's record; None when it is the base."""
        return self._entries[-1][0] if self._entries else None

    @property
    def entries(self) -> tuple[tuple[int, VoterSet], ...]:
        return tuple(self._entries)

    def add(self, offset: int, voters: VoterSet) -> None:
        last = self._entries[-1][0] if self._entries else self.base_offset - 1
        assert offset > last, (offset, last)
        self._entries.append((offset, voters))

    def in_force_at(self, offset: int) -> VoterSet:
        """The set in force for the record at `offset` (the latest at or below it)."""
        found = self.base
        for at, voters in self._entries:
            if at > offset:
                break
            found = voters
        return found

    def truncate(self, offset: int) -> None:
        """The log was cut at `offset`: sets recorded at or above it are gone."""
        while self._entries and self._entries[-1][0] >= offset:
            self._entries.pop()

    def compact(self, offset: int) -> None:
        """The log now starts at `offset`: fold older entries into the base."""
        while self._entries and self._entries[0][0] < offset:
            self.base = self._entries.pop(0)[1]
        self.base_offset = max(self.base_offset, offset)

    def reset(self, base: VoterSet, offset: int) -> None:
        """A snapshot replaced the log: its set is in force from `offset`."""
        self.base, self.base_offset = base, offset
        self._entries.clear()


class VoterChangeError(enum.Enum):
    NOT_LEADER = "not_leader"
    # The quorum's voter set is static (formatted without initial controllers).
    STATIC_QUORUM = "static_quorum"
    # The leader has not committed a record of its own epoch yet.
    NO_HIGH_WATERMARK = "no_high_watermark"
    # The previous voter change is not committed yet (one change at a time).
    CHANGE_PENDING = "change_pending"
    DUPLICATE_VOTER = "duplicate_voter"
    UNKNOWN_VOTER = "unknown_voter"
    LAST_VOTER = "last_voter"
    # Fewer than a majority of the voters left would be live: nothing could commit.
    WOULD_LOSE_QUORUM = "would_lose_quorum"
    # The replica to add is not fetching from the leader, or is behind.
    NOT_CAUGHT_UP = "not_caught_up"
    INVALID = "invalid"


@attrs.frozen(slots=True, kw_only=True)
class VoterChangeResult:
    """Either the offset of the appended VotersRecord (the change is in force now and
    done once the high watermark passes it) and the new set, or an error and a
    message saying why, for the operator."""

    offset: int | None = None
    voters: VoterSet | None = None
    error: VoterChangeError | None = None
    message: str = ""
    leader_id: int | None = None

    @property
    def ok(self) -> bool:
        return self.error is None
