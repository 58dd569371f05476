"""`metakraft controller --config FILE`: one controller process.

One gRPC server carries the Raft service (peers), the Admin and BrokerLifecycle
services, health (service "" for the process, `metakraft.ActiveController` SERVING
only while this one is the active controller) and reflection. Start: check the config and data dir, open the
log (RaftDriver), start the controller's timers, serve, and print one line
`controller <id> serving on <host:port>` to stdout. Stop on SIGTERM or SIGINT: the
leader hands over first (EndQuorumEpoch, so a successor runs at once), then the
node stops, waiting requests are answered, and the server stops. Exit status 1
if the Raft node failed (a storage error or a broken invariant), else 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import signal
from collections.abc import Callable

from controller.api.admin_service import add_api_services
from controller.api.audit_log import AUDIT_LINES, ApiMetrics
from controller.api.seam import ControllerFacade
from controller.gc_policy import GcPolicy
from controller.log import get_logger
from controller.quorum.driver import RaftDriver, SteadyWallClock
from controller.quorum.service import RaftGate, add_raft_service
from controller.quorum_controller.config_file import DaemonConfig
from controller.quorum_controller.controller import QuorumController
from controller.quorum_controller.events import Mode
from controller.quorum_controller.facade import CommittedAcls, ControllerApi
from controller.quorum_controller.metrics import ControllerMetrics
from controller.quorum_controller.ports import QuorumPort
from controller.quorum_controller.tier_copier import TierCopier
from controller.rpc import NOT_SERVING, RoleHealth, bind, create_server
from controller.security.access import Access
from controller.security.authorizer import StandardAuthorizer
from controller.tier.metrics import TierMetrics
from controller.tier.remote import open_store
from controller.watch.history import HistoryReader, TierSource
from controller.watch.hub import WatchHub
from controller.watch.service import WatchService

log = get_logger("metakraft.daemon")

# grpc.health.v1 service SERVING only on the active controller (for load balancers
# and probes that must reach the one that takes writes).
ACTIVE_CONTROLLER_HEALTH = "metakraft.ActiveController"


async def run_controller(config: DaemonConfig) -> int:
    cfg = config.driver
    # Full collector passes over the metadata image would stop the process for
    # hundreds of milliseconds at a million partitions (gc_policy.py).
    GcPolicy().install()
    clock = SteadyWallClock()
    controller = QuorumController(config.controller, clock_ms=clock, rng=random.Random())
    driver = RaftDriver(cfg, controller, clock_ms=clock)
    port: QuorumPort = driver
    controller.attach(port)
    # The log will start at the newest snapshot file; the state must start there too.
    controller.load_latest_snapshot(driver.snapshot_dir)
    controller.enable_snapshots(driver.snapshot_dir)
    if config.metrics_port is not None:
        controller.metrics = ControllerMetrics(cfg.node_id)
        metrics_port = controller.metrics.serve(config.metrics_address, config.metrics_port)
        log.info("metrics_serving", address=f"{config.metrics_address}:{metrics_port}")
    facade: ControllerFacade = ControllerApi(controller, port, data_dir=cfg.data_dir)
    server = create_server(cfg.rpc_limits)
    bound = bind(server, config.listen, config.tls.credentials)
    access = Access(config.tls.mapper, None if config.authorizer is None else
                    StandardAuthorizer(config.authorizer, CommittedAcls(controller)),
                    config.identities)
    raft_name = add_raft_service(server, driver, raft_gate(config, access))
    api_metrics = None if controller.metrics is None else ApiMetrics(controller.metrics.registry)
    closing = asyncio.Event()
    watch = watch_service(config, controller, driver, access)
    health = add_api_services(server, facade, access=access, other_service_names=[raft_name],
                              metrics=api_metrics, closing=closing, watch=watch.serve)
    active = RoleHealth(health, ACTIVE_CONTROLLER_HEALTH)
    controller.mode_listeners.append(lambda mode: active.update(mode is Mode.ACTIVE))
    # Signals first: a SIGTERM while starting stops cleanly once started (it would
    # otherwise kill the process with the default action).
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await driver.start()
    controller.start()
    copier_task = start_tier_copier(config, controller, driver, clock)
    await server.start()
    host = config.listen.rpartition(":")[0]
    log.info("serving", node=cfg.node_id, address=f"{host}:{bound}",
             voters=",".join(f"{k}={v}" for k, v in sorted(cfg.voter_addresses.items())),
             data_dir=str(cfg.data_dir),
             tls=config.tls.credentials.subject if config.tls.credentials else "off",
             authorizer="on" if config.authorizer is not None else "off")
    print(f"controller {cfg.node_id} serving on {host}:{bound}", flush=True)
    waits = [asyncio.create_task(stop.wait()), asyncio.create_task(driver.stopped.wait())]
    await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    for task in waits:
        task.cancel()
    log.info("stopping", node=cfg.node_id, reason="signal" if stop.is_set() else "raft_failed",
             mode=controller.mode.value)
    if copier_task is not None:
        copier_task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await copier_task
    # Hand leadership over while still serving, so clients follow to the successor.
    await driver.stop(resign=True)
    await controller.stop()
    await health.enter_graceful_shutdown()
    closing.set()
    watch.close()
    await asyncio.sleep(0)  # the open streams see it and end
    await server.stop(grace=0.5)
    # The admin_write lines of the last answered writes, before saying it stopped.
    await asyncio.to_thread(AUDIT_LINES.flush)
    if driver.failure is not None:
        failure = driver.failure
        log.error("stopped", node=cfg.node_id, status="failed", failed="raft node",
                  error=f"{type(failure).__name__}: {failure}")
        return 1
    log.info("stopped", node=cfg.node_id, status="clean")
    return 0


class _WatchedController:
    """What a watch asks of the controller (`controller.watch.service.WatchedNode`)."""

    def __init__(self, controller: QuorumController) -> None:
        self._controller = controller

    @property
    def is_active(self) -> bool:
        return self._controller.mode is Mode.ACTIVE

    def topic_name(self, topic_id: str) -> str | None:
        topic = self._controller.state.replication.topic(topic_id)
        return None if topic is None else topic.name


def watch_service(config: DaemonConfig, controller: QuorumController, driver: RaftDriver,
                  access: Access) -> WatchService:
    """Watch, fed by the controller's commits, reading its log and the tier."""
    hub = WatchHub()
    hub.advance(controller.committed_offset)
    controller.commit_listeners.append(hub.advance)
    tier = None
    if config.tier is not None:
        store = open_store(config.tier.url, access_key_id=config.tier.access_key_id,
                           secret_access_key=config.tier.secret_access_key)
        tier = TierSource(store, config.driver.cluster_id)
    return WatchService(hub, HistoryReader(driver, tier), _WatchedController(controller),
                        access, config.watch)


