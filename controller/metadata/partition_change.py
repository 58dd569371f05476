"""Building PartitionChangeRecords: ISR rules, leader election, reassignment completion.

One function, ``build_partition_change``, turns "this partition should now have this
ISR / these replicas" into the minimal record (only changed fields), applying the
rules every caller shares:

- the ISR is always a subset of the replicas and never becomes empty: when every
  in-sync replica leaves, the ISR keeps its last members (they hold the data) and the
  partition goes offline (leader -1) until one comes back;
- leader: the current one stays while it is in the ISR and usable; otherwise the first
  usable in-sync replica in replica order; otherwise, only if unclean election is
  allowed, the first usable replica at all (the ISR becomes just it, recovery state
  RECOVERING); otherwise no leader;
- reassignment: once every adding replica is in the ISR, the partition's replicas
  become the target (replicas minus removing), removing replicas leave the ISR, both
  lists are cleared, and the leader is re-elected if it was being removed.
"""

from __future__ import annotations

import enum
from collections.abc import Callable

from controller.records import BrokerIdList, PartitionChangeRecord
from controller.records import metadata_pb2 as pb
from controller.records.domain import NO_LEADER, LeaderRecoveryState, PartitionRegistration


class Election(enum.Enum):
    # Keep the current leader while it is eligible.
    KEEP = "KEEP"
    # Move leadership to the first replica if it is eligible.
    PREFERRED = "PREFERRED"


def build_partition_change(
    part: PartitionRegistration,
    *,
    topic_id: str,
    partition_id: int,
    is_usable: Callable[[int], bool],
    unclean_allowed: bool,
    isr: tuple[int, ...] | None = None,
    replicas: tuple[int, ...] | None = None,
    adding: tuple[int, ...] | None = None,
    removing: tuple[int, ...] | None = None,
    election: Election = Election.KEEP,
) -> PartitionChangeRecord | None:
    """The record taking ``part`` to the requested state, or None if nothing changes.
    Arguments left None mean "as now"."""
    new_replicas = part.replicas if replicas is None else replicas
    new_adding = part.adding_replicas if adding is None else adding
    new_removing = part.removing_replicas if removing is None else removing
    new_isr = tuple(r for r in (part.isr if isr is None else isr) if r in new_replicas)
    if (new_adding or new_removing) and set(new_adding) <= set(new_isr):
        remaining_isr = tuple(r for r in new_isr if r not in new_removing)
        if remaining_isr:
            new_replicas = tuple(r for r in new_replicas if r not in new_removing)
            new_isr = remaining_isr
            new_adding = new_removing = ()
    if not new_isr:
        new_isr = tuple(r for r in part.isr if r in new_replicas)
    recovery = part.leader_recovery_state

    def eligible(broker_id: int) -> bool:
        return broker_id in new_isr and is_usable(broker_id)

    if election is Election.PREFERRED and new_replicas and eligible(new_replicas[0]):
        leader = new_replicas[0]
    elif part.leader != NO_LEADER and eligible(part.leader):
        leader = part.leader
    else:
        leader = next((r for r in new_replicas if eligible(r)), NO_LEADER)
        if leader != NO_LEADER:
            recovery = LeaderRecoveryState.RECOVERED
        elif unclean_allowed:
            leader = next((r for r in new_replicas if is_usable(r)), NO_LEADER)
            if leader != NO_LEADER:
                # Data outside the old ISR may be lost: say so in the recovery state.
                new_isr = (leader,)
                recovery = LeaderRecoveryState.RECOVERING
    assert set(new_isr) <= set(new_replicas), (new_isr, new_replicas)
    assert leader == NO_LEADER or leader in new_isr, (leader, new_isr)

    change = PartitionChangeRecord(topic_id=topic_id, partition_id=partition_id)
    changed = False
    if new_isr != part.isr:
        change.isr.CopyFrom(BrokerIdList(ids=new_isr))
        changed = True
    if leader != part.leader:
        change.leader = leader
        changed = True
    if new_replicas != part.replicas:
        change.replicas.CopyFrom(BrokerIdList(ids=new_replicas))
        changed = True
    if new_removing != part.removing_replicas:
        change.removing_replicas.CopyFrom(BrokerIdList(ids=new_removing))
        changed = True
    if new_adding != part.adding_replicas:
        change.adding_replicas.CopyFrom(BrokerIdList(ids=new_adding))
        changed = True
    if recovery != part.leader_recovery_state:
        change.leader_recovery_state = pb.LeaderRecoveryState.ValueType(int(recovery))
        changed = True
    return change if changed else None
