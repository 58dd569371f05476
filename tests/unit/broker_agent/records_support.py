"""Record builders shared by the broker agent unit tests."""

from __future__ import annotations

from controller.records import MetadataRecord, make_record
from controller.records import metadata_pb2 as pb


def topic(name: str, topic_id: str) -> MetadataRecord:
    return make_record(pb.TopicRecord(name=name, topic_id=topic_id))


def partition(topic_id: str, index: int, replicas: tuple[int, ...], leader: int | None = None,
              isr: tuple[int, ...] | None = None) -> MetadataRecord:
    return make_record(pb.PartitionRecord(
        topic_id=topic_id, partition_id=index, replicas=replicas,
        isr=replicas if isr is None else isr,
        leader=replicas[0] if leader is None else leader))


def change(topic_id: str, index: int, *, leader: int | None = None,
           isr: tuple[int, ...] | None = None,
           replicas: tuple[int, ...] | None = None) -> MetadataRecord:
    msg = pb.PartitionChangeRecord(topic_id=topic_id, partition_id=index)
    if leader is not None:
        msg.leader = leader
    if isr is not None:
        msg.isr.ids.extend(isr)
    if replicas is not None:
        msg.replicas.ids.extend(replicas)
    return make_record(msg)


def remove_topic(topic_id: str) -> MetadataRecord:
    return make_record(pb.RemoveTopicRecord(topic_id=topic_id))


def register(broker_id: int, epoch: int) -> MetadataRecord:
    return make_record(pb.RegisterBrokerRecord(broker_id=broker_id, incarnation_id=f"i{epoch}",
                                              broker_epoch=epoch, fenced=True))


def unfence(broker_id: int, epoch: int) -> MetadataRecord:
    return make_record(pb.BrokerRegistrationChangeRecord(
        broker_id=broker_id, broker_epoch=epoch, fenced=pb.FENCE_CHANGE_UNFENCE))


def config(name: str, key: str, value: str | None) -> MetadataRecord:
    msg = pb.ConfigRecord(resource_type=pb.CONFIG_RESOURCE_TYPE_TOPIC, resource_name=name,
                          name=key)
    if value is not None:
        msg.value = value
    return make_record(msg)


def feature(name: str, level: int) -> MetadataRecord:
    return make_record(pb.FeatureLevelRecord(name=name, feature_level=level))
