"""A broker survives committed history lost upstream: real controllers and a broker.

Every controller's data dir is copied (a backup), the cluster goes on (topics are
created and the broker applies them), then every
controller is restored from the copy: their committed history now ends before what
the broker applied, and its leader tells the broker to cut its log below that. The
broker must not exit (it used to die on an assertion and stay down until a person
restarted it): it logs the cut, drops its metadata log, reloads the leader's, and
reconciles its partitions to it; a metric counts the reload.
"""

from __future__ import annotations

import re
import shutil
import urllib.request
from pathlib import Path

import pytest

from controller.metadata import CreatableTopic
from tests.support.broker_processes import BrokerCluster
from tests.support.polling import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

START_S = 30.0


def stop_controllers(cluster: BrokerCluster) -> None:
    for node in cluster.controllers.values():
        assert node.terminate() == 0, node.log_text()[-2000:]


def restart_controllers(cluster: BrokerCluster) -> int:
    """Start every controller; wait until all serve and one of them is active (in the
    lines this start logged: the log files keep earlier runs' lines). Returns the
    epoch that controller became active in."""
    nodes = list(cluster.controllers.values())
    seen = {n.node_id: len(n.log_text()) for n in nodes}
    for node in nodes:
        node.start()

    def new_lines(node_id: int) -> str:
        return cluster.controllers[node_id].log_text()[seen[node_id]:]

    wait_until(lambda: all("event=serving" in new_lines(n.node_id) for n in nodes), START_S,
               "every controller serving")
    wait_until(lambda: any("event=controller_active" in new_lines(n.node_id) for n in nodes),
               START_S, "an active controller")
    return max(last_epoch(new_lines(n.node_id), "controller_active") for n in nodes
               if "event=controller_active" in new_lines(n.node_id))


def last_epoch(text: str, event: str) -> int:
    return int(re.findall(rf"event={event} .*?epoch=(\d+)", text)[-1])


def reloads_metric(text: str) -> float:
    address = re.findall(r"event=metrics_serving address=([\d.]+:\d+)", text)[-1]
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=5) as answer:
        body = answer.read().decode()
    found = re.search(r"^metakraft_broker_metadata_reloads_total ([\d.]+)$", body, re.M)
    assert found is not None, body[-2000:]
    return float(found.group(1))


def test_a_broker_reloads_when_committed_history_is_cut_upstream(tmp_path: Path) -> None:
    # No idle no-ops: the restarts below must not grow the restored history past what
    # the broker applied. Else an epoch the broker saw, reused by the restored quorum
    # (restoring every controller from a backup is outside Raft's model), could end
    # beyond the broker's offset and hide the divergence (seen on a loaded machine).
    cluster = BrokerCluster(tmp_path, brokers=(1,), metrics=True,
                            controller_config="metadata_max_idle_interval_ms = 0\n")
    broker = cluster.brokers[1]
    try:
        cluster.start()
        cluster.wait_running(timeout_s=START_S)
        with cluster.admin() as admin:
            assert admin.create_topics([CreatableTopic("before", 1, 1)])[0].error.ok
        wait_until(lambda: "before-0" in broker.local_state(), START_S, "before-0 on disk")

        stop_controllers(cluster)
        backup = tmp_path / "backup"
        for node in cluster.controllers.values():
            shutil.copytree(node.data_dir, backup / node.data_dir.name)
        restart_controllers(cluster)
        with cluster.admin() as admin:
            for name in ("after", "after-2", "after-3"):
                assert admin.create_topics([CreatableTopic(name, 1, 1)])[0].error.ok
        wait_until(lambda: "after-0" in broker.local_state(), START_S, "after-0 on disk")

        stop_controllers(cluster)
        for node in cluster.controllers.values():
            shutil.rmtree(node.data_dir)
            shutil.copytree(backup / node.data_dir.name, node.data_dir)
        # The broker ignores leaders of epochs older than the last it saw, and another
        # leader of the same epoch (one leader per epoch: restoring every controller
        # from a backup breaks that). The restored quorum's elections pass it in a few
        # restarts; the epoch compared is the one this start became active in (the
        # log files also hold earlier runs' lines).
        broker_epoch = last_epoch(broker.log_text(), "metadata_leader")
        active_epoch = restart_controllers(cluster)
        for _ in range(broker_epoch + 2):
            if active_epoch > broker_epoch:
                break
            stop_controllers(cluster)
            active_epoch = restart_controllers(cluster)
        assert active_epoch > broker_epoch, (active_epoch, broker_epoch)

        wait_until(lambda: "event=metadata_reload" in broker.log_text(), START_S,
                   "the broker to reload the metadata")
        # It reconciled to the restored history: "after" is gone, "before" stays.
        wait_until(lambda: sorted(broker.local_state()) == ["before-0"], START_S,
                   "the local partitions to match the restored history")
        # The broker ignored the restored quorum's leaders of epochs it had passed, so it
        # sent them no heartbeats and the controller may have fenced it on session expiry
        # (its own status still says RUNNING): it waits until the controller unfences it
        # too, which it does once the broker caught up on the reloaded log.
        cluster.wait_running(timeout_s=START_S)
        assert broker.running and reloads_metric(broker.log_text()) == 1.0
        assert "event=raft_failed" not in broker.log_text()
        with cluster.admin() as admin:
            assert admin.create_topics([CreatableTopic("later", 1, 1)])[0].error.ok
        wait_until(lambda: "later-0" in broker.local_state(), START_S, "later-0 on disk")
        assert broker.terminate() == 0, broker.log_text()[-3000:]
    finally:
        cluster.close()
