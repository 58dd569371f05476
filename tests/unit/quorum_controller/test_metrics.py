"""Controller metrics: set on the loop, served over HTTP for Prometheus."""

from __future__ import annotations

import asyncio
import urllib.request

from controller.quorum_controller.metrics import ControllerMetrics
from tests.unit.quorum_controller.test_controller import ORIGIN, Env, run, settle, topic


def test_metrics_follow_the_controller_and_are_served() -> None:
    async def main() -> None:
        # No idle no-ops: the offsets below are compared after a clock jump.
        env = Env(metadata_max_idle_interval_ms=0)
        metrics = env.ctrl[1].metrics = ControllerMetrics(1)
        await env.elect(1)
        await env.register_brokers(1, [0, 4, 5])
        for i in range(3):
            await env.api[1].create_topics([topic(f"m{i}", 2, 3)], validate_only=False,
                                           origin=ORIGIN)
        env.clock.now_ms += 1_000  # the state gauges refresh about once a second
        env.ctrl[1].request_tick()
        await settle()

        def value(name: str, **labels: str) -> float | None:
            return metrics.registry.get_sample_value(name, labels)

        assert value("metakraft_controller_active") == 1
        assert value("metakraft_controller_topics") == 3
        assert value("metakraft_controller_partitions") == 6
        assert value("metakraft_controller_offline_partitions") == 0
        assert value("metakraft_controller_brokers", state="active") == 3
        committed = env.ctrl[1].committed_offset - 1
        assert value("metakraft_controller_last_committed_offset") == committed
        assert value("metakraft_controller_last_applied_offset") == committed
        assert value("metakraft_raft_commit_latency_seconds_count") == 9
        assert value("metakraft_controller_event_queue_time_seconds_count",
                     method="CreateTopics") == 3
        assert value("metakraft_controller_event_queue_processing_time_seconds_count",
                     method="CreateTopics") == 3
        assert value("metakraft_controller_leader_changes_total") == 1
        assert value("metakraft_controller_under_replicated_partitions") == 0
        assert value("metakraft_controller_preferred_replica_imbalance") == 0
        # The Raft node as the driver reports it.
        assert value("metakraft_raft_state", state="leader") == 1
        assert value("metakraft_raft_state", state="follower") == 0
        assert value("metakraft_raft_leader_id") == 1
        assert value("metakraft_raft_high_watermark") == committed + 1
        assert (value("metakraft_raft_log_end_offset") or 0) >= committed + 1
        # Process collectors are on the controller's own registry too.
        assert (value("process_cpu_seconds_total") or 0) > 0

        port = metrics.serve("127.0.0.1", 0)
        body = await asyncio.to_thread(
            lambda: urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read())
        assert b"metakraft_controller_topics 3.0" in body

    run(main)


def test_gc_pauses_are_measured() -> None:
    import gc

    from controller.metrics_common import standard_registry

    registry = standard_registry()
    before = registry.get_sample_value("python_gc_pause_seconds_count", {"generation": "2"}) or 0
    gc.collect()
    after = registry.get_sample_value("python_gc_pause_seconds_count", {"generation": "2"})
    assert after == before + 1
    assert (registry.get_sample_value("python_gc_pause_seconds_sum", {"generation": "2"}) or 0) > 0
