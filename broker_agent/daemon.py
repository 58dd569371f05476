"""`metakraft broker --config FILE`: one broker agent process.

Assembly: a Raft observer (`RaftDriver` whose node id, the broker id, is not a
voter) with the `MetadataLoader` as its listener, the `BrokerAgent` reconciling the
local partition state, the `BrokerLifecycle` loop (registration, heartbeats) and one
gRPC server (BrokerStatus, PartitionData unless `[data] backend = "none"`,
grpc.health.v1, reflection). The `ReplicaManager` (broker_agent/replica) is the
agent's backend: it hosts the partition logs the instructions name. Once the server is bound it
logs `event=listening address=HOST:PORT` to stderr (a supervisor learns a port-0
address from it). SIGTERM / SIGINT start a controlled shutdown; exit status 0 after
it (or its bounded wait), 1 if the Raft observer failed.

If the controllers' committed history turns out cut below what the broker had
applied (committed records lost upstream: `CommittedHistoryCutError`), the broker
does not exit: it logs it, drops its copy of the metadata log, and starts a new
observer and loader, which fetch the leader's snapshot; the agent's full reconcile
then brings the local partitions in line with it (`metakraft_broker_metadata_reloads`
counts these).
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable

from broker_agent.agent import BrokerAgent
from broker_agent.config import BrokerConfig
from broker_agent.lifecycle import BrokerLifecycle
from broker_agent.lifecycle_machine import LifecycleState
from broker_agent.loader import MetadataLoader
from broker_agent.local_state import LocalPartitionStore
from broker_agent.metrics import BrokerMetrics
from broker_agent.replica.manager import ReplicaManager
from broker_agent.replica.service import add_data_service
from broker_agent.snapshot_load import LoaderListener, monotonic_ms
from broker_agent.status import BrokerStatusView, add_status_service
from controller.api import broker_pb2 as bpb
from controller.log import get_logger
from controller.metrics_common import serve_metrics
from controller.quorum.driver import RaftDriver
from controller.quorum.log_adapter import discard_replica_log
from controller.raft import CommittedHistoryCutError
from controller.rpc import RoleHealth, add_health_and_reflection, bind, create_server
from controller.security.access import Access
from controller.security.authorizer import StandardAuthorizer
from controller.storage.meta_properties import DataDir

log = get_logger("metakraft.broker")

# grpc.health.v1 service SERVING only while the broker runs: registered, unfenced
# and caught up with the metadata log.
RUNNING_BROKER_HEALTH = "metakraft.Broker"


class _Metadata:
    """The metadata pipeline: a Raft observer feeding a loader feeding the agent.
    Replaced whole (`reload`) when the history it applied was cut upstream."""

    def __init__(self, config: BrokerConfig, agent: BrokerAgent, min_start_offset: int) -> None:
        self.loader = MetadataLoader(agent, clock_ms=monotonic_ms)
        listener = LoaderListener(self.loader, prewriter=agent)
        self.driver = RaftDriver(config.driver_config(), listener)
        driver = self.driver
        self.loader.bind(lambda: driver.fetched_high_watermark)
        self.loader.min_start_offset = min_start_offset
        # The log will start at the newest snapshot file; the image must start there too.
        listener.load_latest_snapshot(self.driver.snapshot_dir)


class _Progress:
    """What the heartbeats report: the offset replayed, and "caught up" only once the
    first full reconcile is on disk (a broker must not lead partitions whose local
    state it has not written yet)."""

    def __init__(self, metadata: _Metadata, agent: BrokerAgent) -> None:
        self.metadata = metadata
        self._agent = agent

    @property
    def caught_up(self) -> bool:
        return self.metadata.loader.caught_up and self._agent.reconciled_offset >= 0

    @property
    def applied_offset(self) -> int:
        return self.metadata.loader.applied_offset


async def _watch_catch_up(loader: MetadataLoader) -> None:
    """The loader checks on every commit; this covers a start where nothing is left
    to commit (the local snapshot and log already reach the leader's high watermark)."""
    while not loader.check_caught_up():
        await asyncio.sleep(0.05)


async def _refresh_metrics(metrics: BrokerMetrics, view: Callable[[], BrokerStatusView],
                           high_watermark: Callable[[], int], agent: BrokerAgent,
                           data: ReplicaManager | None) -> None:
    while True:
        status = view()
        metrics.refresh(status.state, status.broker_epoch, status.metadata_offset,
                        high_watermark(), agent.reconciled_offset, status.replicas)
        if data is not None:
            data.refresh_metrics()
        await asyncio.sleep(1.0)


async def _failed(driver: RaftDriver, agent: BrokerAgent) -> None:
    """Returns when the Raft observer stopped or a local state write failed."""
    stopped = asyncio.create_task(driver.stopped.wait())
    try:
        while agent.failure is None and not stopped.done():
            await asyncio.wait([stopped], timeout=0.5)
    finally:
        stopped.cancel()


async def _reload(config: BrokerConfig, progress: _Progress, agent: BrokerAgent,
                  metrics: BrokerMetrics | None, cut: CommittedHistoryCutError) -> None:
    """The history this broker applied was cut upstream: start over from the leader."""
    log.error("metadata_reload", broker=config.broker_id, applied_end_offset=cut.high_watermark,
              cut_to=cut.truncate_to, leader=cut.leader_id,
              action="dropping the local metadata log and reloading the leader's snapshot; "
              "the local partitions are reconciled to it")
    if metrics is not None:
        metrics.metadata_reloads.inc()
    await progress.metadata.driver.stop(resign=False)
    discard_replica_log(DataDir(config.data_dir))
    agent.history_replaced()
    # The partitions' state reflects the lost history: the new image, whatever its
    # offset, is published and reconciled against the disk.
    progress.metadata = _Metadata(config, agent, min_start_offset=-1)
    await progress.metadata.driver.start()


async def run_broker(config: BrokerConfig) -> int:
    store = LocalPartitionStore(config.data_dir)
    metrics = None if config.metrics_port is None else BrokerMetrics(config.broker_id)
    limits = config.driver_config().rpc_limits
    lifecycle_box: list[BrokerLifecycle] = []
    data = None if config.data_backend == "none" else ReplicaManager(
        config.broker_id, config.data_dir, config.data, tls=config.tls.credentials,
        limits=limits,
        broker_epoch=lambda: lifecycle_box[0].broker_epoch if lifecycle_box else -1)
    if data is not None:
        await data.start()  # before the first image can reach the agent
    if data is not None:
        data.metrics = metrics
    agent = BrokerAgent(config.broker_id, store, metrics, backend=data)
    progress = _Progress(_Metadata(config, agent, store.read_offset()), agent)

    server = create_server(limits)
    port = bind(server, config.listen, config.tls.credentials)
    host = config.listen.rpartition(":")[0]
    address = f"{host}:{port}"
    # Followers fetch on a listener of its own when one is configured (it can sit on
    # another network, or behind a proxy: the address registered is the advertised one).
    replication_server = None
    replication_address = None
    if data is not None and config.replication_listen is not None:
        replication_server = create_server(limits)
        replication_port = bind(replication_server, config.replication_listen,
                                config.tls.credentials)
        replication_address = config.replication_advertised or \
            f"{config.replication_listen.rpartition(':')[0]}:{replication_port}"
    lifecycle = BrokerLifecycle(
        cluster_id=config.cluster_id, broker_id=config.broker_id, listen=address,
        rack=config.rack, controllers=config.controllers,
        heartbeat_interval_ms=config.heartbeat_interval_ms,
        controlled_shutdown_timeout_ms=config.controlled_shutdown_timeout_ms,
        metadata=progress, tls=config.tls.credentials,
        replication_address=replication_address)
    lifecycle_box.append(lifecycle)
    if data is not None:
        cluster_id = config.cluster_id

        async def alter_partition(request: bpb.AlterPartitionRequest
                                  ) -> bpb.AlterPartitionResponse:
            request.cluster_id = cluster_id
            response: bpb.AlterPartitionResponse = await lifecycle.channel.call(
                "AlterPartition", request)
            return response

        data.isr.sender = alter_partition

    def view() -> BrokerStatusView:
        return BrokerStatusView(config.broker_id, lifecycle.state, lifecycle.broker_epoch,
                                progress.applied_offset, tuple(store.replicas.values()),
                                lifecycle.channel.current_id, lifecycle.incarnation_id)

    services = [add_status_service(server, view)]
    if data is not None:
        authorizer = None if config.authorizer is None else \
            StandardAuthorizer(config.authorizer, data)
        access = Access(config.tls.mapper, authorizer, config.identities)
        services.append(add_data_service(server, data, access))
        if replication_server is not None:
            add_data_service(replication_server, data, access)
    health = add_health_and_reflection(server, services)
    running = RoleHealth(health, RUNNING_BROKER_HEALTH)
    lifecycle.machine.state_listeners.append(
        lambda state: running.update(state is LifecycleState.RUNNING))
    if metrics is not None:
        assert config.metrics_port is not None
        metrics_port = serve_metrics(metrics.registry, config.metrics_address,
                                     config.metrics_port)
        log.info("metrics_serving", address=f"{config.metrics_address}:{metrics_port}")
    await progress.metadata.driver.start()
    await server.start()
    if replication_server is not None:
        await replication_server.start()
    log.info("listening", address=address, broker=config.broker_id,
             incarnation=lifecycle.incarnation_id, data_dir=config.data_dir,
             **({} if replication_address is None else {"replication": replication_address}))

    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, lifecycle.request_shutdown)
    life = asyncio.create_task(lifecycle.run(), name="broker-lifecycle")
    refresh = None if metrics is None else asyncio.create_task(
        _refresh_metrics(metrics, view,
                         lambda: progress.metadata.driver.fetched_high_watermark, agent, data),
        name="broker-metrics")
    while True:
        metadata = progress.metadata
        catch_up = asyncio.create_task(_watch_catch_up(metadata.loader), name="broker-catch-up")
        failed = asyncio.create_task(_failed(metadata.driver, agent))
        await asyncio.wait([life, failed], return_when=asyncio.FIRST_COMPLETED)
        failed.cancel()
        catch_up.cancel()
        cut = metadata.driver.failure
        if life.done() or not isinstance(cut, CommittedHistoryCutError) \
                or agent.failure is not None:
            break
        await _reload(config, progress, agent, metrics, cut)
    driver = progress.metadata.driver
    if refresh is not None:
        refresh.cancel()
    if not life.done():
        life.cancel()
    await asyncio.gather(life, return_exceptions=True)
    failure = driver.failure or agent.failure
    log.info("stopping", broker=config.broker_id,
             reason="failed" if failure is not None else "shutdown")
    await health.enter_graceful_shutdown()
    await driver.stop(resign=False)
    await asyncio.to_thread(agent.close)
    if data is not None:
        await data.stop()
    await server.stop(grace=0.5)
    if replication_server is not None:
        await replication_server.stop(grace=0.5)
    if failure is not None:
        # Say what failed and how (an AssertionError's text alone is two numbers);
        # the traceback was logged where it happened (raft_failed, reconcile_failed).
        log.error("stopped", broker=config.broker_id, status="failed",
                  failed="metadata log (raft observer)" if driver.failure is not None
                  else "local state (reconcile)",
                  error=f"{type(failure).__name__}: {failure}")
        return 1
    log.info("stopped", broker=config.broker_id, status="clean")
    return 0
