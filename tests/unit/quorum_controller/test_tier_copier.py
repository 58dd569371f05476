"""The tier copier over the real controller and Raft driver (one voter, a real data
dir, a directory tier on real files), one round at a time: copies from the copied
end, local retention, a predecessor's half-done copy and delete cleaned up, remote
retention, and one log line per change of the tier's health."""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import attrs
import pytest

from controller.api.seam import Args, Operation, Origin
from controller.logformat.batch import EMPTY_ORIGIN
from controller.metadata import BrokerHeartbeatRequest, BrokerRegistrationRequest, CreatableTopic
from controller.metadata.errors import ControllerResult
from controller.metadata.features import METADATA_VERSION, FeatureUpdate, UpgradeType
from controller.metadata.levels import LATEST_METADATA_VERSION, Feature
from controller.metadata.tier import ObjectKind, RemoteObject, SegmentState
from controller.quorum.driver import RaftDriver, SteadyWallClock
from controller.quorum.driver_config import DriverConfig
from controller.quorum_controller.controller import QuorumController
from controller.quorum_controller.events import Mode
from controller.quorum_controller.facade import ControllerApi
from controller.quorum_controller.ports import ControllerSettings
from controller.quorum_controller.tier_copier import TierCopier
from controller.records.domain import FeatureRange, Listener
from controller.storage.log_config import LogConfig
from controller.storage.meta_properties import DataDir, format_data_dir, random_cluster_id
from controller.tier.chain import TierLedger, check_chain
from controller.tier.config import TierConfig
from controller.tier.history import history_batches, list_tier, local_segments, plan_history
from controller.tier.objects import data_key
from controller.tier.remote import DirectoryStore, TierUnavailableError
from tests.support.admin_calls import AdminCalls

ORIGIN = Origin("unit", "local", "")


@attrs.define
class Rig:
    driver: RaftDriver
    ctrl: QuorumController
    api: ControllerApi
    copier: TierCopier
    store: DirectoryStore
    data_dir: Path

    async def write_topics(self, prefix: str, n: int) -> None:
        for i in range(n):
            [result] = await self.api.create_topics([CreatableTopic(f"{prefix}{i}", 2, 1)],
                                                   validate_only=False, origin=ORIGIN)
            assert result.error.ok
            await asyncio.sleep(0.003)  # segments roll by age (segment_ms=2)

    async def rounds_until_idle(self, limit: int = 50) -> None:
        for _ in range(limit):
            if not await self.copier.round():
                return
        raise AssertionError("the copier never became idle")

    def objects(self) -> list[RemoteObject]:
        return self.ctrl.state.tier.objects(self.ctrl.committed_offset - 1)


def run(tmp_path: Path, body: Callable[[Rig], Awaitable[None]], *,
        metadata_version: int = LATEST_METADATA_VERSION, **tier: Any) -> None:
    cluster_id = random_cluster_id()
    data_dir = tmp_path / "c1"
    format_data_dir(data_dir, cluster_id, 1)

    async def main() -> None:
        voters = {1: "127.0.0.1:1"}
        clock = SteadyWallClock()
        ctrl = QuorumController(ControllerSettings(node_id=1, cluster_id=cluster_id,
                                                   voter_addresses=voters,
                                                   snapshot_interval_bytes=4096,
                                                   bootstrap_metadata_version=metadata_version),
                                clock_ms=clock, rng=random.Random(1))
        driver = RaftDriver(DriverConfig(node_id=1, cluster_id=cluster_id,
                                         voter_addresses=voters, data_dir=data_dir,
                                         log_config=LogConfig(segment_ms=2), tiered=True,
                                         supported_versions=(1, LATEST_METADATA_VERSION)),
                            ctrl, clock_ms=clock)
        ctrl.attach(driver)
        ctrl.enable_snapshots(driver.snapshot_dir)
        await driver.start()
        ctrl.start()
        deadline = time.monotonic() + 10
        while ctrl.mode is not Mode.ACTIVE:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.01)
        store = DirectoryStore(tmp_path / "tier")
        config = TierConfig(url=store.url, local_retention_ms=0, **tier)
        copier = TierCopier(controller=ctrl, driver=driver, store=store, config=config,
                            clock_ms=clock)
        api = AdminCalls(ControllerApi(ctrl, driver))
        reg = await api.register_broker(BrokerRegistrationRequest(0, "inc", cluster_id, listeners=(Listener("PLAINTEXT", "localhost", 9092, "PLAINTEXT"),),
            features=(FeatureRange(METADATA_VERSION, 1, LATEST_METADATA_VERSION),)),
                                        origin=ORIGIN)
        await api.broker_heartbeat(BrokerHeartbeatRequest(0, reg.broker_epoch, 1 << 40),
                                   origin=ORIGIN)
        try:
            await body(Rig(driver, ctrl, api, copier, store, data_dir))
        finally:
            await driver.stop()
            await ctrl.stop()

    asyncio.run(main())


