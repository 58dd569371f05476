"""The Admin gRPC service: decode, validate, call the controller facade, encode.

Handlers hold no state and never touch controller state: they convert the request
(malformed → INVALID_ARGUMENT), await one facade call and convert its answer. The
status-code contract is in admin.proto's header; ``handlers.guarded`` implements it.
``add_api_services`` registers Admin, BrokerLifecycle, health and reflection.
"""

from __future__ import annotations

from collections.abc import Sequence

from grpc import aio
from grpc_health.v1 import _async as health_async

from controller import rpc
from controller.api import admin_pb2 as apb
from controller.api import convert as cv
from controller.api.broker_service import BrokerLifecycleService
from controller.api.handlers import guarded, origin_of, register_service
from controller.api.seam import ControllerFacade
from controller.api.stream import Context


class AdminService:
    """The unary Admin methods (registered from the descriptor by `register_service`,
    which also serves them multiplexed on `Stream`)."""

    def __init__(self, facade: ControllerFacade) -> None:
        self._facade = facade

    async def CreateTopics(
        self, request: apb.CreateTopicsRequest, context: Context
    ) -> apb.CreateTopicsResponse:
        async def body() -> apb.CreateTopicsResponse:
            topics = [cv.creatable_topic_from_pb(t) for t in request.topics]
            results = await self._facade.create_topics(
                topics,
                validate_only=request.validate_only,
                origin=origin_of(request.header, context),
            )
            return apb.CreateTopicsResponse(
                results=[cv.create_topic_result_to_pb(r) for r in results]
            )

        return await guarded(context, "CreateTopics", body)

    async def DeleteTopics(
        self, request: apb.DeleteTopicsRequest, context: Context
    ) -> apb.DeleteTopicsResponse:
        async def body() -> apb.DeleteTopicsResponse:
            results = await self._facade.delete_topics(
                list(request.names), origin=origin_of(request.header, context)
            )
            return apb.DeleteTopicsResponse(
                results=[cv.delete_topic_result_to_pb(r) for r in results]
            )

        return await guarded(context, "DeleteTopics", body)

    async def CreatePartitions(
        self, request: apb.CreatePartitionsRequest, context: Context
    ) -> apb.CreatePartitionsResponse:
        async def body() -> apb.CreatePartitionsResponse:
            items = [cv.create_partitions_topic_from_pb(t) for t in request.topics]
            results = await self._facade.create_partitions(
                items,
                validate_only=request.validate_only,
                origin=origin_of(request.header, context),
            )
            return apb.CreatePartitionsResponse(
                results=[cv.create_partitions_result_to_pb(r) for r in results]
            )

        return await guarded(context, "CreatePartitions", body)

    async def ListTopics(
        self, request: apb.ListTopicsRequest, context: Context
    ) -> apb.ListTopicsResponse:
        async def body() -> apb.ListTopicsResponse:
            topics = await self._facade.list_topics(origin=origin_of(request.header, context))
            return apb.ListTopicsResponse(topics=[cv.topic_listing_to_pb(t) for t in topics])

        return await guarded(context, "ListTopics", body)

    async def DescribeTopics(
        self, request: apb.DescribeTopicsRequest, context: Context
    ) -> apb.DescribeTopicsResponse:
        async def body() -> apb.DescribeTopicsResponse:
            # Empty means every topic (documented in admin.proto).
            names = list(request.names) or None
            found = await self._facade.describe_topics(
                names, origin=origin_of(request.header, context)
            )
            return apb.DescribeTopicsResponse(topics=[cv.topic_description_to_pb(d) for d in found])

        return await guarded(context, "DescribeTopics", body)

    async def DescribeCluster(
        self, request: apb.DescribeClusterRequest, context: Context
    ) -> apb.DescribeClusterResponse:
        async def body() -> apb.DescribeClusterResponse:
            desc = await self._facade.describe_cluster(origin=origin_of(request.header, context))
            return cv.cluster_to_pb(desc)

        return await guarded(context, "DescribeCluster", body)

    async def IncrementalAlterConfigs(
        self, request: apb.IncrementalAlterConfigsRequest, context: Context
    ) -> apb.IncrementalAlterConfigsResponse:
        async def body() -> apb.IncrementalAlterConfigsResponse:
            resources = [cv.alter_configs_resource_from_pb(r) for r in request.resources]
            results = await self._facade.incremental_alter_configs(
                resources,
                validate_only=request.validate_only,
                origin=origin_of(request.header, context),
            )
            return apb.IncrementalAlterConfigsResponse(
                results=[cv.alter_configs_result_to_pb(r) for r in results]
            )

        return await guarded(context, "IncrementalAlterConfigs", body)

    async def DescribeConfigs(
        self, request: apb.DescribeConfigsRequest, context: Context
    ) -> apb.DescribeConfigsResponse:
        async def body() -> apb.DescribeConfigsResponse:
            resources = [cv.config_resource_from_pb(r) for r in request.resources]
            results = await self._facade.describe_configs(
                resources, origin=origin_of(request.header, context)
            )
            return apb.DescribeConfigsResponse(
                results=[cv.describe_configs_result_to_pb(r) for r in results]
            )

        return await guarded(context, "DescribeConfigs", body)

    async def AlterPartitionReassignments(
        self, request: apb.AlterPartitionReassignmentsRequest, context: Context
    ) -> apb.AlterPartitionReassignmentsResponse:
        async def body() -> apb.AlterPartitionReassignmentsResponse:
            items = [cv.reassignment_request_from_pb(p) for p in request.partitions]
            results = await self._facade.alter_partition_reassignments(
                items, origin=origin_of(request.header, context)
            )
            return apb.AlterPartitionReassignmentsResponse(
                results=[cv.reassignment_result_to_pb(r) for r in results]
            )

        return await guarded(context, "AlterPartitionReassignments", body)

    async def ListPartitionReassignments(
        self, request: apb.ListPartitionReassignmentsRequest, context: Context
    ) -> apb.ListPartitionReassignmentsResponse:
        async def body() -> apb.ListPartitionReassignmentsResponse:
            wanted = [cv.topic_partition_from_pb(p) for p in request.partitions] or None
            found = await self._facade.list_partition_reassignments(
                wanted, origin=origin_of(request.header, context)
            )
            return apb.ListPartitionReassignmentsResponse(
                reassignments=[cv.ongoing_reassignment_to_pb(r) for r in found]
            )

        return await guarded(context, "ListPartitionReassignments", body)

    async def ElectLeaders(
        self, request: apb.ElectLeadersRequest, context: Context
    ) -> apb.ElectLeadersResponse:
        async def body() -> apb.ElectLeadersResponse:
            kind = cv.election_type_from_pb(request.election_type)
            if request.all_partitions and request.partitions:
                raise cv.MalformedRequestError(
                    "give either all_partitions or a list of partitions, not both"
                )
            partitions = (
                None
                if request.all_partitions
                else [cv.topic_partition_from_pb(p) for p in request.partitions]
            )
            results = await self._facade.elect_leaders(
                partitions, kind, origin=origin_of(request.header, context)
            )
            return apb.ElectLeadersResponse(
                results=[cv.elect_leaders_result_to_pb(r) for r in results]
            )

        return await guarded(context, "ElectLeaders", body)

    async def UnregisterBroker(
        self, request: apb.UnregisterBrokerRequest, context: Context
    ) -> apb.UnregisterBrokerResponse:
        async def body() -> apb.UnregisterBrokerResponse:
            error = await self._facade.unregister_broker(
                request.broker_id, origin=origin_of(request.header, context)
            )
            return apb.UnregisterBrokerResponse(error=cv.error_to_pb(error))

        return await guarded(context, "UnregisterBroker", body)

    async def DescribeQuorum(
        self, request: apb.DescribeQuorumRequest, context: Context
    ) -> apb.DescribeQuorumResponse:
        async def body() -> apb.DescribeQuorumResponse:
            desc = await self._facade.describe_quorum(origin=origin_of(request.header, context))
            return cv.quorum_to_pb(desc)

        return await guarded(context, "DescribeQuorum", body)

    async def DescribeFeatures(
        self, request: apb.DescribeFeaturesRequest, context: Context
    ) -> apb.DescribeFeaturesResponse:
        async def body() -> apb.DescribeFeaturesResponse:
            found = await self._facade.describe_features(origin=origin_of(request.header, context))
            return apb.DescribeFeaturesResponse(
                features=[cv.feature_description_to_pb(f) for f in found]
            )

        return await guarded(context, "DescribeFeatures", body)

    async def UpdateFeatures(
        self, request: apb.UpdateFeaturesRequest, context: Context
    ) -> apb.UpdateFeaturesResponse:
        async def body() -> apb.UpdateFeaturesResponse:
            updates = [cv.feature_update_from_pb(u) for u in request.updates]
            results = await self._facade.update_features(
                updates,
                validate_only=request.validate_only,
                origin=origin_of(request.header, context),
            )
            return apb.UpdateFeaturesResponse(
                results=[cv.feature_update_result_to_pb(r) for r in results]
            )

        return await guarded(context, "UpdateFeatures", body)


def add_api_services(
    server: aio.Server,
    facade: ControllerFacade,
    *,
    other_service_names: Sequence[str] = (),
) -> health_async.HealthServicer:
    """Register Admin and BrokerLifecycle on ``server`` (made by ``rpc.create_server``,
    whose ``RpcLimits`` bound message sizes), plus health and reflection.

    ``other_service_names``: services registered on the same server by others (the
    Raft service), so reflection lists them too; reflection and health can be added
    to a server only once, so this call does it for everyone.
    """
    names = [
        register_service(
            server,
            apb.DESCRIPTOR.services_by_name["Admin"],
            AdminService(facade),
            stream_method="Stream",
        ),
        register_service(server, BrokerLifecycleService.DESCRIPTOR, BrokerLifecycleService(facade)),
    ]
    return rpc.add_health_and_reflection(server, [*names, *other_service_names])
