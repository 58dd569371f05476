"""An in-memory stand-in for a Raft quorum, for the controller's unit tests only.

One shared log, one leader at a time, commits only when the test says so (or at
once with `auto_commit`). It can hold commits back, make the leader resign without
telling anyone (as check-quorum does), and elect another node either keeping or
dropping the old leader's uncommitted batches (both happen in real Raft). Work
queued with `run_on_node_task` runs on the event loop in order, like the driver's
node task; commit and leader callbacks are delivered in log order.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

from controller.logformat import SnapshotId
from controller.logformat.batch import EMPTY_ORIGIN, BatchOrigin, RecordBatch
from controller.quorum.contracts import CommitListener, DriverStatus
from controller.quorum.errors import NotLeaderError
from controller.quorum.service import DriverStoppedError
from controller.quorum_controller.ports import NodeAccess
from controller.raft.control import encode_leader_change
from controller.raft.reads import ReadState
from controller.raft.ready import TransferError
from controller.raft.voters import Voter, VoterChangeError, VoterChangeResult


class FakeNode:
    def __init__(self, cluster: FakeQuorum, node_id: int) -> None:
        self.cluster = cluster
        self._node_id = node_id
        self.listener: CommitListener = CommitListener()
        self.applied = 0  # next offset to hand to the listener
        self.stopped = False
        self.compacted: list[SnapshotId] = []

    @property
    def node_id(self) -> int:
        return self._node_id

    # -- QuorumPort ------------------------------------------------------------------

    def run_on_node_task(self, work: Callable[[NodeAccess], None]) -> None:
        if self.stopped:
            raise DriverStoppedError("stopped")
        asyncio.get_running_loop().call_soon(work, _Access(self))

    def status(self) -> DriverStatus:
        c = self.cluster
        role = "leader" if c.leader_id == self._node_id and not c.resigned else "follower"
        return DriverStatus(self._node_id, role, c.epoch, c.leader_id, c.high_watermark,
                            c.end_offset, c.end_offset, 0, self.applied)


    async def compact(self, snapshot_id: SnapshotId) -> None:
        self.compacted.append(snapshot_id)


class _Access:
    def __init__(self, node: FakeNode) -> None:
        self._node = node

    @property
    def next_offset(self) -> int:
        return self._node.cluster.end_offset

    @property
    def leader_epoch(self) -> int | None:
        c = self._node.cluster
        return c.epoch if c.leader_id == self._node.node_id and not c.resigned else None

    @property
    def known_leader_id(self) -> int | None:
        c = self._node.cluster
        return None if c.resigned else c.leader_id

    @property
    def high_watermark(self) -> int | None:
        return None

    def append(self, records: Sequence[bytes], origin: BatchOrigin) -> int:
        c = self._node.cluster
        if self.leader_epoch is None:
            raise NotLeaderError(self.known_leader_id, c.epoch)
        return c.append(tuple(records), origin)

    def change_voters(self, kind: str, voter: Voter, dry_run: bool
                      ) -> tuple[VoterChangeResult, asyncio.Future[int] | None]:
        """The fake quorum's voters are fixed (a static quorum)."""
        return VoterChangeResult(error=VoterChangeError.STATIC_QUORUM,
                                 message="the voter set is static (an in-memory quorum)"), None

    def transfer_leadership(self, target: int) -> TransferError | None:
        """Done at once: `target` leads the next epoch (one process, no catching up)."""
        c = self._node.cluster
        if self.leader_epoch is None:
            return TransferError.NOT_LEADER
        if target not in c.nodes or target == self._node.node_id:
            return TransferError.NOT_VOTER
        asyncio.get_running_loop().call_soon(c.elect, target)
        return None

    def read_index(self, read_id: int) -> None:
        """One process, no network: leadership is confirmed on the next loop turn
        (unless the leader resigned or lost it meanwhile), at the commit point now."""
        c = self._node.cluster
        if self.leader_epoch is None:
            raise NotLeaderError(self.known_leader_id, c.epoch)
        epoch, index = c.epoch, c.high_watermark

        def confirm() -> None:
            if c.epoch == epoch and not c.resigned and c.leader_id == self._node.node_id:
                self._node.listener.on_reads_confirmed([ReadState(read_id, index)])

        asyncio.get_running_loop().call_soon(confirm)


class FakeQuorum:
    def __init__(self, node_ids: Sequence[int], *, auto_commit: bool = True) -> None:
        self.nodes = {n: FakeNode(self, n) for n in node_ids}
        self.log: list[RecordBatch] = []
        self.high_watermark = 0
        self.epoch = 0
        self.leader_id: int | None = None
        self.resigned = False
        self.auto_commit = auto_commit

    @property
    def end_offset(self) -> int:
        return self.log[-1].next_offset if self.log else 0

    def append(self, records: tuple[bytes, ...], origin: BatchOrigin,
               *, is_control: bool = False) -> int:
        base = self.end_offset
        self.log.append(RecordBatch(base_offset=base, epoch=self.epoch, append_time_ms=0,
                                    is_control=is_control, origin=origin, records=records))
        if self.auto_commit:
            asyncio.get_running_loop().call_soon(self.commit)
        return base

    def elect(self, node_id: int, *, keep_uncommitted: bool = False) -> None:
        """A new epoch led by `node_id`, starting with its LeaderChange batch."""
        if not keep_uncommitted:
            self.log = [b for b in self.log if b.base_offset < self.high_watermark]
        self.epoch += 1
        self.leader_id = node_id
        self.resigned = False
        record = encode_leader_change(node_id, self.epoch, self.nodes, self.nodes)
        self.append((record,), EMPTY_ORIGIN, is_control=True)
        for node in self.nodes.values():
            node.listener.on_leader_change(node_id, self.epoch)

    def resign(self) -> None:
        """The leader stops leading without telling the listeners (check quorum)."""
        self.resigned = True

    def commit(self, up_to: int | None = None) -> None:
        """Commit every batch ending below `up_to` (default: the whole log)."""
        target = self.end_offset if up_to is None else up_to
        for batch in self.log:
            if self.high_watermark <= batch.base_offset and batch.next_offset <= target:
                self.high_watermark = batch.next_offset
        for node in self.nodes.values():
            news = [b for b in self.log
                    if node.applied <= b.base_offset and b.next_offset <= self.high_watermark]
            if news:
                node.applied = news[-1].next_offset
                node.listener.on_commit(news)

    def committed_batches(self) -> list[RecordBatch]:
        return [b for b in self.log if b.next_offset <= self.high_watermark]
