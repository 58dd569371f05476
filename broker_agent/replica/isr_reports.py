"""Leaders reporting the ISR they observe: AlterPartition to the active controller.

Every `isr_check_interval_ms` the manager asks each partition it leads for the ISR
it observes (`PartitionReplica.isr_change`) and sends the differences in one
AlterPartition, with the broker epoch each member fetched with. A partition with a
report in flight (`pending_isr`) is not asked again: the ISR is applied only once
the committed change reaches this broker through the metadata log (which clears
`pending_isr`), and until then its high watermark counts the proposed members too.

What an answer proves decides what happens to the proposal (as Kafka's leader):
- the controller refused it at our partition epoch (the partition has not changed
  since we proposed): it was not applied; the leader decides again next turn;
- the controller applied it, or answers with a newer partition epoch, or we do not
  know the outcome (the call failed, timed out, or the whole request was refused):
  it may have committed. Clearing it would let the high watermark pass records the
  new ISR members lack, so it stays pending until the metadata brings the partition's
  next state; a proposal whose outcome is unknown is sent again, unchanged, each
  turn (the controller then applies it, or answers with the state it has).

`IsrReporter.proposals` / `answered` are the whole logic, without I/O (the
simulations drive them); `report` sends through `sender`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
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


# Per partition reported: (the ISR when proposed, the one proposed).
Proposed = dict[PartitionKey, tuple[tuple[int, ...], tuple[int, ...]]]


class IsrReporter:
    def __init__(self, host: IsrHost) -> None:
        self._host = host
        # None: ISR changes are not reported (no controller channel, as in tests).
        self.sender: AlterPartitionSender | None = None
        self.shrinks = 0
        self.expands = 0
        # Proposals whose outcome is unknown, to send again while they stand:
        # key -> (leader epoch, partition epoch, the ISR proposed).
        self._unanswered: dict[PartitionKey, tuple[int, int, tuple[int, ...]]] = {}

    async def report(self) -> int:
        """Send the ISR changes the leaders observe (one AlterPartition for all);
        returns how many partitions were reported."""
        sender = self.sender
        if sender is None:
            return 0
        request, proposed = self.proposals()
        if not proposed:
            return 0
        try:
            response = await sender(request)
        except Exception as exc:
            self.answered(proposed, None, str(exc))
            return 0
        self.answered(proposed, response)
        return len(proposed)

    def proposals(self) -> tuple[bpb.AlterPartitionRequest, Proposed]:
        """The request to send now: the ISR changes observed, and the proposals still
        unanswered (marked pending; nothing to send if `Proposed` is empty)."""
        host = self._host
        now_ms = host.clock_ms()
        request = bpb.AlterPartitionRequest(broker_id=host.broker_id,
                                            broker_epoch=host.broker_epoch())
        proposed: Proposed = {}
        for key, replica in host.partitions.items():
            if replica.role is not Role.LEADER:
                continue
            if replica.pending_isr is not None:
                again = self._unanswered.get(key)
                if again != (replica.leader_epoch, replica.partition_epoch,
                             replica.pending_isr):
                    continue  # answered, or superseded: the metadata will say
                wanted: tuple[int, ...] | None = replica.pending_isr
            else:
                wanted = replica.isr_change(now_ms, host.config.replica_lag_time_max_ms)
                if wanted is not None:
                    # Not a broker the controller would refuse (KIP-841): no report to
                    # be turned down every turn while it shuts down or is fenced.
                    wanted = tuple(b for b in wanted
                                   if b in replica.isr or host.may_join_isr(b))
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
        for key in [k for k in self._unanswered if k not in proposed]:
            del self._unanswered[key]
        return request, proposed

    def answered(self, proposed: Proposed, response: bpb.AlterPartitionResponse | None,
                 failure: str = "") -> None:
        """Take the controller's answer to `proposed` (None: the call failed with
        `failure`, the outcome unknown)."""
        partitions = self._host.partitions
        if response is None or response.error.code not in ("", "NONE"):
            # The whole request failed: it may still have been applied. Pending, and
            # sent again next turn.
            for key in proposed:
                replica = partitions.get(key)
                if replica is not None and replica.pending_isr is not None:
                    self._unanswered[key] = (replica.leader_epoch, replica.partition_epoch,
                                             replica.pending_isr)
            if response is None:
                log.info("isr_report_unsent", partitions=len(proposed), error=failure[:200])
            else:
                log.info("isr_report_refused", partitions=len(proposed),
                         error=response.error.code, message=response.error.message)
            return
        for result in response.results:
            key = (result.topic_id, result.partition)
            reported = partitions.get(key)
            if reported is None or key not in proposed:
                continue
            self._unanswered.pop(key, None)
            newer = result.HasField("state") and \
                result.state.partition_epoch > reported.partition_epoch
            if result.error.code != "NONE":
                if not newer:
                    # Refused at our partition epoch: not applied.
                    reported.pending_isr = None
                log.info("isr_report_refused", partition=reported.name,
                         error=result.error.code, message=result.error.message)
                continue
            if result.HasField("state") and not newer:
                reported.pending_isr = None  # already applied: nothing left to wait for
            was, wanted = proposed[key]
            self._count(shrink=bool(set(was) - set(wanted)), expand=bool(set(wanted) - set(was)))
            log.info("isr_reported", partition=reported.name, isr=list(wanted), was=list(was))

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