def local_bases(data_dir: Path) -> list[int]:
    return sorted(int(p.stem) for p in DataDir(data_dir).log_dir.glob("*.log"))


def test_copies_follow_the_copied_end_and_local_retention_trims(tmp_path: Path) -> None:
    async def body(rig: Rig) -> None:
        await rig.write_topics("a", 30)
        await rig.rounds_until_idle()
        listing = list_tier(rig.store)
        assert listing.cluster_id == rig.ctrl.settings.cluster_id
        assert listing.segments and listing.snapshots
        ends = [m.end_offset for m in listing.segments]
        starts = [m.start_offset for m in listing.segments]
        assert starts[0] == 0 and starts[1:] == ends[:-1]  # contiguous from 0
        assert all(o.state is SegmentState.COPY_FINISHED for o in rig.objects())
        # Local segments below the snapshot and the copied end are gone...
        assert local_bases(rig.data_dir)[0] > 0
        # ...and tier + local log still cover everything from 0.
        local = [(b, DataDir(rig.data_dir).log_dir / f"{b:020d}.log")
                 for b in local_bases(rig.data_dir)]
        assert plan_history(listing.segments, local)[0].start == 0

    run(tmp_path, body)


def chain_report(rig: Rig) -> Any:
    listing = list_tier(rig.store)
    ledger = TierLedger()
    pieces = plan_history(listing.segments, local_segments(rig.data_dir))
    ledger.add_batches(b for _, b in history_batches(rig.store, pieces))
    return listing, check_chain(listing.segments, listing.snapshots, ledger, complete=True)


def test_copies_are_chained_from_the_level_that_turns_the_chain_on(tmp_path: Path) -> None:
    """Below metadata.version 9 manifests carry CRC-32C only; from the upgrade on,
    each object's manifest hashes its data and chains to the one before it, and the
    log records each manifest's SHA-256 (so every object matches its record)."""
    level = Feature.TIER_HASH_CHAIN.level

    async def body(rig: Rig) -> None:
        await rig.write_topics("a", 15)
        await rig.rounds_until_idle()
        before = {m.segment_id for m in list_tier(rig.store).segments}
        assert before and not any(o.manifest_sha256 for o in rig.objects())
        [result] = await rig.api.update_features([FeatureUpdate(METADATA_VERSION, level)],
                                                 origin=ORIGIN)
        assert result.error.ok, result
        await rig.write_topics("b", 30)
        await rig.rounds_until_idle()
        listing, report = chain_report(rig)
        after = [m for m in listing.segments if m.segment_id not in before]
        assert len(after) >= 2 and all(m.hashed for m in after)
        assert not any(m.hashed for m in listing.segments if m.segment_id in before)
        # The first hashed object follows an unhashed one: the chain starts there.
        assert after[0].prev_manifest_sha256 == ""
        by_id = {m.segment_id: m for m in listing.segments}
        for m in after[1:]:
            [prev] = [p for p in listing.segments if p.end_offset == m.start_offset]
            assert m.prev_manifest_sha256 == by_id[prev.segment_id].sha256()
        assert report.ok, report.findings
        assert report.recorded == report.hashed == len(after) + sum(
            1 for m in listing.snapshots if m.hashed)
        recorded = {o.segment_id: o.manifest_sha256 for o in rig.objects()}
        assert all(recorded[m.segment_id] == m.sha256() for m in after)
        # A safe downgrade below 9 is refused while the state holds hashes.
        [down] = await rig.api.update_features(
            [FeatureUpdate(METADATA_VERSION, level - 1, UpgradeType.SAFE_DOWNGRADE)],
            origin=ORIGIN)
        assert not down.error.ok and "manifest hashes" in down.error.message, down

    run(tmp_path, body, metadata_version=level - 1)


async def _announce(rig: Rig, obj: RemoteObject, then: SegmentState | None = None) -> None:
    """Write a predecessor's tier records as if another leader had (epoch 99)."""
    tier = rig.ctrl.state.tier

    def gen(records: Callable[[], list[Any]]) -> Operation:
        return Operation("Predecessor", run=lambda _ctx, _args, _o, _n: ControllerResult(
            tuple(records()), None))

    await rig.ctrl.write(gen(lambda: tier.copy_started_records(obj)), Args(), EMPTY_ORIGIN)
    if then is not None:
        await rig.ctrl.write(gen(lambda: tier.state_change_records(
            obj.segment_id, then, copier_id=7, copier_epoch=99, now_ms=0)), Args(), EMPTY_ORIGIN)


