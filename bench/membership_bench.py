"""Quorum membership benchmark: the time to add a voter to a quorum holding 1M
partitions of metadata.

    .venv/bin/python bench/membership_bench.py [--topics 10000] [--partitions 100]

Three `metakraft controller` processes on loopback, formatted as a dynamic quorum
(tests/support/controller_processes.py, fsync on), 12 fake brokers registered; T
topics of P partitions each (RF 3) are created through the AdminClient (several
client threads), and the controllers write their snapshots as usual. Then a fourth
controller, formatted with `--no-initial-controllers`, is started and added with
`AdminClient.add_raft_voter` (what `metakraft quorum add-controller` calls) the
moment its process starts: the call waits while the new replica fetches the
snapshot, loads it and catches up the log as an observer, then until the new voter
set commits. Figures: the metadata's size (records, the newest snapshot's bytes),
then the time from the process start to the add committed, and how long the new
replica took to be serving and to be seen caught up by the leader.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from controller.api.client import AdminClient
from controller.metadata import CreatableTopic
from controller.storage.meta_properties import DataDir
from controller.storage.snapshot_file import list_snapshots
from tests.support.controller_processes import ControllerCluster
from tests.support.polling import wait_until


def machine() -> str:
    return f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}"


def create_topics(cluster: ControllerCluster, topics: int, partitions: int,
                  threads: int) -> float:
    next_topic = iter(range(topics))
    lock = threading.Lock()
    errors: list[str] = []

    def run() -> None:
        with AdminClient(cluster.bootstrap, timeout_ms=60_000) as client:
            while True:
                with lock:
                    i = next(next_topic, None)
                if i is None:
                    return
                (result,) = client.create_topics([CreatableTopic(f"t{i:06d}", partitions, 3)])
                if not result.error.ok:
                    errors.append(str(result.error))

    started = time.monotonic()
    workers = [threading.Thread(target=run) for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert not errors, errors[:3]
    return time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--topics", type=int, default=10_000)
    parser.add_argument("--partitions", type=int, default=100)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="membership-bench-", dir=args.dir))
    cluster = ControllerCluster(root, 3, dynamic=True, spare=1)
    try:
        cluster.start()
        wait_until(lambda: _leader(cluster) >= 0, 60, "a leader")
        cluster.register_brokers(list(range(1, 13)))
        total = args.topics * args.partitions
        print(f"machine: {machine()}")
        took = create_topics(cluster, args.topics, args.partitions, args.threads)
        print(f"created {args.topics} topics x {args.partitions} partitions = {total:,} "
              f"partitions in {took:.1f} s ({total / took:,.0f} partition records/s)")
        with AdminClient(cluster.bootstrap, timeout_ms=60_000) as client:
            hw = client.describe_quorum().high_watermark
        leader_dir = cluster.nodes[_leader(cluster)].data_dir
        snaps = list_snapshots(DataDir(leader_dir).snapshot_dir)
        size = (DataDir(leader_dir).snapshot_dir / snaps[-1].file_name).stat().st_size \
            if snaps else 0
        print(f"log high watermark {hw:,}; newest snapshot {snaps[-1] if snaps else None}, "
              f"{size / 1e6:.1f} MB")

        (spare,) = cluster.spare_addresses
        node = cluster.nodes[spare]
        directory_id = cluster.directory_id(spare)
        started = time.monotonic()
        node.start()
        serving_s: list[float] = []
        caught_up_s: list[float] = []
        stop = threading.Event()

        def watch() -> None:
            with AdminClient(cluster.bootstrap, timeout_ms=60_000) as client:
                while not stop.is_set():
                    if not serving_s and "serving on" in node.log_text():
                        serving_s.append(time.monotonic() - started)
                    desc = client.describe_quorum()
                    seen = [r for r in (*desc.observers, *desc.voters) if r.replica_id == spare]
                    if not caught_up_s and seen and seen[0].log_end_offset >= hw:
                        caught_up_s.append(time.monotonic() - started)
                    stop.wait(0.05)

        watcher = threading.Thread(target=watch)
        watcher.start()
        with AdminClient(cluster.bootstrap, timeout_ms=600_000) as client:
            outcome = client.add_raft_voter(spare, directory_id, cluster.spare_addresses[spare])
        added_s = time.monotonic() - started
        stop.set()
        watcher.join()
        assert outcome.error.ok, outcome.error
        print(f"add a voter to a quorum of {total:,} partitions: {added_s:.2f} s from the "
              f"process start to the new voter set committed (serving after "
              f"{serving_s[0] if serving_s else float('nan'):.2f} s, seen caught up by the "
              f"leader after {caught_up_s[0] if caught_up_s else float('nan'):.2f} s)")
    finally:
        cluster.close()


def _leader(cluster: ControllerCluster) -> int:
    try:
        with AdminClient(cluster.bootstrap, timeout_ms=5_000) as client:
            return client.describe_quorum().leader_id
    except Exception:  # not up yet
        return -1


if __name__ == "__main__":
    main()
