"""Dynamic quorum membership on real controller processes, driven by the CLI an operator
uses: grow 3 -> 5 and shrink back (the active controller too), replace a controller
whose disk was wiped, and the two-fault case a voter with a damaged log must not turn
into lost data -- all while a client writes, and nothing it was told is written is
lost."""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from controller.api.client import AdminClient
from controller.api.seam import QuorumDescription, ReadConsistency
from controller.metadata import CreatableTopic, ErrorCode, FeatureUpdate
from controller.storage.meta_properties import DataDir
from tests.support.controller_processes import ControllerCluster
from tests.support.polling import wait_until
from tests.support.processes import REPO_ROOT, metakraft_command

pytestmark = pytest.mark.integration


def cli(cluster: ControllerCluster, *args: str, timeout_ms: int = 30_000
        ) -> subprocess.CompletedProcess[str]:
    command = metakraft_command(*args[:2], "--bootstrap", ",".join(cluster.bootstrap),
                                "--timeout-ms", str(timeout_ms), *args[2:])
    return subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": str(REPO_ROOT), "PATH": "/usr/bin:/bin"})


def describe(cluster: ControllerCluster) -> QuorumDescription:
    with AdminClient(cluster.bootstrap, timeout_ms=20_000) as client:
        return client.describe_quorum()


def voter_keys(desc: QuorumDescription) -> set[tuple[int, str]]:
    return {(v.replica_id, v.directory_id) for v in desc.voters}


class Writer:
    """Creates topics one after another until stopped; remembers those acknowledged."""

    def __init__(self, cluster: ControllerCluster) -> None:
        self.cluster = cluster
        self.acknowledged: list[str] = []
        self.refused: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Writer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(60)

    def _run(self) -> None:
        n = 0
        with AdminClient(self.cluster.bootstrap, timeout_ms=10_000) as client:
            while not self._stop.is_set():
                n += 1
                name = f"w-{n}"
                try:
                    (result,) = client.create_topics([CreatableTopic(name, 1, 1)])
                except Exception:  # unknown outcome: not acknowledged
                    continue
                if result.error.ok:
                    self.acknowledged.append(name)
                else:
                    self.refused.append(str(result.error))

    def wait_for_writes(self, count: int) -> None:
        start = len(self.acknowledged)
        wait_until(lambda: len(self.acknowledged) >= start + count, 60,
                   f"{count} writes (refused: {self.refused[-3:]})")

    def check_nothing_lost(self) -> None:
        assert len(self.acknowledged) > 10, self.acknowledged
        with AdminClient(self.cluster.bootstrap, timeout_ms=30_000) as client:
            names = {t.name for t in client.list_topics()}
        missing = [t for t in self.acknowledged if t not in names]
        assert not missing, f"acknowledged and lost: {missing}"


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[ControllerCluster]:
    c = ControllerCluster(tmp_path, 3, dynamic=True, spare=2, snapshot_interval_bytes=8192)
    try:
        c.start()
        wait_until(lambda: describe(c).leader_id >= 0, 60, "a leader")
        c.register_brokers([1])  # topics need a broker to place replicas on
        yield c
    finally:
        c.close()


def test_grow_to_five_and_shrink_back_while_writing(cluster: ControllerCluster) -> None:
    first = sorted(cluster.addresses)
    spares = sorted(cluster.spare_addresses)
    with Writer(cluster) as writer:
        writer.wait_for_writes(5)
        for node_id in spares:
            cluster.nodes[node_id].start()
            done = cli(cluster, "quorum", "add-controller",
                       "--controller", cluster.spare_addresses[node_id])
            assert done.returncode == 0, done.stderr
            assert f"add controller {node_id}" in done.stdout and "done" in done.stdout
            writer.wait_for_writes(3)
        desc = describe(cluster)
        assert {v.replica_id for v in desc.voters} == set(first + spares)
        assert desc.dynamic and all(v.directory_id and v.endpoint for v in desc.voters)
        # Shrink back to three, removing the active controller among others.
        active = desc.leader_id
        removed = [active, next(n for n in first if n != active)]
        for node_id in removed:
            done = cli(cluster, "quorum", "remove-controller", "--id", str(node_id),
                       "--directory-id", cluster.directory_id(node_id))
            assert done.returncode == 0, done.stderr
            writer.wait_for_writes(3)
    writer.check_nothing_lost()
    # A leader among the remaining voters; the removed controllers keep running, as
    # observers that follow the log (the one removed last has just handed over: it
    # shows once its first fetch reaches the new leader).
    desc = wait_until(lambda: (d := describe(cluster)) and d.leader_id not in removed
                      and set(removed) <= {o.replica_id for o in d.observers} and d,
                      30, "a leader among the remaining voters, the removed ones observing")
    assert {v.replica_id for v in desc.voters} == set(first + spares) - set(removed)
    for node_id in removed:
        assert cluster.nodes[node_id].running