def test_a_predecessors_half_done_copy_and_delete_are_cleaned_up(tmp_path: Path,
                                                                  caplog: Any) -> None:
    async def body(rig: Rig) -> None:
        await rig.write_topics("a", 5)
        await rig.rounds_until_idle()
        end = rig.ctrl.state.tier.copied_end_offset(rig.ctrl.committed_offset - 1)
        assert end is not None
        now = rig.copier._clock_ms()
        fresh = RemoteObject("f" * 32, ObjectKind.SEGMENT, end, end + 1, 0, 0, 1, 1, 7, 99,
                             SegmentState.COPY_STARTED, now)
        stale = attrs.evolve(fresh, segment_id="e" * 32, state_time_ms=now - 60_000)
        deleting = attrs.evolve(fresh, segment_id="d" * 32, kind=ObjectKind.SNAPSHOT,
                                start_offset=0)
        for obj in (fresh, stale, deleting):
            key = data_key("segment" if obj.kind is ObjectKind.SEGMENT else "snapshot",
                           obj.start_offset, obj.end_offset, obj.segment_id, obj.last_epoch)
            rig.store.put(key, b"half")  # what the dead leader managed to upload
        await _announce(rig, fresh)
        await _announce(rig, stale)
        await _announce(rig, deleting, SegmentState.DELETE_STARTED)
        with caplog.at_level(logging.INFO, logger="metakraft.tier"):
            await rig.copier.round()
        ids = {o.segment_id: o.state for o in rig.objects()}
        # The stale copy and the half-done delete are gone, objects and all; the fresh
        # one (its copier may still be uploading) waits for copy_timeout_ms.
        assert ids.get("f" * 32) is SegmentState.COPY_STARTED
        assert "e" * 32 not in ids and "d" * 32 not in ids
        left = {i.key for i in rig.store.list("")}
        assert not any(("e" * 32) in k or ("d" * 32) in k for k in left)
        assert "reason=abandoned_copy" in caplog.text
        assert "reason=unfinished_delete" in caplog.text
        # Copies went on meanwhile (a duplicate of a range is harmless).
        await rig.write_topics("b", 5)
        await rig.rounds_until_idle()
        assert rig.ctrl.state.tier.copied_end_offset() > end  # type: ignore[operator]

    run(tmp_path, body, copy_timeout_ms=30_000)


def test_remote_retention_deletes_the_oldest_objects_below_a_snapshot(tmp_path: Path) -> None:
    async def body(rig: Rig) -> None:
        await rig.write_topics("a", 40)
        await rig.rounds_until_idle()
        listing = list_tier(rig.store)
        assert listing.segments[0].start_offset > 0  # the oldest went
        newest_snapshot = max(m.end_offset for m in listing.snapshots)
        assert listing.segments[0].start_offset <= newest_snapshot
        # What is left is still one contiguous history to the copied end.
        copied = rig.ctrl.state.tier.copied_end_offset()
        assert plan_history(listing.segments, [])[-1].end == copied
        kept = [o for o in rig.objects() if o.kind is ObjectKind.SEGMENT]
        # Beyond retention_bytes only what no snapshot covers yet (never deletable).
        deletable = [o for o in kept[:-1] if o.end_offset <= newest_snapshot]
        assert sum(o.size_bytes for o in deletable) <= 3_000
        # Snapshots older than the one the new history start needs went with it.
        start = listing.segments[0].start_offset
        assert len([m for m in listing.snapshots if m.end_offset <= start]) <= 1

    run(tmp_path, body, retention_bytes=3_000)


def test_tier_trouble_is_logged_once_per_change_and_raises_from_a_round(
        tmp_path: Path, caplog: Any) -> None:
    async def body(rig: Rig) -> None:
        await rig.write_topics("a", 5)
        real_put = rig.store.put

        def broken(key: str, data: bytes) -> None:
            raise TierUnavailableError(f"{rig.store.url}: cannot write {key}: disk full")

        rig.store.put = broken  # type: ignore[method-assign]
        with pytest.raises(TierUnavailableError, match="disk full"):
            await rig.copier.round()
        start_before = local_bases(rig.data_dir)[0]
        with caplog.at_level(logging.INFO, logger="metakraft.tier"):
            task = asyncio.create_task(rig.copier.run())
            await asyncio.sleep(0.5)
            assert caplog.text.count("event=tier_unavailable") == 1  # not one per retry
            await rig.write_topics("b", 30)  # past a snapshot: deletion would be due
            assert local_bases(rig.data_dir)[0] == start_before  # but it waits
            rig.store.put = real_put  # type: ignore[method-assign]
            deadline = time.monotonic() + 20
            while "event=tier_available" not in caplog.text:
                assert time.monotonic() < deadline, caplog.text
                await asyncio.sleep(0.05)
            task.cancel()
        assert caplog.text.count("event=tier_available") == 1
        await rig.rounds_until_idle()
        assert local_bases(rig.data_dir)[0] > start_before

    run(tmp_path, body, copy_interval_ms=20, max_backoff_ms=200)
