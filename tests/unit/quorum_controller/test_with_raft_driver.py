"""The controller over the real RaftDriver (one voter, a real data dir): writes go
through `run_on_node_task`, answers come after the fsync'd commit, many concurrent
writes share the commit round trip, and a restarted controller replays its log."""

from __future__ import annotations

import asyncio
import random
import time
from pathlib import Path

from controller.api.seam import Origin
from controller.metadata import BrokerHeartbeatRequest, BrokerRegistrationRequest, CreatableTopic
from controller.quorum.driver import RaftDriver, SteadyWallClock
from controller.quorum.driver_config import DriverConfig
from controller.quorum_controller.controller import QuorumController
from controller.quorum_controller.events import Mode
from controller.quorum_controller.facade import ControllerApi
from controller.quorum_controller.ports import ControllerSettings
from controller.records.domain import Listener
from controller.storage.meta_properties import format_data_dir, random_cluster_id
from tests.support.admin_calls import AdminCalls

ORIGIN = Origin("unit", "local", "")


async def start(data_dir: Path, cluster_id: str, *, snapshot_interval_bytes: int = 1 << 30,
                ) -> tuple[RaftDriver, QuorumController, AdminCalls]:
    """Assembled as the daemon does it."""
    voters = {1: "127.0.0.1:1"}  # a single voter never dials anyone
    clock = SteadyWallClock()
    ctrl = QuorumController(ControllerSettings(node_id=1, cluster_id=cluster_id,
                                               voter_addresses=voters,
                                               snapshot_interval_bytes=snapshot_interval_bytes),
                            clock_ms=clock, rng=random.Random(1))
    driver = RaftDriver(DriverConfig(node_id=1, cluster_id=cluster_id, voter_addresses=voters,
                                     data_dir=data_dir), ctrl, clock_ms=clock)
    ctrl.attach(driver)
    ctrl.load_latest_snapshot(driver.snapshot_dir)
    ctrl.enable_snapshots(driver.snapshot_dir)
    await driver.start()
    ctrl.start()
    deadline = time.monotonic() + 10
    while ctrl.mode is not Mode.ACTIVE:
        assert time.monotonic() < deadline, "never became active"
        await asyncio.sleep(0.02)
    return driver, ctrl, AdminCalls(ControllerApi(ctrl, driver))


async def stop(driver: RaftDriver, ctrl: QuorumController) -> None:
    await driver.stop()
    await ctrl.stop()


def test_real_driver_writes_commit_and_restart_replays(tmp_path: Path) -> None:
    cluster_id = random_cluster_id()
    data_dir = tmp_path / "c1"
    format_data_dir(data_dir, cluster_id, 1)

    async def first() -> tuple[object, float]:
        driver, ctrl, api = await start(data_dir, cluster_id)
        try:
            reply = await api.register_broker(
                BrokerRegistrationRequest(0, "inc", cluster_id, listeners=(Listener("PLAINTEXT", "localhost", 9092, "PLAINTEXT"),)), origin=ORIGIN)
            assert reply.error.ok
            beat = await api.broker_heartbeat(
                BrokerHeartbeatRequest(0, reply.broker_epoch, 1 << 40), origin=ORIGIN)
            assert not beat.is_fenced
            n = 400
            began = time.perf_counter()
            results = await asyncio.gather(*(
                api.create_topics([CreatableTopic(f"t{i}", 1, 1)], validate_only=False,
                                  origin=ORIGIN) for i in range(n)))
            elapsed = time.perf_counter() - began
            assert all(r[0].error.ok for r in results)
            assert ctrl.committed_offset == ctrl.replayed_offset
            assert len(await api.list_topics(origin=ORIGIN)) == n
            return ctrl.state.to_image(), n / elapsed
        finally:
            await stop(driver, ctrl)

    image, rate = asyncio.run(first())
    print(f"{rate:.0f} single-partition topics/s, 400 concurrent, one voter with fsync")

    async def second() -> None:
        driver, ctrl, api = await start(data_dir, cluster_id)
        try:
            # Everything committed before the restart was replayed from the log.
            assert ctrl.state.to_image() == image
            names = {t.name for t in await api.list_topics(origin=ORIGIN)}
            assert len(names) == 400
        finally:
            await stop(driver, ctrl)

    asyncio.run(second())


def test_restart_loads_the_latest_snapshot_and_replays_the_tail(tmp_path: Path) -> None:
    cluster_id = random_cluster_id()
    data_dir = tmp_path / "c1"
    format_data_dir(data_dir, cluster_id, 1)

    async def first() -> object:
        driver, ctrl, api = await start(data_dir, cluster_id, snapshot_interval_bytes=4096)
        try:
            reply = await api.register_broker(
                BrokerRegistrationRequest(0, "inc", cluster_id, listeners=(Listener("PLAINTEXT", "localhost", 9092, "PLAINTEXT"),)), origin=ORIGIN)
            await api.broker_heartbeat(
                BrokerHeartbeatRequest(0, reply.broker_epoch, 1 << 40), origin=ORIGIN)
            for i in range(120):
                await api.create_topics([CreatableTopic(f"s{i}", 2, 1)], validate_only=False,
                                        origin=ORIGIN)
            deadline = time.monotonic() + 10
            while driver.status().log_start_offset == 0:
                assert time.monotonic() < deadline, "the log was never compacted"
                await asyncio.sleep(0.02)
            # A tail after the snapshot, replayed from the log on restart.
            await api.delete_topics(["s0"], origin=ORIGIN)
            return ctrl.state.to_image()
        finally:
            await stop(driver, ctrl)

    image = asyncio.run(first())

    async def second() -> None:
        driver, ctrl, api = await start(data_dir, cluster_id)
        try:
            assert driver.status().log_start_offset > 0
            assert ctrl.state.to_image() == image
            assert len(await api.list_topics(origin=ORIGIN)) == 119
        finally:
            await stop(driver, ctrl)

    asyncio.run(second())


def test_an_idle_node_ticks_when_a_timer_is_due_not_on_a_period(tmp_path: Path) -> None:
    """The driver wakes the node at its next deadline (`RaftNode.next_deadline_ms`):
    idle, a lone leader's timers are hundreds of milliseconds apart (check quorum,
    its request timeout), so six ticks span far more of the node's clock than a
    10 ms ticker's sixty. (Load only makes ticks later: the bound cannot flake.)"""
    cluster_id = random_cluster_id()
    data_dir = tmp_path / "c1"
    format_data_dir(data_dir, cluster_id, 1)
    clock = SteadyWallClock()

    async def main() -> None:
        driver, ctrl, _api = await start(data_dir, cluster_id)
        try:
            first, since_ms = driver.status().ticks, clock()
            deadline = time.monotonic() + 30
            while driver.status().ticks < first + 6:
                assert time.monotonic() < deadline, "the node never ticked"
                await asyncio.sleep(0.05)
            elapsed_ms = clock() - since_ms
            ticks = driver.status().ticks - first
            assert elapsed_ms >= ticks * 50, (ticks, elapsed_ms)
        finally:
            await stop(driver, ctrl)

    asyncio.run(main())