def test_replace_a_controller_whose_disk_was_wiped(cluster: ControllerCluster) -> None:
    with Writer(cluster) as writer:
        writer.wait_for_writes(5)
        victim = next(n for n in cluster.addresses if n != describe(cluster).leader_id)
        cluster.nodes[victim].kill()
        old = cluster.replace_disk(victim)  # the disk is gone; a new one is formatted
        cluster.nodes[victim].start()
        new = cluster.directory_id(victim)
        assert new != old
        writer.wait_for_writes(3)
        # Until the operator acts, the new replica is no voter: it only observes.
        desc = describe(cluster)
        assert (victim, old) in voter_keys(desc) and (victim, new) not in voter_keys(desc)
        done = cli(cluster, "quorum", "remove-controller", "--id", str(victim),
                   "--directory-id", old)
        assert done.returncode == 0, done.stderr
        done = cli(cluster, "quorum", "add-controller",
                   "--controller", cluster.addresses[victim])
        assert done.returncode == 0, done.stderr
        writer.wait_for_writes(3)
    writer.check_nothing_lost()
    desc = describe(cluster)
    assert (victim, new) in voter_keys(desc) and (victim, old) not in voter_keys(desc)
    # The old identity can no longer be removed (or vote): it is not in the set.
    gone = cli(cluster, "quorum", "remove-controller", "--id", str(victim),
               "--directory-id", old)
    assert gone.returncode == 1 and "VOTER_NOT_FOUND" in gone.stderr


