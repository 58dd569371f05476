"""`PartitionMover`: the partition changes a broker event owes, a batch at a time.

When a broker is fenced, enters controlled shutdown, is unregistered or comes back,
its partitions change with it: leaderships move, ISRs shrink or grow. For a broker
that is a replica of at most `PARTITION_MOVES_PER_BATCH` partitions the changes are
written in the same batch as the broker's own record. A broker of a large cluster is
a replica of hundreds of thousands: more than one batch may hold, and seconds of
work that would hold up every other request. Then the broker's record commits alone
(the broker is fenced at once: no new leadership or placement goes to it) and the
active controller writes the changes here, one batch per controller turn, so other
requests run between the batches. Leaderships go first: they are what restore
availability; ISR changes follow.

Each step recomputes every change from the latest state, so a partition changed or
deleted meanwhile is simply skipped. The jobs are not state: a controller that
becomes active starts a job for every broker that is not usable (work an earlier
active controller may have left half done; a job with nothing to do writes nothing),
and a broker that is back asks again on every heartbeat.
"""

from __future__ import annotations

from collections import deque

import attrs

from controller.metadata.partition_index import PartKey
from controller.metadata.replication import (
    PARTITION_MOVES_PER_BATCH,
    ReplicationControlManager,
)
from controller.records.partition_wire import encode_change


@attrs.define
class _Job:
    broker_id: int
    leaving: bool  # True: out of ISRs and leaderships; False: back in
    # The broker's candidate partitions, listed by the job's first step in the order of
    # the index (a copy of a set: cheap at any size, where sorting 250,000 keys took
    # long enough to cost the leadership); None until then.
    keys: list[PartKey] | None = attrs.field(default=None, repr=False)
    position: int = 0
    # Leaving: a first pass over the keys moves only leaderships (what restores
    # availability), the second takes the broker out of the remaining ISRs.
    leaders_only: bool = attrs.field(
        default=attrs.Factory(lambda job: job.leaving, takes_self=True))


class PartitionMover:
    def __init__(self, replication: ReplicationControlManager, *,
                 batch_records: int = PARTITION_MOVES_PER_BATCH) -> None:
        assert batch_records > 0
        self._replication = replication
        self._batch_records = batch_records
        # Keys looked at in one step at most (most need nothing once a few batches
        # went: a step must stay short even then).
        self._scan_keys = 20 * batch_records
        self._jobs: deque[_Job] = deque()

    @property
    def busy(self) -> bool:
        """More steps to run (the controller runs the next one soon)."""
        replication = self._replication
        return bool(self._jobs or replication.deferred_leaving or replication.deferred_ready)

    def activate(self) -> None:
        """This controller became active: look at every broker that may not lead."""
        self.reset()
        replication = self._replication
        for broker_id in sorted(replication.replica_brokers()):
            if not replication.cluster.is_usable(broker_id):
                self._jobs.append(_Job(broker_id, leaving=True))

    def reset(self) -> None:
        """No longer active: drop every job (the next active controller redoes them)."""
        self._jobs.clear()
        self._replication.deferred_leaving.clear()
        self._replication.deferred_ready.clear()

    def step(self) -> list[bytes]:
        """The next batch of changes, encoded (possibly none: a step that finds
        nothing to change writes nothing). Bytes, not messages: building a message
        per change and encoding it cost more than the election."""
        self._take_hints()
        while self._jobs:
            job = self._jobs[0]
            if job.leaving == self._replication.cluster.is_usable(job.broker_id):
                self._jobs.popleft()  # the broker changed state again: its job is moot
                continue
            if job.keys is None:
                job.keys = self._keys(job)
            records = self._advance(job)
            if job.position >= len(job.keys):
                if job.leaders_only:
                    job.leaders_only, job.position = False, 0  # now the ISRs
                else:
                    self._jobs.popleft()
            return records
        return []

    def _take_hints(self) -> None:
        replication = self._replication
        queued = {(j.broker_id, j.leaving) for j in self._jobs}
        for broker_id in sorted(replication.deferred_leaving):
            if (broker_id, True) not in queued:
                self._jobs.append(_Job(broker_id, leaving=True))
        for broker_id in sorted(replication.deferred_ready):
            if (broker_id, False) not in queued:
                self._jobs.append(_Job(broker_id, leaving=False))
        replication.deferred_leaving.clear()
        replication.deferred_ready.clear()

    def _keys(self, job: _Job) -> list[PartKey]:
        replication = self._replication
        if job.leaving:
            return replication.replica_keys(job.broker_id)
        keys = replication.ready_keys(job.broker_id, ordered=False)
        assert keys is not None  # no limit asked
        return keys

    def _advance(self, job: _Job) -> list[bytes]:
        replication = self._replication
        keys = job.keys
        assert keys is not None
        leaving = frozenset({job.broker_id})
        records: list[bytes] = []
        end = min(len(keys), job.position + self._scan_keys)
        position = job.position
        led_by = replication.leader_of
        while position < end and len(records) < self._batch_records:
            key = keys[position]
            position += 1
            if job.leaders_only and led_by(key) != job.broker_id:
                continue
            delta = (replication.leaving_delta(key, leaving) if job.leaving
                     else replication.ready_delta(key, job.broker_id))
            if delta is not None:
                records.append(encode_change(key[0], key[1], delta))
        job.position = position
        return records
