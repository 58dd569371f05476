"""`ReplicaBackend`: the seam between the broker agent and a data plane.

The agent turns committed metadata into instructions for this broker (the
reconciler: become leader of a partition at a leader epoch, follow a leader,
stop, delete), records them in its local state, and hands them to a backend,
which does the work of hosting the replicas. The built-in backend
(`broker_agent.replica.manager.ReplicaManager`) keeps replicated partition logs
and serves Produce / Fetch; another system embeds the agent with its own
backend (docs/architecture.md, "Embedding the broker agent";
tests/unit/broker/test_backend_seam.py has one).

Calls come from the agent's reconcile thread, in publication order, one at a
time; a backend may block (the agent waits) and raises to stop the broker (the
agent stops rather than let the disk and the backend diverge).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import attrs

from broker_agent.image import MetadataImage
from broker_agent.reconciler import Instruction, LocalReplica, ReplicaRole


@attrs.frozen
class ReplicaReport:
    """What the backend reports of one local replica (status, metrics, the agent)."""

    topic: str
    topic_id: str
    partition: int
    role: ReplicaRole
    leader_epoch: int
    log_start_offset: int
    log_end_offset: int
    high_watermark: int


class ReplicaBackend(Protocol):
    def apply(self, instructions: Sequence[Instruction], image: MetadataImage) -> None:
        """One committed delta's instructions (deletes, then leaders, then followers),
        with the image they came from (replicas, ISR, brokers' addresses). Called for
        every delta, even one with no instruction for this broker: the image moved."""

    def apply_full(self, replicas: Sequence[LocalReplica], image: MetadataImage) -> None:
        """Start-up and snapshot loads: exactly these replicas should be hosted; stop
        any other."""

    def reports(self) -> list[ReplicaReport]:
        """What each hosted replica looks like now (any thread may call it)."""
