"""Run bare Raft quorum nodes (tests.support.quorum_harness.node_main) as child processes and
talk to them through the test-only QuorumHarness service.

Used by tests/integration/test_raft_quorum.py and bench/raft_bench.py. Every wait
is a poll of a condition with a deadline (`wait_until`), never a bare sleep.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from pathlib import Path
from typing import TypeVar

import grpc

from controller.logformat import RecordBatch
from controller.logformat.batch import iter_batches
from controller.rpc import create_sync_channel
from controller.storage.meta_properties import format_data_dir, random_cluster_id
from tests.support.polling import wait_until
from tests.support.ports import free_ports
from tests.support.processes import ChildProcess
from tests.support.quorum_harness import harness_pb2 as hpb
from tests.support.quorum_harness import harness_pb2_grpc as hpb_grpc

T = TypeVar("T")




class NodeProcess(ChildProcess):
    def __init__(self, node_id: int, address: str, data_dir: Path, cluster_id: str,
                 voters_arg: str, extra_args: Iterable[str] = ()) -> None:
        super().__init__(data_dir.parent / f"node{node_id}.out")
        self.node_id = node_id
        self.address = address
        self.data_dir = data_dir
        self.cluster_id = cluster_id
        self.voters_arg = voters_arg
        self.extra_args = list(extra_args)
        self._channel = create_sync_channel(address)
        self.stub = hpb_grpc.QuorumHarnessStub(self._channel)

    def command(self) -> list[str]:
        return [sys.executable, "-m", "tests.support.quorum_harness.node_main",
                "--node-id", str(self.node_id), "--voters", self.voters_arg,
                "--data-dir", str(self.data_dir), "--cluster-id", self.cluster_id,
                "--listen", self.address, *self.extra_args]

    def terminate(self, timeout_s: float = 5.0) -> int:
        return super().terminate(timeout_s) if self.proc is not None else 0

    def status(self, timeout_s: float = 0.5) -> hpb.StatusResponse | None:
        try:
            return self.stub.Status(hpb.StatusRequest(), timeout=timeout_s)
        except grpc.RpcError:
            return None

    def read_log(self, from_offset: int = 0, timeout_s: float = 5.0) -> list[RecordBatch]:
        """Every stored batch of this node's log from `from_offset`."""
        out: list[RecordBatch] = []
        offset = from_offset
        while True:
            resp = self.stub.ReadLog(hpb.ReadLogRequest(from_offset=offset,
                                                        max_bytes=1024 * 1024),
                                     timeout=timeout_s)
            batches = iter_batches(b"".join(resp.batches))
            out.extend(batches)
            if not batches or batches[-1].next_offset >= resp.end_offset:
                return out
            offset = batches[-1].next_offset

    def propose(self, records: list[bytes], timeout_s: float = 10.0) -> hpb.ProposeResponse:
        return self.stub.Propose(hpb.ProposeRequest(records=records), timeout=timeout_s)

    def close(self) -> None:
        self.terminate()
        self._channel.close()




class Quorum:
    """N voter processes on loopback, each with its own formatted data dir."""

    def __init__(self, root: Path, size: int = 3, extra_args: Iterable[str] = ()) -> None:
        self.cluster_id = random_cluster_id()
        ports = free_ports(size)
        self.addresses = {i + 1: f"127.0.0.1:{p}" for i, p in enumerate(ports)}
        voters_arg = ",".join(f"{i}={a}" for i, a in self.addresses.items())
        self.nodes: dict[int, NodeProcess] = {}
        for node_id, address in self.addresses.items():
            data_dir = root / f"node{node_id}"
            format_data_dir(data_dir, self.cluster_id, node_id)
            self.nodes[node_id] = NodeProcess(node_id, address, data_dir, self.cluster_id,
                                              voters_arg, extra_args)

    def start(self) -> None:
        for node in self.nodes.values():
            node.start()

    def leader(self, among: Iterable[int] | None = None) -> int | None:
        """The node that says it leads, if exactly one of the live ones does and the
        others agree or do not know yet."""
        ids = list(among) if among is not None else [i for i, n in self.nodes.items()
                                                     if n.running]
        statuses = {i: self.nodes[i].status() for i in ids}
        leaders = [i for i, s in statuses.items() if s is not None and s.role == "leader"]
        if len(leaders) != 1:
            return None
        epoch = statuses[leaders[0]].epoch  # type: ignore[union-attr]
        if any(s is not None and s.epoch > epoch for s in statuses.values()):
            return None
        return leaders[0]

    def wait_for_leader(self, timeout_s: float, among: Iterable[int] | None = None) -> int:
        ids = list(among) if among is not None else None
        return wait_until(lambda: self.leader(ids), timeout_s, "a leader")

    def propose(self, records: list[bytes], timeout_s: float = 10.0,
                among: Iterable[int] | None = None) -> hpb.ProposeResponse:
        """Propose through whoever leads, retrying (with a deadline) while leadership
        moves; returns the successful response."""
        ids = list(among) if among is not None else None

        def attempt() -> hpb.ProposeResponse | None:
            leader = self.leader(ids)
            if leader is None:
                return None
            try:
                resp = self.nodes[leader].propose(records, timeout_s=timeout_s)
            except grpc.RpcError:
                return None
            return resp if not resp.error else None

        return wait_until(attempt, timeout_s, f"a commit of {len(records)} records")

    def close(self) -> None:
        for node in self.nodes.values():
            node.close()
