"""broker.proto messages ⇄ the cluster manager's registration and heartbeat values."""

from __future__ import annotations

from collections.abc import Sequence

from controller.api import broker_pb2 as bpb
from controller.api.convert import MalformedRequestError, error_from_pb
from controller.metadata import (
    OK,
    ApiError,
    BrokerHeartbeatReply,
    BrokerHeartbeatRequest,
    BrokerRegistrationReply,
    BrokerRegistrationRequest,
)
from controller.metadata.alter_partition import (
    AlterPartitionItem,
    AlterPartitionRequest,
    AlterPartitionResult,
    IsrMember,
)
from controller.records.domain import FeatureRange, Listener


def broker_error_to_pb(error: ApiError) -> bpb.Error:
    return bpb.Error(code=error.code.value, message=error.message)


def registration_request_to_pb(request: BrokerRegistrationRequest) -> bpb.RegisterBrokerRequest:
    msg = bpb.RegisterBrokerRequest(
        cluster_id=request.cluster_id,
        broker_id=request.broker_id,
        incarnation_id=request.incarnation_id,
        listeners=[
            bpb.Listener(
                name=li.name, host=li.host, port=li.port, security_protocol=li.security_protocol
            )
            for li in request.listeners
        ],
        features=[
            bpb.SupportedFeature(name=f.name, min_version=f.min_version, max_version=f.max_version)
            for f in request.features
        ],
    )
    if request.rack is not None:
        msg.rack = request.rack
    return msg


def registration_request_from_pb(msg: bpb.RegisterBrokerRequest) -> BrokerRegistrationRequest:
    for feature in msg.features:
        if feature.min_version > feature.max_version:
            raise MalformedRequestError(
                f"feature {feature.name!r}: min_version {feature.min_version} is above "
                f"max_version {feature.max_version}"
            )
    return BrokerRegistrationRequest(
        broker_id=msg.broker_id,
        incarnation_id=msg.incarnation_id,
        cluster_id=msg.cluster_id,
        listeners=tuple(
            Listener(li.name, li.host, li.port, li.security_protocol) for li in msg.listeners
        ),
        rack=msg.rack if msg.HasField("rack") else None,
        features=tuple(FeatureRange(f.name, f.min_version, f.max_version) for f in msg.features),
    )


def registration_reply_to_pb(reply: BrokerRegistrationReply) -> bpb.RegisterBrokerResponse:
    return bpb.RegisterBrokerResponse(
        error=broker_error_to_pb(reply.error), broker_epoch=reply.broker_epoch
    )


def registration_reply_from_pb(msg: bpb.RegisterBrokerResponse) -> BrokerRegistrationReply:
    return BrokerRegistrationReply(error_from_pb(msg.error), msg.broker_epoch)


def heartbeat_request_to_pb(
    request: BrokerHeartbeatRequest, cluster_id: str
) -> bpb.BrokerHeartbeatRequest:
    return bpb.BrokerHeartbeatRequest(
        cluster_id=cluster_id,
        broker_id=request.broker_id,
        broker_epoch=request.broker_epoch,
        metadata_offset=request.metadata_offset,
        want_fence=request.want_fence,
        want_shutdown=request.want_shutdown,
    )


def heartbeat_request_from_pb(msg: bpb.BrokerHeartbeatRequest) -> BrokerHeartbeatRequest:
    return BrokerHeartbeatRequest(
        broker_id=msg.broker_id,
        broker_epoch=msg.broker_epoch,
        metadata_offset=msg.metadata_offset,
        want_fence=msg.want_fence,
        want_shutdown=msg.want_shutdown,
    )


def heartbeat_reply_to_pb(
    reply: BrokerHeartbeatReply, broker_epoch: int
) -> bpb.BrokerHeartbeatResponse:
    return bpb.BrokerHeartbeatResponse(
        error=broker_error_to_pb(reply.error),
        broker_epoch=broker_epoch if reply.error.ok else -1,
        is_caught_up=reply.is_caught_up,
        is_fenced=reply.is_fenced,
        in_controlled_shutdown=reply.in_controlled_shutdown,
        should_shut_down=reply.should_shut_down,
    )


def heartbeat_reply_from_pb(msg: bpb.BrokerHeartbeatResponse) -> BrokerHeartbeatReply:
    return BrokerHeartbeatReply(
        error_from_pb(msg.error),
        is_caught_up=msg.is_caught_up,
        is_fenced=msg.is_fenced,
        in_controlled_shutdown=msg.in_controlled_shutdown,
        should_shut_down=msg.should_shut_down,
    )


def alter_partition_to_pb(request: AlterPartitionRequest,
                          cluster_id: str) -> bpb.AlterPartitionRequest:
    return bpb.AlterPartitionRequest(
        cluster_id=cluster_id, broker_id=request.broker_id, broker_epoch=request.broker_epoch,
        items=[bpb.AlterPartitionItem(
            topic_id=i.topic_id, partition=i.partition, leader_epoch=i.leader_epoch,
            partition_epoch=i.partition_epoch,
            new_isr=[bpb.IsrMember(broker_id=m.broker_id, broker_epoch=m.broker_epoch)
                     for m in i.new_isr]) for i in request.items])


def alter_partition_from_pb(msg: bpb.AlterPartitionRequest) -> AlterPartitionRequest:
    return AlterPartitionRequest(msg.broker_id, msg.broker_epoch, tuple(
        AlterPartitionItem(i.topic_id, i.partition, i.leader_epoch, i.partition_epoch,
                           tuple(IsrMember(m.broker_id, m.broker_epoch) for m in i.new_isr))
        for i in msg.items))


def alter_partition_results_to_pb(results: Sequence[AlterPartitionResult]
                                  ) -> bpb.AlterPartitionResponse:
    out = bpb.AlterPartitionResponse(error=broker_error_to_pb(OK))
    for r in results:
        item = out.results.add(topic_id=r.topic_id, partition=r.partition,
                               error=broker_error_to_pb(r.error))
        if r.registration is not None:
            reg = r.registration
            item.state.CopyFrom(bpb.PartitionState(
                leader=reg.leader, leader_epoch=reg.leader_epoch,
                partition_epoch=reg.partition_epoch, isr=reg.isr))
    return out
