"""Building PartitionChangeRecords: ISR rules, leader election, reassignment completion.

One function, ``build_partition_change``, turns "this partition should now have this
ISR / these replicas" into the minimal change (a ``PartitionDelta``: only changed
fields; ``convert.change_to_record`` makes it a record, ``partition_wire.encode_change``
its bytes), applying the rules every caller shares:

- the ISR is always a subset of the replicas and never becomes empty: when every
  in-sync replica leaves, the ISR keeps its last members (they hold the data) and the
  partition goes offline (leader -1) until one comes back;
- leader: the current one stays while it is in the ISR and usable; otherwise the first
  usable in-sync replica in replica order; otherwise, only if unclean election is
  allowed, the first usable replica at all (the ISR becomes just it, recovery state
  RECOVERING); otherwise no leader;
- reassignment: once every adding replica is in the ISR, the partition's replicas
  become the target (replicas minus removing), removing replicas leave the ISR, both
  lists are cleared, and the leader is re-elected if it was being removed; at
  metadata.version 7 a change that removes a replica states the leader even when it
  stays, so the leader epoch moves (replay bumps it whenever the leader is stated);
- eligible leader replicas (KIP-966, when ``min_isr`` is given: metadata.version 7):
  a replica that leaves an ISR which is then smaller than min.insync.replicas joins
  the ELR (it holds every record below the high watermark: acks=all writes are
  refused and the leaders' high watermark stands still below min ISR); a member
  back in the ISR, or no longer a replica, leaves it; the ELR is empty whenever the
  ISR reaches min ISR. When no ISR member can lead, the first usable ELR member in
  replica order is elected (the ISR becomes just it, the unusable ISR members join
  the ELR); only then an unclean election, which clears the ELR.
"""

from __future__ import annotations

import enum
from collections.abc import Callable

import attrs

from controller.records import MetadataRecord, make_record
from controller.records.convert import change_to_record
from controller.records.domain import (
    NO_LEADER,
    LeaderRecoveryState,
    PartitionDelta,
    PartitionRegistration,
)

NO_CHANGE = PartitionDelta()


class Election(enum.Enum):
    # Keep the current leader while it is eligible.
    KEEP = "KEEP"
    # Move leadership to the first replica if it is eligible.
    PREFERRED = "PREFERRED"


def build_partition_change(
    part: PartitionRegistration,
    *,
    is_usable: Callable[[int], bool],
    unclean_allowed: Callable[[], bool],
    isr: tuple[int, ...] | None = None,
    replicas: tuple[int, ...] | None = None,
    adding: tuple[int, ...] | None = None,
    removing: tuple[int, ...] | None = None,
    election: Election = Election.KEEP,
    min_isr: Callable[[], int] | None = None,
    bump_epoch_on_removal: bool = False,
) -> PartitionDelta | None:
    """The change taking ``part`` to the requested state (only what differs), or None
    if nothing changes. Arguments left None mean "as now".
    ``unclean_allowed`` is asked only when no in-sync replica can lead (it is a
    config lookup: asked for every partition of a fenced broker, it cost more than
    the election); ``min_isr`` (None: no ELR) likewise only when the ISR shrinks,
    an ELR exists, or nobody in the ISR can lead."""
    new_replicas = part.replicas if replicas is None else replicas
    new_adding = part.adding_replicas if adding is None else adding
    new_removing = part.removing_replicas if removing is None else removing
    new_isr = tuple([r for r in (part.isr if isr is None else isr) if r in new_replicas])
    if (new_adding or new_removing) and set(new_adding) <= set(new_isr):
        remaining_isr = tuple(r for r in new_isr if r not in new_removing)
        if remaining_isr:
            new_replicas = tuple(r for r in new_replicas if r not in new_removing)
            new_isr = remaining_isr
            new_adding = new_removing = ()
    if not new_isr:
        new_isr = tuple(r for r in part.isr if r in new_replicas)
    recovery = part.leader_recovery_state
    new_elr = _next_elr(part, new_isr, new_replicas, min_isr)

    if election is Election.PREFERRED and new_replicas and new_replicas[0] in new_isr \
            and is_usable(new_replicas[0]):
        leader = new_replicas[0]
    elif part.leader != NO_LEADER and part.leader in new_isr and is_usable(part.leader):
        leader = part.leader
    else:
        leader = next((r for r in new_replicas if r in new_isr and is_usable(r)), NO_LEADER)
        if leader == NO_LEADER and new_elr:
            # Nobody in the ISR can lead: an eligible leader replica has every
            # committed record (KIP-966).
            leader = next((r for r in new_replicas if r in new_elr and is_usable(r)),
                          NO_LEADER)
            if leader != NO_LEADER:
                dropped = new_isr
                new_isr = (leader,)
                new_elr = _next_elr(attrs.evolve(part, isr=dropped, elr=new_elr), new_isr,
                                    new_replicas, min_isr)
        if leader != NO_LEADER:
            recovery = LeaderRecoveryState.RECOVERED
        elif unclean_allowed():
            leader = next((r for r in new_replicas if is_usable(r)), NO_LEADER)
            if leader != NO_LEADER:
                # Data outside the old ISR may be lost: say so in the recovery state.
                new_isr = (leader,)
                new_elr = ()
                recovery = LeaderRecoveryState.RECOVERING
    assert set(new_isr) <= set(new_replicas), (new_isr, new_replicas)
    assert leader == NO_LEADER or leader in new_isr, (leader, new_isr)
    assert set(new_elr) <= set(new_replicas) and not set(new_elr) & set(new_isr), \
        (new_elr, new_isr, new_replicas)

    # A replica leaving the replica set must see a new leader epoch (Kafka's
    # triggerLeaderEpochBumpForReplicaReassignmentIfNeeded): stating the leader bumps
    # it even when it stays. Without it, a leader that never saw the removal (its
    # metadata skipped that state) keeps the removed replica's fetch progress, and
    # reports it in sync once it is re-added with an empty log.
    bump = bump_epoch_on_removal and not set(part.replicas) <= set(new_replicas)
    delta = PartitionDelta(
        isr=None if new_isr == part.isr else new_isr,
        leader=None if leader == part.leader and not bump else leader,
        replicas=None if new_replicas == part.replicas else new_replicas,
        removing_replicas=None if new_removing == part.removing_replicas else new_removing,
        adding_replicas=None if new_adding == part.adding_replicas else new_adding,
        leader_recovery_state=(None if recovery == part.leader_recovery_state
                               else recovery),
        elr=None if new_elr == part.elr else new_elr,
    )
    return None if delta == NO_CHANGE else delta


def _next_elr(part: PartitionRegistration, new_isr: tuple[int, ...],
              new_replicas: tuple[int, ...], min_isr: Callable[[], int] | None
              ) -> tuple[int, ...]:
    """The ELR once ``part``'s ISR becomes ``new_isr`` (see the module docstring)."""
    if min_isr is None:
        return ()
    left = [r for r in part.isr if r not in new_isr]
    if not part.elr and not left:
        return ()  # nothing to keep, nobody leaving: no config lookup
    if len(new_isr) >= min_isr():
        return ()
    elr = [r for r in part.elr if r in new_replicas and r not in new_isr]
    elr += [r for r in left if r in new_replicas and r not in elr]
    return tuple(elr)


def change_record(topic_id: str, partition_id: int, delta: PartitionDelta) -> MetadataRecord:
    """The PartitionChangeRecord stating ``delta``, in its envelope."""
    return make_record(change_to_record(delta, topic_id=topic_id, partition_id=partition_id))
