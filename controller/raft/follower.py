"""The fetching side (followers and observers): sending Fetch, applying what comes
back (append, truncate on divergence, high watermark), and pulling a snapshot in
chunks when the leader's log no longer reaches back to us."""

from __future__ import annotations

import attrs

from controller.logformat import SnapshotId
from controller.raft.errors import CommittedHistoryCutError
from controller.raft.messages import (
    Errors,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
)
from controller.raft.replication import follower_truncation_offset
from controller.raft.roles import Role
from controller.raft.snapshot import SnapshotFetch
from controller.raft.state import NodeState
from controller.raft.voters import VoterSet


class FollowerMixin(NodeState):
    def _fetch_target(self) -> int | None:
        """Whom to fetch from: the leader; an observer that does not know it (or
        keeps failing to reach it) asks the voters in turn, whose answers name it."""
        leader = self.leader_id if self.leader_id != self.node_id else None
        if leader is not None and (self.can_campaign or self.fetch_failures == 0):
            return leader
        if self.can_campaign:
            return None  # a voter without a leader waits for an election
        # The voters of our log; a replica that has none yet (just formatted for a
        # dynamic quorum) asks the ones configured.
        voters = sorted(self.voters.ids - {self.node_id} or self.config.voters - {self.node_id})
        if not voters:
            return None
        return voters[self.fetch_failures % len(voters)]

    def maybe_fetch(self) -> None:
        """Send the next Fetch if none is outstanding.

        We fetch only once everything we appended is flushed, so `fetch_offset` is
        always an offset we hold durably: the leader counts it toward the high
        watermark, and a crash cannot take it back. (Group commit: one flush covers
        every batch of one fetch response.)
        """
        if self.role is not Role.FOLLOWER or self.fetch_inflight is not None:
            return
        if self.snapshot_fetch is not None or self.snapshot_to_load is not None:
            return
        if self.flushed_offset < self.log.end_offset or self.now_ms < self.next_fetch_ms:
            return
        target = self._fetch_target()
        if target is None:
            return
        seq = self.next_seq()
        self.fetch_inflight = (seq, self.now_ms)
        self.send(
            FetchRequest(
                cluster_id=self.config.cluster_id,
                src=self.node_id,
                dst=target,
                epoch=self.epoch,
                src_directory_id=self.directory_id,
                seq=seq,
                fetch_offset=self.log.end_offset,
                last_fetched_epoch=self.log.last_epoch,
                high_watermark=self.high_watermark,
                max_wait_ms=self.config.fetch_max_wait_ms,
                read_barrier=self.read_barrier_seen,
                supported_versions=self.config.supported_versions,
                retained_start_offset=self.log.retained_start_offset,
            )
        )

    def follower_tick(self) -> None:
        timeout = self.config.request_timeout_ms
        if self.fetch_inflight is not None and self.now_ms - self.fetch_inflight[1] >= timeout:
            self.fetch_inflight = None
            self.fetch_failures += 1
        fetch = self.snapshot_fetch
        if fetch is not None and self.now_ms - fetch.sent_at_ms >= timeout:
            self._request_snapshot_chunk(fetch)
        self.maybe_fetch()

    def on_fetch_response(self, resp: FetchResponse) -> None:
        """A response in our epoch (the caller handled newer and older epochs)."""
        if self.role is not Role.FOLLOWER:
            return
        if self.fetch_inflight is None or resp.seq != self.fetch_inflight[0]:
            return  # late or duplicated
        self.fetch_inflight = None
        if self.leader_id is None:
            if resp.leader_id not in (None, self.node_id):
                self.become_follower(self.epoch, resp.leader_id)
            else:
                self.fetch_failures += 1
                self.next_fetch_ms = self.now_ms + self.config.fetch_max_wait_ms
            return
        if resp.src != self.leader_id or resp.error is not Errors.NONE:
            if resp.src != self.leader_id and resp.leader_id == self.leader_id:
                # An observer asking around was sent back to the leader it knows:
                # fetch from it again.
                self.fetch_failures = 0
                return
            # Not (or no longer) the leader: back off; the election timer decides.
            self.fetch_failures += 1
            self.next_fetch_ms = self.now_ms + self.config.fetch_max_wait_ms
            return
        # Our leader, in our epoch, sent this after raising the barrier (reads.py).
        self.read_barrier_seen = max(self.read_barrier_seen, resp.read_barrier)
        if (resp.fetch_offset, resp.last_fetched_epoch) != (
            self.log.end_offset,
            self.log.last_epoch,
        ):
            return  # answers a log we no longer have
        self.fetch_failures = 0
        self.last_leader_contact_ms = self.now_ms
        self.reset_election_timer()
        if resp.snapshot_id is not None:
            self._start_snapshot_fetch(resp.snapshot_id)
        elif resp.diverging is not None:
            offset = follower_truncation_offset(self.log, resp.diverging)
            if offset < self.high_watermark and not self.is_voter:
                # Committed history we applied is gone upstream (errors.py). A voter
                # never gets here: truncate_log asserts it.
                raise CommittedHistoryCutError(offset, self.high_watermark, self.leader_id)
            self.truncate_log(offset)
        else:
            for batch in resp.batches:
                assert batch.epoch <= self.epoch, (batch.epoch, self.epoch)
                self.log.append(batch)
                self._note_voters(batch)
            # The leader validated our log up to fetch_offset and we appended its
            # records after it, so our whole log is a prefix of the leader's: every
            # offset in it below the leader's high watermark is committed.
            self.set_high_watermark(min(resp.high_watermark, self.log.end_offset))
            if self.repair is not None and self.leader_committed_in_its_epoch():
                self.repair.note_leader_high_watermark(resp.high_watermark)
                self.check_repaired()
        self.maybe_fetch()

    # --------------------------------------------------------------- snapshots

    def _start_snapshot_fetch(self, snapshot_id: SnapshotId) -> None:
        assert self.leader_id is not None
        self.snapshot_store.begin_write(snapshot_id)
        fetch = SnapshotFetch(snapshot_id, self.leader_id)
        self._request_snapshot_chunk(fetch)

    def _request_snapshot_chunk(self, fetch: SnapshotFetch) -> None:
        fetch = attrs.evolve(fetch, seq=self.next_seq(), sent_at_ms=self.now_ms)
        self.snapshot_fetch = fetch
        self.send(
            FetchSnapshotRequest(
                cluster_id=self.config.cluster_id,
                src=self.node_id,
                dst=fetch.leader_id,
                epoch=self.epoch,
                src_directory_id=self.directory_id,
                seq=fetch.seq,
                snapshot_id=fetch.snapshot_id,
                position=fetch.position,
                max_bytes=self.config.snapshot_chunk_bytes,
            )
        )

    def on_fetch_snapshot_response(self, resp: FetchSnapshotResponse) -> None:
        fetch = self.snapshot_fetch
        if fetch is None or resp.seq != fetch.seq or resp.src != fetch.leader_id:
            return
        if resp.snapshot_id != fetch.snapshot_id or resp.position != fetch.position:
            return
        if resp.error is not Errors.NONE or (not resp.data and resp.position < resp.size_bytes):
            # Gone (a newer snapshot replaced it) or the leader moved: fetch again
            # and let the leader name the snapshot to use now.
            self.snapshot_fetch = None
            self.maybe_fetch()
            return
        self.last_leader_contact_ms = self.now_ms
        self.reset_election_timer()
        self.snapshot_store.write_chunk(fetch.snapshot_id, fetch.position, resp.data)
        fetch = attrs.evolve(
            fetch, position=fetch.position + len(resp.data), size_bytes=resp.size_bytes
        )
        if fetch.complete:
            self.snapshot_fetch = None
            self.snapshot_to_load = fetch.snapshot_id
            self._snapshot_load_reported = False
        else:
            self._request_snapshot_chunk(fetch)

    def snapshot_loaded(
        self, snapshot_id: SnapshotId, now_ms: int, voters: VoterSet | None = None
    ) -> None:
        """Event: the driver made `Ready.snapshot_to_load` durable and loaded it;
        `voters` is the voter set it carries (None: a static quorum's snapshot).

        The snapshot holds only committed records (the leader snapshots below its
        high watermark), and we fetched it because our log ended below it, so the
        log restarts empty at the snapshot and the high watermark moves up to it.
        """
        self.now_ms = max(self.now_ms, now_ms)
        if snapshot_id != self.snapshot_to_load:
            return
        self.snapshot_to_load = None
        assert self.high_watermark <= snapshot_id.end_offset, (self.high_watermark, snapshot_id)
        self.log.reset_to_snapshot(snapshot_id)
        was_voter = self.is_voter
        if voters is None:
            voters = VoterSet.static(self.config.voters)
        self.voter_history.reset(voters, snapshot_id.end_offset)
        self.voters_changed(was_voter)
        self.flushed_offset = self._flush_requested = snapshot_id.end_offset
        self._flushes.clear()
        self.high_watermark = self.applied_offset = snapshot_id.end_offset
        self.maybe_fetch()
