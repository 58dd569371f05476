"""Leaders reporting the ISR they observe: AlterPartition to the active controller.

Every `isr_check_interval_ms` the manager asks each partition it leads for the ISR
it observes (`PartitionReplica.isr_change`) and sends the differences in one
AlterPartition, with the broker epoch each member fetched with. A partition with a
report in flight (`pending_isr`) is not asked again until the controller refused
it or the committed change reached this broker through the metadata log (which
clears it): the ISR is applied only from there.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import Protocol

from broker_agent.image import PartitionKey
from broker_agent.metrics import BrokerMetrics
from broker_agent.replica.config import DataPlaneConfig
from broker_agent.replica.partition import PartitionReplica, Role
from controller.api import broker_pb2 as bpb
from controller.log import get_logger

log = get_logger("metakraft.broker.data")

# Sends one AlterPartition to the active controller (the daemon's lifecycle channel).
AlterPartitionSender = Callable[[bpb.AlterPartitionRequest],
                                Awaitable[bpb.AlterPartitionResponse]]


class IsrHost(Protocol):
    """What the reporter reads of the replica manager."""

    broker_id: int
    partitions: dict[PartitionKey, PartitionReplica]
    config: DataPlaneConfig
    metrics: BrokerMetrics | None

    def broker_epoch(self) -> int: ...

    def clock_ms(self) -> int: ...

    def may_join_isr(self, broker_id: int) -> bool: ...


class IsrReporter:
    def __init__(self, host: IsrHost) -> None:
        self._host = host
        # None: ISR changes are not reported (no controller channel, as in tests).
        self.sender: AlterPartitionSender | None = None
        self.shrinks = 0
        self.expands = 0

    async def report(self) -> int:
        """Send the ISR changes the leaders observe (one AlterPartition for all);
        returns how many partitions were reported."""
        host = self._host
        sender = self.sender
        if sender is None:
            return 0
        now_ms = host.clock_ms()
        request = bpb.AlterPartitionRequest(broker_id=host.broker_id,
                                            broker_epoch=host.broker_epoch())
        # Per partition: (the ISR when proposed, the one proposed).
        proposed: dict[PartitionKey, tuple[tuple[int, ...], tuple[int, ...]]] = {}
        for key, replica in host.partitions.items():
            if replica.role is not Role.LEADER or replica.pending_isr is not None:
                continue
            wanted = replica.isr_change(now_ms, host.config.replica_lag_time_max_ms)
            if wanted is not None:
                # Not a broker the controller would refuse (KIP-841): no report to
                # be turned down every turn while it shuts down or is fenced.
                wanted = tuple(b for b in wanted if b in replica.isr or host.may_join_isr(b))
                if wanted == replica.isr:
                    wanted = None
            if wanted is None:
                continue
            replica.pending_isr = wanted
            proposed[key] = (replica.isr, wanted)
            request.items.add(
                topic_id=key[0], partition=key[1], leader_epoch=replica.leader_epoch,
                partition_epoch=replica.partition_epoch,
                new_isr=[bpb.IsrMember(broker_id=b, broker_epoch=self._member_epoch(replica, b))
                         for b in wanted])
        if not proposed:
            return 0
        try:
            response = await sender(request)
        except Exception as exc:
            self._clear_pending(proposed)
            log.info("isr_report_unsent", partitions=len(proposed), error=str(exc)[:200])
            return 0
        if response.error.code not in ("", "NONE"):
            self._clear_pending(proposed)
            log.info("isr_report_refused", partitions=len(proposed), error=response.error.code,
                     message=response.error.message)
            return len(proposed)
        for result in response.results:
            key = (result.topic_id, result.partition)
            reported = host.partitions.get(key)
            if reported is None or key not in proposed:
                continue
            if result.error.code != "NONE":
                self._clear_pending([key])
                log.info("isr_report_refused", partition=reported.name,
                         error=result.error.code, message=result.error.message)
                continue
            if result.HasField("state") and \
                    result.state.partition_epoch <= reported.partition_epoch:
                self._clear_pending([key])  # already applied: nothing left to wait for
            was, wanted = proposed[key]
            self._count(shrink=bool(set(was) - set(wanted)), expand=bool(set(wanted) - set(was)))
            log.info("isr_reported", partition=reported.name, isr=list(wanted), was=list(was))
        return len(proposed)

    def _count(self, *, shrink: bool, expand: bool) -> None:
        self.shrinks += shrink
        self.expands += expand
        metrics = self._host.metrics
        if metrics is not None:
            metrics.isr_changes.labels(kind="shrink").inc(shrink)
            metrics.isr_changes.labels(kind="expand").inc(expand)

    def _member_epoch(self, replica: PartitionReplica, broker_id: int) -> int:
        if broker_id == self._host.broker_id:
            return self._host.broker_epoch()
        progress = replica.followers.get(broker_id)
        return -1 if progress is None else progress.broker_epoch

    def _clear_pending(self, keys: Iterable[PartitionKey]) -> None:
        for key in keys:
            replica = self._host.partitions.get(key)
            if replica is not None:
                replica.pending_isr = None
