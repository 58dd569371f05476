"""What the controller needs of the Raft layer (`RaftDriver` satisfies it; unit tests
use an in-memory double), and its own settings."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Protocol

import attrs

from controller.logformat import SnapshotId
from controller.logformat.batch import BatchOrigin
from controller.metadata.levels import LATEST_METADATA_VERSION, MINIMUM_METADATA_VERSION

if TYPE_CHECKING:
    import asyncio

    from controller.quorum.contracts import DriverStatus
    from controller.raft.ready import TransferError
    from controller.raft.voters import Voter, VoterChangeResult


class NodeAccess(Protocol):
    """Handed to work running on the Raft node task. While that work runs nothing
    else touches the node or its log, so `append` puts the batch exactly at
    `next_offset`."""

    @property
    def next_offset(self) -> int: ...

    @property
    def leader_epoch(self) -> int | None:
        """The epoch while this node leads, else None."""
        ...

    @property
    def known_leader_id(self) -> int | None: ...

    @property
    def high_watermark(self) -> int | None:
        """The commit point this node knows (None: not known yet)."""
        ...

    def append(self, records: Sequence[bytes], origin: BatchOrigin) -> int:
        """Append one batch now and return its base offset; raises
        `controller.quorum.errors.NotLeaderError` or `ProposalRejectedError`."""
        ...

    def change_voters(self, kind: str, voter: Voter, dry_run: bool
                      ) -> tuple[VoterChangeResult, asyncio.Future[int] | None]:
        """Add / remove / update a voter now (`NodeTaskAccess.change_voters`): the
        result, and when a VotersRecord was appended a future of its commit."""
        ...

    def transfer_leadership(self, target: int) -> TransferError | None:
        """Start handing leadership to voter `target` (`RaftNode.transfer_leadership`);
        meanwhile `append` raises `LeadershipTransferringError`."""
        ...

    def read_index(self, read_id: int) -> None:
        """Ask the node to confirm its leadership for a linearizable read (ReadIndex);
        the confirmation comes back as `ControllerMachine.reads_confirmed`. Raises
        `NotLeaderError`, or `ProposalRejectedError` when too many reads wait."""
        ...


class QuorumPort(Protocol):
    @property
    def node_id(self) -> int: ...

    def run_on_node_task(self, work: Callable[[NodeAccess], None]) -> None:
        """Run `work` on the node task, in order with the commit callbacks; raises
        `DriverStoppedError` when the node no longer runs."""
        ...

    def status(self) -> DriverStatus: ...

    async def compact(self, snapshot_id: SnapshotId) -> None:
        """The controller wrote `snapshot_id` (a committed offset): drop the log below."""
        ...



def _frozen_map(value: Mapping[int, str]) -> Mapping[int, str]:
    return MappingProxyType(dict(value))


def _positive(_inst: object, attribute: attrs.Attribute[int], value: int) -> None:
    if value <= 0:
        raise ValueError(f"{attribute.name} must be > 0, got {value}")


@attrs.frozen(kw_only=True)
class ControllerSettings:
    node_id: int
    cluster_id: str
    # Voter id -> host:port, to tell clients where the active controller is (the
    # configured voters; a dynamic quorum's log adds the endpoints of new ones).
    voter_addresses: Mapping[int, str] = attrs.field(converter=_frozen_map)
    # Where this controller serves ("" : its entry in voter_addresses).
    listen_address: str = ""
    session_timeout_ms: int = attrs.field(default=9_000, validator=_positive)
    # Events queued for the controller and not yet run, plus requests parked until a
    # new leader is active: past this a request is refused as busy.
    max_queued_events: int = attrs.field(default=10_000, validator=_positive)
    # Items (topics, resources, partitions, ...) in one request.
    max_items_per_request: int = attrs.field(default=10_000, validator=_positive)
    # How often the controller looks at timers while something waits on one (expired
    # waits, partition moves owed); idle, it ticks only when a no-op or a broker
    # session expiry is due (`ControllerMachine.next_tick_ms`).
    tick_interval_ms: int = attrs.field(default=100, validator=_positive)
    # After leadership is lost, how long an appended request waits for its fate
    # (committed by the next leader, or replaced) before it is answered "unknown".
    orphan_timeout_ms: int = attrs.field(default=5_000, validator=_positive)
    # How long a request waits for a new leader to become active.
    activation_wait_ms: int = attrs.field(default=3_000, validator=_positive)
    # How long a read waits for this controller to apply the log up to the
    # min_offset it asks for (then it is refused, naming how far behind we are):
    # under the AdminClient's attempt deadline (1 s), so the client hears why and
    # asks elsewhere, instead of timing out.
    stale_read_wait_ms: int = attrs.field(default=500, validator=_positive)
    # The longest a caller waits for any answer.
    request_timeout_ms: int = attrs.field(default=30_000, validator=_positive)
    # A snapshot is written after this many bytes of newly committed records ...
    snapshot_interval_bytes: int = attrs.field(default=16 * 1024 * 1024, validator=_positive)
    # ... and at least this many times the newest snapshot's size: a snapshot of a
    # large image costs in proportion to the image, so a log significantly larger
    # than the snapshot keeps that cost a small share of every write's (Raft thesis
    # §5.1.3). At 1M partitions (60 MB) and the default interval, snapshots would
    # otherwise write 4 bytes of image per byte of log. 0: the byte interval only.
    snapshot_interval_image_multiple: int = attrs.field(default=2, validator=attrs.validators.ge(0))
    # ... or, once snapshot_interval_bytes came since the newest snapshot, this long
    # after it started (0: never): the multiple defers snapshots through a burst of
    # writes, and a log that then grows slowly would keep the burst to replay on every
    # restart (a follower restarted at 1M partitions replayed 72% of its log). At most
    # one image per interval: ~2.5 CPU s a minute at 1M partitions on a slow host.
    snapshot_max_interval_ms: int = attrs.field(default=60_000,
                                                validator=attrs.validators.ge(0))
    # ... in steps of this many records, so the loop keeps serving in between: a step
    # of 500 PartitionRecords is 1-2 ms; 2,000-record steps, 4-18 ms each, put ~15%
    # more into the p99 of concurrent 100-partition creates.
    snapshot_chunk_records: int = attrs.field(default=500, validator=_positive)
    # ... and at most this share (percent) of the node task's time: after a step of
    # d ms the next waits d * (100 / busy - 1) ms. Back to back (100), the writing
    # controller and the others (each snapshots too) served 100-partition creates at
    # 16 clients with a p99 of ~90 ms against ~55 ms without snapshots; at 25 the p99
    # is that of no snapshots, and a snapshot takes ~4x as long to write.
    snapshot_busy_percent: int = attrs.field(
        default=25, validator=[attrs.validators.ge(1), attrs.validators.le(100)])
    # Without other writes for this long the active controller appends a NoOpRecord
    # (metadata.version 6; Kafka's metadata.max.idle.interval.ms); 0: never.
    metadata_max_idle_interval_ms: int = attrs.field(default=500,
                                                     validator=attrs.validators.ge(0))
    # The metadata.version a new cluster starts at (its first active controller
    # writes it): the latest by default; lower to run beside older software.
    bootstrap_metadata_version: int = attrs.field(
        default=LATEST_METADATA_VERSION,
        validator=[attrs.validators.ge(MINIMUM_METADATA_VERSION),
                   attrs.validators.le(LATEST_METADATA_VERSION)])

    def leader_address(self, leader_id: int | None) -> str | None:
        return None if leader_id is None else self.voter_addresses.get(leader_id)