def raft_gate(config: DaemonConfig, access: Access) -> RaftGate | None:
    """Who may speak Raft to this controller (None without TLS: no identities)."""
    if config.tls.credentials is None:
        return None
    return RaftGate(access, config.controller_principals,
                    frozenset(config.driver.voter_addresses))


def start_tier_copier(config: DaemonConfig, controller: QuorumController, driver: RaftDriver,
                      clock: Callable[[], int]) -> asyncio.Task[None] | None:
    """Start the remote tier's copier task (None without a [tier] section)."""
    tier = config.tier
    if tier is None:
        return None
    store = open_store(tier.url, access_key_id=tier.access_key_id,
                       secret_access_key=tier.secret_access_key)
    metrics = None if controller.metrics is None else TierMetrics(controller.metrics.registry)
    copier = TierCopier(controller=controller, driver=driver, store=store, config=tier,
                        clock_ms=clock, metrics=metrics)
    log.info("tier_enabled", url=store.url, local_retention_ms=tier.local_retention_ms,
             local_retention_bytes=tier.local_retention_bytes, retention_ms=tier.retention_ms,
             retention_bytes=tier.retention_bytes)
    return asyncio.create_task(copier.run(), name="tier-copier")


__all__ = ["NOT_SERVING", "run_controller"]