def _flip_middle_byte(data_dir: Path) -> Path:
    segment = sorted(DataDir(data_dir).log_dir.glob("*.log"))[-1]
    data = bytearray(segment.read_bytes())
    data[len(data) // 2] ^= 0x01
    segment.write_bytes(bytes(data))
    return segment


def test_a_voter_with_a_damaged_log_refuses_to_start_and_nothing_acknowledged_is_lost(
        cluster: ControllerCluster) -> None:
    """The operator's bad day: a write is acknowledged while voter A is down (so only
    B and the leader C hold it); B's log then gets a flipped byte in its middle, and
    the leader dies. B must not cut its log and vote as if nothing happened (A, which
    never had the write, would win with B's vote): with `on_log_damage = "refuse"` it
    refuses to start, in one line (the default, "repair", is tested in
    test_damaged_disk.py)."""
    leader = describe(cluster).leader_id
    a, b = (n for n in cluster.addresses if n != leader)
    cluster.nodes[a].terminate()
    with AdminClient(cluster.bootstrap, timeout_ms=20_000) as client:
        acked = []
        for i in range(40):
            (result,) = client.create_topics([CreatableTopic(f"acked-{i}", 1, 1)])
            assert result.error.ok, result.error
            acked.append(f"acked-{i}")
    cluster.nodes[b].kill()
    cluster.nodes[leader].kill()
    segment = _flip_middle_byte(cluster.nodes[b].data_dir)
    config = cluster.nodes[b].config_path
    config.write_text(config.read_text() + '\n[log]\non_log_damage = "refuse"\n')
    cluster.nodes[a].start()
    cluster.nodes[b].start()
    assert cluster.nodes[b].proc is not None
    assert cluster.nodes[b].proc.wait(60) == 1
    log = cluster.nodes[b].log_text()
    refusal = [line for line in log.splitlines() if "refusing to start" in line]
    assert len(refusal) == 1 and str(segment) in refusal[0], log[-2000:]
    assert "below the recovery point" in refusal[0] and "reformat-replica" in refusal[0]
    assert 'set it to "repair"' in refusal[0]
    assert "Traceback" not in log
    # The damaged file is left as it was found, for the operator to look at.
    cluster.nodes[leader].start()
    with AdminClient(cluster.bootstrap, timeout_ms=60_000) as client:
        names = {t.name for t in client.list_topics()}
    assert set(acked) <= names
    # The remedy: a new replica in B's place.
    old = cluster.directory_id(b)
    done = subprocess.run(metakraft_command("storage", "reformat-replica", "--data-dir",
                                            str(cluster.nodes[b].data_dir)),
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=60,
                          env={"PYTHONPATH": str(REPO_ROOT), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    assert f"--directory-id {old}" in done.stdout
    config.write_text(config.read_text().replace('on_log_damage = "refuse"', ""))
    cluster.nodes[b].start()
    for args in (("remove-controller", "--id", str(b), "--directory-id", old),
                 ("add-controller", "--controller", cluster.addresses[b])):
        done = cli(cluster, "quorum", *args)
        assert done.returncode == 0, done.stderr
    assert (b, cluster.directory_id(b)) in voter_keys(describe(cluster))
    with AdminClient([cluster.addresses[b]], timeout_ms=30_000,
                     consistency=ReadConsistency.STALE) as client:
        wait_until(lambda: set(acked) <= {t.name for t in client.list_topics()}, 30,
                   "the new replica caught up")


def test_bad_voter_changes_are_refused_and_change_nothing(cluster: ControllerCluster) -> None:
    before = describe(cluster)
    some = sorted(cluster.addresses)[0]
    spare = sorted(cluster.spare_addresses)[0]
    cases = [
        # A voter that already is one.
        (("add-controller", "--controller", cluster.addresses[some]), "DUPLICATE_VOTER"),
        # A directory id that does not match the voter's.
        (("remove-controller", "--id", str(some), "--directory-id", "A" * 22),
         "VOTER_NOT_FOUND"),
    ]
    for args, code in cases:
        done = cli(cluster, "quorum", *args)
        assert done.returncode == 1 and code in done.stderr, (args, done.stdout, done.stderr)
    # A controller that is not running (never fetched): not caught up, in time.
    cluster.nodes[spare].start()
    wait_until(lambda: any(o.replica_id == spare for o in describe(cluster).observers), 30,
               "the spare fetching")
    cluster.nodes[spare].terminate()

    def silent_long_enough() -> bool:
        # The leader takes a replica that fetched within check_quorum_timeout_ms (1 s
        # here) for alive; this one stopped for longer than that.
        (seen,) = [o for o in describe(cluster).observers if o.replica_id == spare]
        return time.time() * 1000 - seen.last_fetch_timestamp_ms > 1500

    wait_until(silent_long_enough, 30, "the stopped spare's last fetch to age")
    with AdminClient(cluster.bootstrap, timeout_ms=6_000) as client:
        outcome = client.add_raft_voter(spare, cluster.directory_id(spare),
                                        cluster.spare_addresses[spare])
    assert outcome.error.code is ErrorCode.REQUEST_TIMED_OUT, outcome
    assert "has not fetched" in outcome.error.message
    with AdminClient(cluster.bootstrap, timeout_ms=10_000) as client:
        levels = {f.name: f.finalized_level for f in client.describe_features()}
    assert levels["kraft.version"] == 1
    # --dry-run says what would happen and does nothing.
    done = cli(cluster, "quorum", "remove-controller", "--id", str(some),
               "--directory-id", cluster.directory_id(some), "--dry-run")
    assert done.returncode == 0 and "would be accepted" in done.stdout, done.stderr
    assert voter_keys(describe(cluster)) == voter_keys(before)


def test_a_static_quorum_refuses_voter_changes(tmp_path: Path) -> None:
    static = ControllerCluster(tmp_path, 3)
    try:
        static.start()
        wait_until(lambda: describe(static).leader_id >= 0, 60, "a leader")
        desc = describe(static)
        assert not desc.dynamic and all(not v.directory_id for v in desc.voters)
        some = sorted(static.addresses)[0]
        with AdminClient(static.bootstrap, timeout_ms=10_000) as client:
            outcome = client.remove_raft_voter(some, "")
            assert outcome.error.code is ErrorCode.UNSUPPORTED_VERSION, outcome
            assert "static" in outcome.error.message
            # The gate is the finalized kraft.version, chosen at format time.
            levels = {f.name: f.finalized_level for f in client.describe_features()}
            assert levels["kraft.version"] == 0
            (refused,) = client.update_features([FeatureUpdate("kraft.version", 1)])
            assert refused.error.code is ErrorCode.UNSUPPORTED_VERSION
    finally:
        static.close()
