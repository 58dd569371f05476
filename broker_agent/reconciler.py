"""The reconciler core: images (or a delta) in, this broker's local instructions out.

No I/O here (a test reads the imports): the agent reads the local state from disk,
calls one of the two functions, and executes the plan it gets.

- `plan_delta(previous, new, changes, broker_id)`: the steady state, one committed
  delta at a time. Per partition the delta touched:
  * this broker is no longer a replica (or the topic is gone) → delete;
  * it is the leader and the leader epoch changed (or it was not leading) → lead
    (a new leadership); if only the partition epoch changed, an update of the
    leader state (`new_leadership=False`), so the disk keeps matching the image;
  * it is a follower and the partition epoch changed → follow.
- `plan_full(local, image, broker_id)`: start-up and after a snapshot load: compare
  what is on disk with what the image wants, so a crash at any point (half of a
  plan applied) converges on restart, and a replay of the same image is a no-op.

Plans are ordered deletes, then leaders, then followers: a topic deleted and
re-created under the same name frees its directory before the new one is written,
and leaderships are taken before followers start fetching from the new leaders.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping

import attrs

from broker_agent.image import MetadataImage, PartitionKey, TopicImage
from controller.records.domain import PartitionRegistration


class ReplicaRole(enum.Enum):
    LEADER = "leader"
    FOLLOWER = "follower"


@attrs.frozen(slots=True)
class LocalReplica:
    """What the broker keeps on disk for one replica (its `state.json`)."""

    topic: str
    topic_id: str
    partition: int
    role: ReplicaRole
    leader: int
    leader_epoch: int
    partition_epoch: int

    @property
    def dir_name(self) -> str:
        return replica_dir_name(self.topic, self.partition)


def replica_dir_name(topic: str, partition: int) -> str:
    """`<topic>-<partition>`: unique because a topic name is unique at any time."""
    return f"{topic}-{partition}"


@attrs.frozen(slots=True)
class DeleteReplica:
    # The directory to remove, and what it held (for logs and the tests).
    dir_name: str
    topic_id: str
    partition: int


@attrs.frozen(slots=True)
class BecomeLeader:
    replica: LocalReplica
    # True: a new leadership (leader epoch changed). False: we keep leading and only
    # the partition changed (e.g. its ISR); the state is rewritten so disk keeps
    # matching the image, but a real broker would not restart anything.
    new_leadership: bool = True


@attrs.frozen(slots=True)
class BecomeFollower:
    replica: LocalReplica


Instruction = DeleteReplica | BecomeLeader | BecomeFollower


@attrs.frozen(slots=True)
class Plan:
    deletes: tuple[DeleteReplica, ...] = ()
    leaders: tuple[BecomeLeader, ...] = ()
    followers: tuple[BecomeFollower, ...] = ()

    @property
    def instructions(self) -> tuple[Instruction, ...]:
        """In the order they must be applied: deletes, leaders, followers."""
        return (*self.deletes, *self.leaders, *self.followers)

    @property
    def empty(self) -> bool:
        return not (self.deletes or self.leaders or self.followers)


def desired_replica(topic: TopicImage, index: int, part: PartitionRegistration,
                    broker_id: int) -> LocalReplica | None:
    """The local state `broker_id` should hold for this partition (None: none)."""
    if broker_id not in part.replicas:
        return None
    role = ReplicaRole.LEADER if part.leader == broker_id else ReplicaRole.FOLLOWER
    return LocalReplica(topic.name, topic.topic_id, index, role, part.leader,
                        part.leader_epoch, part.partition_epoch)


def _lead(replica: LocalReplica, have: LocalReplica | None) -> BecomeLeader:
    kept = have is not None and have.role is ReplicaRole.LEADER and \
        have.topic_id == replica.topic_id and have.leader_epoch == replica.leader_epoch
    return BecomeLeader(replica, new_leadership=not kept)


def _sorted_plan(deletes: Iterable[DeleteReplica],
                 changes: Iterable[BecomeLeader | BecomeFollower]) -> Plan:
    # Sorted so a plan is a deterministic value (tests compare plans with ==).
    leaders = sorted((c for c in changes if isinstance(c, BecomeLeader)),
                     key=lambda c: c.replica.dir_name)
    followers = sorted((c for c in changes if isinstance(c, BecomeFollower)),
                       key=lambda c: c.replica.dir_name)
    assert len(leaders) + len(followers) == len({*leaders, *followers})
    return Plan(tuple(sorted(deletes, key=lambda d: d.dir_name)), tuple(leaders),
                tuple(followers))


def plan_delta(previous: MetadataImage, new: MetadataImage, changed: Iterable[PartitionKey],
               removed_topics: Iterable[str], broker_id: int) -> Plan:
    """This broker's instructions for one delta (`changed` and `removed_topics` as in
    `delta.ImageChanges`)."""
    deletes: list[DeleteReplica] = []
    changes: list[BecomeLeader | BecomeFollower] = []
    for topic_id in removed_topics:
        old_topic = previous.topics.get(topic_id)
        if old_topic is None:
            continue
        for index, old_part in old_topic.partitions.items():
            if broker_id in old_part.replicas:
                deletes.append(DeleteReplica(replica_dir_name(old_topic.name, index),
                                             topic_id, index))
    for key in changed:
        topic = new.topics.get(key[0])
        part = None if topic is None else topic.partitions.get(key[1])
        old_topic = previous.topics.get(key[0])
        old = None if old_topic is None else old_topic.partitions.get(key[1])
        want = None if topic is None or part is None else \
            desired_replica(topic, key[1], part, broker_id)
        if want is None:
            if old_topic is not None and old is not None and broker_id in old.replicas:
                deletes.append(DeleteReplica(replica_dir_name(old_topic.name, key[1]),
                                             key[0], key[1]))
            continue
        assert part is not None
        was_replica = old is not None and broker_id in old.replicas
        if want.role is ReplicaRole.LEADER:
            if not was_replica or old is None or old.leader != broker_id \
                    or old.leader_epoch != part.leader_epoch:
                changes.append(BecomeLeader(want))
            elif old.partition_epoch != part.partition_epoch:
                changes.append(BecomeLeader(want, new_leadership=False))
        elif not was_replica or old is None or old.partition_epoch != part.partition_epoch:
            changes.append(BecomeFollower(want))
    return _sorted_plan(deletes, changes)


def plan_full(local: Mapping[str, LocalReplica | None], image: MetadataImage,
              broker_id: int) -> Plan:
    """Instructions that make the local state (`dir name -> replica`, None for a
    directory whose state could not be read) equal to what `image` wants.

    Runs over every partition of the image (a million after a snapshot load), so
    the loop is flat: no per-partition helper calls, and the plan is sorted once
    by directory name (unique: the keys of `desired`)."""
    desired: dict[str, LocalReplica] = {}
    leader_role, follower_role = ReplicaRole.LEADER, ReplicaRole.FOLLOWER
    for topic in image.topics.values():
        name, topic_id = topic.name, topic.topic_id
        for index, part in topic.partitions.items():
            if broker_id in part.replicas:
                leader = part.leader
                desired[f"{name}-{index}"] = LocalReplica(
                    name, topic_id, index, leader_role if leader == broker_id else follower_role,
                    leader, part.leader_epoch, part.partition_epoch)
    deletes: list[DeleteReplica] = []
    for name, have in local.items():
        want = desired.get(name)
        if have is None:
            if want is None:
                deletes.append(DeleteReplica(name, "", -1))
            continue  # unreadable but wanted: rewritten below
        if want is None or want.topic_id != have.topic_id:
            # Same directory name, another topic id: the topic was re-created.
            deletes.append(DeleteReplica(name, have.topic_id, have.partition))
    deleted = {d.dir_name for d in deletes}
    leaders: list[BecomeLeader] = []
    followers: list[BecomeFollower] = []
    get_local = local.get
    for name in sorted(desired):
        want = desired[name]
        have = get_local(name)
        if have is None or have != want or name in deleted:
            if want.role is follower_role:
                followers.append(BecomeFollower(want))
            else:
                leaders.append(_lead(want, None if name in deleted else have))
    deletes.sort(key=lambda d: d.dir_name)
    return Plan(tuple(deletes), tuple(leaders), tuple(followers))
