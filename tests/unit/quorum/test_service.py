"""Reply matching (request -> the core's response) and the driver's bounds."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from controller.logformat import BatchOrigin, RecordBatch, SnapshotId
from controller.quorum.driver import DriverConfig, NotLeaderError, RaftDriver
from controller.quorum.proposals import PendingProposals, ProposalLostError
from controller.quorum.service import (
    DriverStoppedError,
    QueueFullError,
    ReplyWaiters,
    request_key,
    response_key,
)
from controller.raft import messages as m
from controller.storage.meta_properties import format_data_dir, random_cluster_id

ENV: dict[str, Any] = {"cluster_id": "c", "epoch": 3}


def _pairs() -> list[tuple[m.Request, m.Response]]:
    fetch = m.FetchRequest(**ENV, src=2, dst=1, seq=9, fetch_offset=0, last_fetched_epoch=0,
                           high_watermark=0, max_wait_ms=10)
    fetch_resp = m.FetchResponse(**ENV, src=1, dst=2, seq=9, error=m.Errors.NONE, leader_id=1,
                                 fetch_offset=0, last_fetched_epoch=0, high_watermark=0,
                                 log_start_offset=0)
    vote = m.VoteRequest(**ENV, src=2, dst=1, pre_vote=True, last_epoch=1, end_offset=5)
    # The voter answers with its own (older) epoch; vote_epoch echoes the request.
    vote_resp = m.VoteResponse(cluster_id="c", epoch=2, src=1, dst=2, error=m.Errors.NONE,
                               pre_vote=True, vote_epoch=3, granted=True, leader_id=None)
    snap = m.FetchSnapshotRequest(**ENV, src=2, dst=1, seq=4, snapshot_id=SnapshotId(5, 1),
                                  position=0, max_bytes=10)
    snap_resp = m.FetchSnapshotResponse(**ENV, src=1, dst=2, seq=4, error=m.Errors.NONE,
                                        leader_id=1, snapshot_id=SnapshotId(5, 1), position=0,
                                        size_bytes=0)
    begin = m.BeginQuorumEpochRequest(**ENV, src=2, dst=1)
    begin_resp = m.BeginQuorumEpochResponse(cluster_id="c", epoch=4, src=1, dst=2,
                                            error=m.Errors.FENCED_LEADER_EPOCH, leader_id=3)
    end = m.EndQuorumEpochRequest(**ENV, src=2, dst=1, preferred_successors=(1,))
    end_resp = m.EndQuorumEpochResponse(**ENV, src=1, dst=2, error=m.Errors.NONE, leader_id=2)
    return [(fetch, fetch_resp), (vote, vote_resp), (snap, snap_resp), (begin, begin_resp),
            (end, end_resp)]


@pytest.mark.parametrize(("req", "resp"), _pairs())
def test_a_response_matches_its_request(req: m.Request, resp: m.Response) -> None:
    assert request_key(req) == response_key(resp)


def test_keys_of_different_requests_differ() -> None:
    keys = [request_key(req) for req, _ in _pairs()]
    assert len(set(keys)) == len(keys)


def test_waiters_are_answered_oldest_first_and_dropped_when_gone() -> None:
    async def main() -> None:
        waiters = ReplyWaiters()
        (req, resp), = [p for p in _pairs() if isinstance(p[0], m.BeginQuorumEpochRequest)]
        first = waiters.register(request_key(req))
        second = waiters.register(request_key(req))
        first.cancel()  # that handler timed out
        assert waiters.resolve(resp) and second.result() is resp
        assert not waiters.resolve(resp)  # nobody waits: dropped
        third = waiters.register(request_key(req))
        waiters.discard(request_key(req), third)
        assert len(waiters) == 0
        fourth = waiters.register(request_key(req))
        waiters.fail_all(DriverStoppedError("stop"))
        with pytest.raises(DriverStoppedError):
            fourth.result()

    asyncio.run(main())


def _batch(base: int, epoch: int, n: int = 1) -> RecordBatch:
    return RecordBatch(base, epoch, 0, False, BatchOrigin(), (b"x",) * n)


def test_pending_proposals_commit_or_are_lost() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        pending = PendingProposals()
        ok, replaced, passed, cut = (loop.create_future() for _ in range(4))
        pending.add(1, 2, 5, ok)        # [1, 2] in epoch 5
        pending.add(3, 1, 5, replaced)  # [3] in epoch 5, replaced by epoch 6
        pending.add(5, 1, 5, passed)    # inside a batch of another leader
        pending.add(9, 1, 5, cut)       # beyond a truncation
        pending.committed([_batch(1, 5, 2), _batch(3, 6, 1), _batch(4, 6, 3)], 7)
        assert ok.result() == 2
        for fut in (replaced, passed):
            with pytest.raises(ProposalLostError):
                fut.result()
        assert not cut.done()
        pending.truncated(8)
        with pytest.raises(ProposalLostError):
            cut.result()
        assert len(pending) == 0

    asyncio.run(main())


def test_driver_refuses_work_when_not_running_and_when_full(tmp_path: Path) -> None:
    cluster_id = random_cluster_id()
    format_data_dir(tmp_path / "d", cluster_id, 1)
    config = DriverConfig(node_id=1, cluster_id=cluster_id, voter_addresses={1: "127.0.0.1:1"},
                          data_dir=tmp_path / "d", max_inbox_events=1)

    async def main() -> None:
        driver = RaftDriver(config)
        with pytest.raises(DriverStoppedError):
            await driver.propose([b"x"])
        await driver.start()
        try:
            # A single voter elects itself and commits alone.
            async def propose_when_leading() -> int:
                while True:
                    try:
                        return await driver.propose([b"solo"])
                    except (NotLeaderError, QueueFullError):
                        await asyncio.sleep(0.01)

            assert await asyncio.wait_for(propose_when_leading(), 10) >= 1
            assert driver.status().role == "leader"
            # With a one-event inbox, a second concurrent proposal is refused, not queued.
            results = await asyncio.gather(driver.propose([b"a"]), driver.propose([b"b"]),
                                           return_exceptions=True)
            assert any(isinstance(r, QueueFullError) for r in results)
            assert any(isinstance(r, int) for r in results)
        finally:
            await driver.stop()
        with pytest.raises(DriverStoppedError):
            await driver.propose([b"x"])

    asyncio.run(main())


def test_a_storage_failure_stops_the_node_loudly(tmp_path: Path) -> None:
    cluster_id = random_cluster_id()
    format_data_dir(tmp_path / "d", cluster_id, 1)
    config = DriverConfig(node_id=1, cluster_id=cluster_id, voter_addresses={1: "127.0.0.1:1"},
                          data_dir=tmp_path / "d")

    async def main() -> None:
        driver = RaftDriver(config)
        await driver.start()
        log = driver._log
        assert log is not None

        def broken_flush() -> int:
            raise OSError("disk on fire")

        log.flush = broken_flush  # type: ignore[method-assign]
        # The node's first flush (its LeaderChange record) fails: it must stop,
        # not carry on with a log it cannot make durable.
        await asyncio.wait_for(driver.stopped.wait(), 10)
        assert isinstance(driver.failure, OSError)
        with pytest.raises(DriverStoppedError):
            await driver.propose([b"x"])
        await driver.stop()  # a no-op now

    asyncio.run(main())
