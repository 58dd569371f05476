"""A rolling upgrade from the previous release, with real processes.

Three controllers and two brokers run the previous release (0.2.0, CHANGELOG.md:
its source taken from this repository's history with `git archive`, run by this
project's virtualenv). Under writes, each controller and then each broker is
replaced by the current code on the same data directory. While the cluster is at
the old level the current code writes nothing the old nodes cannot read (old
brokers keep applying what a current active controller writes), and none of the
newer levels' behaviour shows (no idle no-ops); `features upgrade` is refused while
an old broker is registered, and accepted once all run the current code; then the
new behaviour starts. No process stops; every acknowledged write is there.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from controller.metadata import METADATA_VERSION, CreatableTopic, FeatureUpdate
from controller.metadata.levels import LATEST_METADATA_VERSION
from controller.records import decode_record
from tests.support.broker_processes import BrokerCluster
from tests.support.polling import wait_until
from tests.support.processes import REPO_ROOT, ChildProcess

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(420)]

# The previous release (CHANGELOG.md): metadata.version 1-3, says no ranges.
PREVIOUS_RELEASE = "7514130"
OLD_LEVEL = 3
START_S = 40.0


@pytest.fixture(scope="module")
def previous_release(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("release-0.2.0")
    archive = subprocess.run(["git", "-C", str(REPO_ROOT), "archive", PREVIOUS_RELEASE],
                             capture_output=True, check=False)
    if archive.returncode != 0:
        pytest.fail(f"the previous release, commit {PREVIOUS_RELEASE}, is not in this "
                    f"clone's history: {archive.stderr.decode(errors='replace').strip()}")
    subprocess.run(["tar", "-x", "-C", str(root)], input=archive.stdout, check=True)
    return root


@pytest.fixture
def cluster(tmp_path: Path, previous_release: Path) -> Iterator[BrokerCluster]:
    c = BrokerCluster(tmp_path, brokers=(1, 2), session_timeout_ms=4_000)
    for node in processes(c):
        node.source_root = previous_release
    try:
        c.start()
        c.wait_running(timeout_s=START_S)
        yield c
    finally:
        c.close()


def processes(c: BrokerCluster) -> list[ChildProcess]:
    return [*c.controllers.values(), *c.brokers.values()]


def replace_with_current_code(node: ChildProcess) -> int:
    """Stop `node` cleanly and start the current code on its data dir; returns where
    its log file stood before the start (the new lines come after)."""
    assert node.terminate() == 0, node.log_text()[-3000:]
    node.source_root = REPO_ROOT
    seen = len(node.log_text())
    node.start()
    return seen


def test_a_rolling_upgrade_from_the_previous_release(cluster: BrokerCluster) -> None:
    acknowledged: list[str] = []

    def write(name: str) -> None:
        with cluster.admin() as admin:
            result = admin.create_topics([CreatableTopic(name, 2, 2)])
        assert result[0].error.ok, result
        acknowledged.append(name)

    def all_running() -> None:
        for node in processes(cluster):
            assert node.running, node.log_text()[-3000:]

    write("before")
    with cluster.admin() as admin:
        # The previous release answers: it says no ranges, not even its own.
        assert {v.supported_versions for v in admin.describe_quorum().voters} == {(0, 0)}
    for node_id, node in cluster.controllers.items():
        seen = replace_with_current_code(node)
        wait_until(lambda n=node, s=seen: "event=serving" in n.log_text()[s:],  # type: ignore[misc]
                   START_S, f"controller {node_id} serving")
        write(f"after-controller-{node_id}")
        all_running()
    # Old brokers followed everything current controllers wrote at the old level.
    wait_until(lambda: all(any(p.startswith("after-controller-") for p in b.local_state())
                           for b in cluster.brokers.values()), START_S, "old brokers applying")
    with cluster.admin() as admin:
        assert [f.finalized_level for f in admin.describe_features()
                if f.name == METADATA_VERSION] == [OLD_LEVEL]
        refused = admin.update_features([FeatureUpdate(METADATA_VERSION,
                                                       LATEST_METADATA_VERSION)])
    assert "did not say" in refused[0].error.message, refused  # old brokers registered

    for broker_id, broker in cluster.brokers.items():
        replace_with_current_code(broker)
        cluster.wait_running([broker_id], timeout_s=START_S)
        write(f"after-broker-{broker_id}")
        all_running()

    with cluster.admin() as admin:
        quorum = admin.describe_quorum()
        assert {v.supported_versions for v in quorum.voters} == {(1, LATEST_METADATA_VERSION)}
        # At the old level nothing newer shows: no idle no-ops move the log.
        idle_from = quorum.high_watermark
        deadline = time.monotonic() + 1.5  # three idle intervals
        while time.monotonic() < deadline:
            assert admin.describe_quorum().high_watermark == idle_from
            time.sleep(0.1)
        upgraded = admin.update_features([FeatureUpdate(METADATA_VERSION,
                                                        LATEST_METADATA_VERSION)])
        assert upgraded[0].error.ok, upgraded
        after = admin.describe_quorum().high_watermark
        # Now idle no-ops move it.
        wait_until(lambda: admin.describe_quorum().high_watermark > after + 1, 5.0,
                   "idle no-ops after the upgrade")
    write("upgraded")
    all_running()
    with cluster.admin() as admin:
        assert set(acknowledged) <= {t.name for t in admin.list_topics()}
    wait_until(lambda: all(any(p.startswith("upgraded-") for p in b.local_state())
                           for b in cluster.brokers.values()), START_S, "brokers applying")
    for node in processes(cluster):
        assert node.terminate() == 0, node.log_text()[-3000:]
        assert "replay_failed" not in node.log_text() and "raft_failed" not in node.log_text()
    # No-ops only once the level allowed them.
    kinds = [decode_record(r).WhichOneof("record")
             for b in cluster.controllers[min(cluster.controllers)].read_log()
             if not b.is_control for r in b.records]
    first_no_op = kinds.index("no_op")
    levels = [i for i, k in enumerate(kinds) if k == "feature_level"]
    assert levels[-1] < first_no_op
