"""Three real node processes on loopback: crash and pause the leader; no
acknowledged write is lost, and a deposed leader drops what it never committed.

The nodes are `tests.support.quorum_harness.node_main` (a RaftDriver plus the test-only
QuorumHarness service) with the default timeouts. Every wait polls a condition
with a deadline; the fixture kills every child process whatever happens.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from controller.logformat import RecordBatch
from tests.support.polling import wait_until
from tests.support.quorum_harness import harness_pb2 as hpb
from tests.support.raft_node_process import NodeProcess, Quorum

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

ELECTION_S = 10.0  # generous bound for an election on a loaded machine


@pytest.fixture
def quorum(tmp_path: Path) -> Iterator[Quorum]:
    q = Quorum(tmp_path)
    try:
        q.start()
        yield q
    finally:
        q.close()  # SIGCONT + SIGTERM, then SIGKILL: nothing outlives the test


def data_records(batches: list[RecordBatch]) -> list[bytes]:
    return [r for b in batches if not b.is_control for r in b.records]


def committed_prefix(node: NodeProcess, high_watermark: int) -> list[RecordBatch]:
    return [b for b in node.read_log() if b.next_offset <= high_watermark]


def _end_offset(node: NodeProcess) -> int:
    s = node.status()
    return -1 if s is None else s.end_offset


def _stopped(node: NodeProcess) -> bool:
    assert node.proc is not None
    stat = Path(f"/proc/{node.proc.pid}/stat").read_text()
    return stat.rpartition(")")[2].split()[0] == "T"


def wait_caught_up(q: Quorum, node_ids: list[int], offset: int) -> None:
    def done() -> bool:
        statuses = [q.nodes[i].status() for i in node_ids]
        return all(s is not None and s.high_watermark >= offset for s in statuses)

    wait_until(done, ELECTION_S, f"nodes {node_ids} to commit up to {offset}")


def test_leader_kill_loses_no_acknowledged_write(quorum: Quorum) -> None:
    q = quorum
    q.wait_for_leader(ELECTION_S)
    acked = []
    for i in range(20):
        records = [b"before-%d-%d" % (i, j) for j in range(i % 3 + 1)]
        q.propose(records)
        acked += records
    old = q.wait_for_leader(ELECTION_S)
    old_epoch = q.nodes[old].status().epoch  # type: ignore[union-attr]

    q.nodes[old].kill()
    survivors = [i for i in q.nodes if i != old]
    new = q.wait_for_leader(ELECTION_S, among=survivors)
    assert new != old
    assert q.nodes[new].status().epoch > old_epoch  # type: ignore[union-attr]
    for i in range(10):
        records = [b"after-%d" % i]
        q.propose(records, among=survivors)
        acked += records
    last = q.propose([b"last"], among=survivors)
    acked.append(b"last")

    # Every acknowledged record is in both survivors' logs, in the same order.
    wait_caught_up(q, survivors, last.last_offset + 1)
    logs = [committed_prefix(q.nodes[i], last.last_offset + 1) for i in survivors]
    assert logs[0] == logs[1]
    assert data_records(logs[0]) == acked

    # The killed node restarts from its data dir and catches up.
    q.nodes[old].start()
    wait_caught_up(q, [old], last.last_offset + 1)
    assert committed_prefix(q.nodes[old], last.last_offset + 1) == logs[0]
    status = q.nodes[old].status()
    assert status is not None and status.role == "follower" and status.leader_id == new


def test_paused_leader_steps_down_and_truncates_uncommitted(quorum: Quorum) -> None:
    q = quorum
    old = q.wait_for_leader(ELECTION_S)
    q.propose([b"committed-1"])
    base = q.propose([b"committed-2"])
    followers = [i for i in q.nodes if i != old]
    wait_caught_up(q, list(q.nodes), base.last_offset + 1)

    # Freeze the followers so the leader appends records it can never commit. The
    # fetches the followers had parked at the leader are answered with the first
    # record appended after this ("bait": it reaches their sockets and may yet
    # commit); with no fetch outstanding, nothing later can reach them. (On
    # loopback a sent request is in the receiver's socket at once, so a follower
    # seen stopped has no fetch still on its way to the leader.)
    for i in followers:
        q.nodes[i].signal(signal.SIGSTOP)
    wait_until(lambda: all(_stopped(q.nodes[i]) for i in followers), ELECTION_S,
               "the followers to stop")
    bait = q.nodes[old].stub.Propose.future(hpb.ProposeRequest(records=[b"bait"]), timeout=60)
    wait_until(lambda: _end_offset(q.nodes[old]) >= base.last_offset + 2, ELECTION_S,
               "the bait in the old leader's log")
    orphans = [b"orphan-%d" % i for i in range(3)]
    pending: list[Any] = [
        q.nodes[old].stub.Propose.future(hpb.ProposeRequest(records=[r]), timeout=60)
        for r in orphans]
    wait_until(lambda: _end_offset(q.nodes[old]) >= base.last_offset + 2 + len(orphans),
               ELECTION_S, "the orphans in the old leader's log")
    assert set(orphans) <= set(data_records(q.nodes[old].read_log()))

    # Now freeze the leader instead, past the election timeout: the followers,
    # which never saw the orphans, elect one of themselves.
    q.nodes[old].signal(signal.SIGSTOP)
    for i in followers:
        q.nodes[i].signal(signal.SIGCONT)
    new = q.wait_for_leader(ELECTION_S, among=followers)
    acked = q.propose([b"from-new-leader"], among=followers)
    new_epoch = q.nodes[new].status().epoch  # type: ignore[union-attr]

    # Wake the old leader: it learns the new epoch, steps down and truncates.
    q.nodes[old].signal(signal.SIGCONT)

    def stepped_down() -> bool:
        s = q.nodes[old].status()
        return (s is not None and s.role == "follower" and s.epoch == new_epoch
                and s.high_watermark > acked.last_offset)

    wait_until(stepped_down, ELECTION_S, "the old leader to follow the new one")
    new_log = q.nodes[new].read_log()
    hw = q.nodes[new].status().high_watermark  # type: ignore[union-attr]
    assert committed_prefix(q.nodes[old], hw) == [b for b in new_log if b.next_offset <= hw]
    # Whatever the old leader holds beyond that is the new leader's too: the
    # records it appended but never committed are gone.
    old_log = q.nodes[old].read_log()
    assert old_log == new_log[:len(old_log)]
    everything = data_records(old_log)
    assert not set(orphans) & set(everything), "uncommitted records survived"
    assert everything[:2] == [b"committed-1", b"committed-2"]
    assert b"from-new-leader" in everything
    if bait.exception() is None and not bait.result().error:
        assert b"bait" in everything

    # None of the orphan proposals was acknowledged.
    for fut in pending:
        try:
            resp = fut.result(timeout=ELECTION_S)
        except grpc.RpcError:
            continue
        assert resp.error, f"an orphan was acknowledged: {resp}"
