"""Every Admin RPC, declared once: its name, whether it writes, the permission it
needs, and its handler. Dispatch (`admin_service`), authorization and the client's
retry policy (`client.AdminClient`) are derived from this table, and registering the
service fails if the .proto has a method the table lacks, so no RPC can exist
without its authorization rule.

The permissions are Kafka's: CreateTopics needs CREATE on the topic or the cluster,
DeleteTopics DELETE, CreatePartitions ALTER, describes DESCRIBE (a listing leaves out
the topics the caller may not describe, as Kafka does), configs ALTER_CONFIGS /
DESCRIBE_CONFIGS (on the topic, or the cluster for broker and cluster configs),
everything that changes the cluster as a whole ALTER on the cluster, the ACL calls
ALTER / DESCRIBE on the cluster. A request naming several resources is refused
whole (PERMISSION_DENIED) if any one is denied: it writes nothing.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import attrs
from google.protobuf import message as pb_message

from controller.api import acl_convert as acv
from controller.api import admin_pb2 as apb
from controller.api import convert as cv
from controller.api.seam import ControllerFacade, Origin, VoterChangeKind
from controller.metadata.config_schema import ResourceType as ConfigResourceType
from controller.security.access import Access, Caller, cluster_action, topic_action
from controller.security.acl import Operation
from controller.security.authorizer import Action


@attrs.frozen
class Call:
    """One request's caller, the gate, and the origin its records will carry."""

    caller: Caller
    access: Access
    origin: Origin

    def require(self, actions: Iterable[Action]) -> None:
        for action in actions:
            self.access.require(self.caller, action)

    def may(self, action: Action) -> bool:
        return self.access.allowed(self.caller, action)


Handler = Callable[[ControllerFacade, Any, Call], Awaitable[pb_message.Message]]
Authorize = Callable[[Any, Call], None]


@attrs.frozen
class AdminRpc:
    name: str
    request_class: type[pb_message.Message]
    write: bool
    # The permission in words (docs, `metakraft acls --help`).
    needs: str
    authorize: Authorize
    handle: Handler
    # Answered by the controller called, whatever its role (never "not controller"):
    # a question about that controller itself.
    local: bool = False


# ---------------------------------------------------------------- authorization rules


def on_cluster(operation: Operation) -> Authorize:
    def check(_request: Any, call: Call) -> None:
        call.require([cluster_action(operation)])
    return check


def on_topics(operation: Operation, names: Callable[[Any], Iterable[str]], *,
              or_cluster: bool = False) -> Authorize:
    """`operation` on every named topic (or, if `or_cluster`, on the cluster)."""
    def check(request: Any, call: Call) -> None:
        if or_cluster and call.may(cluster_action(operation)):
            return
        call.require(topic_action(operation, name) for name in dict.fromkeys(names(request)))
    return check


def on_config_resources(operation: Operation) -> Authorize:
    """Topic configs need `operation` on the topic; broker and cluster configs on the
    cluster."""
    def check(request: Any, call: Call) -> None:
        actions: list[Action] = []
        for resource in request.resources:
            item = cv.config_resource_from_pb(getattr(resource, "resource", resource))
            actions.append(topic_action(operation, item.name)
                           if item.type is ConfigResourceType.TOPIC
                           else cluster_action(operation))
        call.require(dict.fromkeys(actions))
    return check


def _nothing_upfront(_request: Any, _call: Call) -> None:
    """A listing: what the caller may not see is left out by the handler."""


# ---------------------------------------------------------------- handlers


async def _create_topics(f: ControllerFacade, r: apb.CreateTopicsRequest, c: Call
                         ) -> apb.CreateTopicsResponse:
    results = await f.create_topics([cv.creatable_topic_from_pb(t) for t in r.topics],
                                    validate_only=r.validate_only, origin=c.origin)
    return apb.CreateTopicsResponse(results=[cv.create_topic_result_to_pb(x) for x in results])


async def _delete_topics(f: ControllerFacade, r: apb.DeleteTopicsRequest, c: Call
                         ) -> apb.DeleteTopicsResponse:
    results = await f.delete_topics(list(r.names), origin=c.origin)
    return apb.DeleteTopicsResponse(results=[cv.delete_topic_result_to_pb(x) for x in results])


async def _create_partitions(f: ControllerFacade, r: apb.CreatePartitionsRequest, c: Call
                             ) -> apb.CreatePartitionsResponse:
    results = await f.create_partitions(
        [cv.create_partitions_topic_from_pb(t) for t in r.topics],
        validate_only=r.validate_only, origin=c.origin)
    return apb.CreatePartitionsResponse(
        results=[cv.create_partitions_result_to_pb(x) for x in results])


async def _list_topics(f: ControllerFacade, _r: apb.ListTopicsRequest, c: Call
                       ) -> apb.ListTopicsResponse:
    topics = await f.list_topics(origin=c.origin)
    return apb.ListTopicsResponse(topics=[
        cv.topic_listing_to_pb(t) for t in topics
        if c.may(topic_action(Operation.DESCRIBE, t.name))])


async def _describe_topics(f: ControllerFacade, r: apb.DescribeTopicsRequest, c: Call
                           ) -> apb.DescribeTopicsResponse:
    # Empty means every topic (documented in admin.proto): the ones the caller may see.
    names = list(r.names) or None
    found = await f.describe_topics(names, origin=c.origin)
    if names is None:
        found = tuple(d for d in found if c.may(topic_action(Operation.DESCRIBE, d.name)))
    return apb.DescribeTopicsResponse(topics=[cv.topic_description_to_pb(d) for d in found])


async def _describe_cluster(f: ControllerFacade, _r: apb.DescribeClusterRequest, c: Call
                            ) -> apb.DescribeClusterResponse:
    return cv.cluster_to_pb(await f.describe_cluster(origin=c.origin))


async def _alter_configs(f: ControllerFacade, r: apb.IncrementalAlterConfigsRequest, c: Call
                         ) -> apb.IncrementalAlterConfigsResponse:
    results = await f.incremental_alter_configs(
        [cv.alter_configs_resource_from_pb(x) for x in r.resources],
        validate_only=r.validate_only, origin=c.origin)
    return apb.IncrementalAlterConfigsResponse(
        results=[cv.alter_configs_result_to_pb(x) for x in results])


async def _describe_configs(f: ControllerFacade, r: apb.DescribeConfigsRequest, c: Call
                            ) -> apb.DescribeConfigsResponse:
    results = await f.describe_configs([cv.config_resource_from_pb(x) for x in r.resources],
                                       origin=c.origin)
    return apb.DescribeConfigsResponse(
        results=[cv.describe_configs_result_to_pb(x) for x in results])


async def _alter_reassignments(f: ControllerFacade, r: apb.AlterPartitionReassignmentsRequest,
                               c: Call) -> apb.AlterPartitionReassignmentsResponse:
    results = await f.alter_partition_reassignments(
        [cv.reassignment_request_from_pb(p) for p in r.partitions], origin=c.origin)
    return apb.AlterPartitionReassignmentsResponse(
        results=[cv.reassignment_result_to_pb(x) for x in results])


async def _list_reassignments(f: ControllerFacade, r: apb.ListPartitionReassignmentsRequest,
                              c: Call) -> apb.ListPartitionReassignmentsResponse:
    wanted = [cv.topic_partition_from_pb(p) for p in r.partitions] or None
    found = await f.list_partition_reassignments(wanted, origin=c.origin)
    return apb.ListPartitionReassignmentsResponse(
        reassignments=[cv.ongoing_reassignment_to_pb(x) for x in found])


async def _elect_leaders(f: ControllerFacade, r: apb.ElectLeadersRequest, c: Call
                         ) -> apb.ElectLeadersResponse:
    kind = cv.election_type_from_pb(r.election_type)
    if r.all_partitions and r.partitions:
        raise cv.MalformedRequestError("give either all_partitions or a list of partitions, "
                                       "not both")
    partitions = None if r.all_partitions else [cv.topic_partition_from_pb(p)
                                                 for p in r.partitions]
    results = await f.elect_leaders(partitions, kind, origin=c.origin)
    return apb.ElectLeadersResponse(results=[cv.elect_leaders_result_to_pb(x) for x in results])


async def _unregister_broker(f: ControllerFacade, r: apb.UnregisterBrokerRequest, c: Call
                             ) -> apb.UnregisterBrokerResponse:
    error = await f.unregister_broker(r.broker_id, origin=c.origin)
    return apb.UnregisterBrokerResponse(error=cv.error_to_pb(error))


async def _describe_quorum(f: ControllerFacade, _r: apb.DescribeQuorumRequest, c: Call
                           ) -> apb.DescribeQuorumResponse:
    return cv.quorum_to_pb(await f.describe_quorum(origin=c.origin))


async def _change_voters(kind: VoterChangeKind, f: ControllerFacade, r: Any, c: Call
                         ) -> apb.RaftVoterChangeResponse:
    endpoint = getattr(r, "endpoint", "")
    outcome = await f.change_raft_voters(kind, r.node_id, r.directory_id, endpoint,
                                         validate_only=r.validate_only,
                                         timeout_ms=r.timeout_ms, origin=c.origin)
    return cv.voter_change_to_pb(outcome)


async def _transfer_leadership(f: ControllerFacade, r: apb.TransferLeadershipRequest, c: Call
                               ) -> apb.TransferLeadershipResponse:
    outcome = await f.transfer_leadership(r.target_id, timeout_ms=r.timeout_ms, origin=c.origin)
    return cv.transfer_to_pb(outcome)


async def _describe_node(f: ControllerFacade, _r: apb.DescribeNodeRequest, c: Call
                         ) -> apb.DescribeNodeResponse:
    return cv.node_to_pb(await f.describe_node(origin=c.origin))


async def _describe_features(f: ControllerFacade, _r: apb.DescribeFeaturesRequest, c: Call
                             ) -> apb.DescribeFeaturesResponse:
    found = await f.describe_features(origin=c.origin)
    return apb.DescribeFeaturesResponse(features=[cv.feature_description_to_pb(x)
                                                  for x in found])


async def _update_features(f: ControllerFacade, r: apb.UpdateFeaturesRequest, c: Call
                           ) -> apb.UpdateFeaturesResponse:
    results = await f.update_features([cv.feature_update_from_pb(u) for u in r.updates],
                                      validate_only=r.validate_only, origin=c.origin)
    return apb.UpdateFeaturesResponse(results=[cv.feature_update_result_to_pb(x)
                                               for x in results])


async def _create_acls(f: ControllerFacade, r: apb.CreateAclsRequest, c: Call
                       ) -> apb.CreateAclsResponse:
    results = await f.create_acls([acv.binding_from_pb(b) for b in r.creations],
                                  origin=c.origin)
    return apb.CreateAclsResponse(results=[cv.error_to_pb(x.error) for x in results])


async def _describe_acls(f: ControllerFacade, r: apb.DescribeAclsRequest, c: Call
                         ) -> apb.DescribeAclsResponse:
    found = await f.describe_acls(acv.filter_from_pb(r.filter), origin=c.origin)
    return apb.DescribeAclsResponse(error=cv.error_to_pb(found.error),
                                    bindings=[acv.binding_to_pb(b) for b in found.bindings])


async def _delete_acls(f: ControllerFacade, r: apb.DeleteAclsRequest, c: Call
                       ) -> apb.DeleteAclsResponse:
    results = await f.delete_acls([acv.filter_from_pb(x) for x in r.filters], origin=c.origin)
    return apb.DeleteAclsResponse(results=[
        apb.DeleteAclsFilterResult(error=cv.error_to_pb(x.error),
                                   deleted=[acv.binding_to_pb(b) for b in x.deleted])
        for x in results])


def _topic_names(request: Any) -> Iterable[str]:
    items = getattr(request, "topics", None)
    if items is not None:
        return (t.name for t in items)
    return request.names  # type: ignore[no-any-return]


ADMIN_RPCS: tuple[AdminRpc, ...] = (
    AdminRpc("CreateTopics", apb.CreateTopicsRequest, True,
             "CREATE on each topic, or CREATE on the cluster",
             on_topics(Operation.CREATE, _topic_names, or_cluster=True), _create_topics),
    AdminRpc("DeleteTopics", apb.DeleteTopicsRequest, True, "DELETE on each topic",
             on_topics(Operation.DELETE, _topic_names), _delete_topics),
    AdminRpc("CreatePartitions", apb.CreatePartitionsRequest, True, "ALTER on each topic",
             on_topics(Operation.ALTER, _topic_names), _create_partitions),
    AdminRpc("ListTopics", apb.ListTopicsRequest, False,
             "DESCRIBE on a topic to see it listed", _nothing_upfront, _list_topics),
    AdminRpc("DescribeTopics", apb.DescribeTopicsRequest, False,
             "DESCRIBE on each named topic (all topics: the ones the caller may describe)",
             on_topics(Operation.DESCRIBE, lambda r: r.names), _describe_topics),
    AdminRpc("DescribeCluster", apb.DescribeClusterRequest, False, "DESCRIBE on the cluster",
             on_cluster(Operation.DESCRIBE), _describe_cluster),
    AdminRpc("IncrementalAlterConfigs", apb.IncrementalAlterConfigsRequest, True,
             "ALTER_CONFIGS on each topic (the cluster for broker and cluster configs)",
             on_config_resources(Operation.ALTER_CONFIGS), _alter_configs),
    AdminRpc("DescribeConfigs", apb.DescribeConfigsRequest, False,
             "DESCRIBE_CONFIGS on each topic (the cluster for broker and cluster configs)",
             on_config_resources(Operation.DESCRIBE_CONFIGS), _describe_configs),
    AdminRpc("AlterPartitionReassignments", apb.AlterPartitionReassignmentsRequest, True,
             "ALTER on the cluster", on_cluster(Operation.ALTER), _alter_reassignments),
    AdminRpc("ListPartitionReassignments", apb.ListPartitionReassignmentsRequest, False,
             "DESCRIBE on the cluster", on_cluster(Operation.DESCRIBE), _list_reassignments),
    AdminRpc("ElectLeaders", apb.ElectLeadersRequest, True, "ALTER on the cluster",
             on_cluster(Operation.ALTER), _elect_leaders),
    AdminRpc("UnregisterBroker", apb.UnregisterBrokerRequest, True, "ALTER on the cluster",
             on_cluster(Operation.ALTER), _unregister_broker),
    AdminRpc("DescribeQuorum", apb.DescribeQuorumRequest, False, "DESCRIBE on the cluster",
             on_cluster(Operation.DESCRIBE), _describe_quorum),
    # Raft-level writes, without the table of recent writes: a client resends one only
    # after a transport failure, and a resent change that went through the first time
    # is refused as such (DUPLICATE_VOTER, VOTER_NOT_FOUND), changing nothing.
    AdminRpc("AddRaftVoter", apb.AddRaftVoterRequest, True, "ALTER on the cluster",
             on_cluster(Operation.ALTER), functools.partial(_change_voters, VoterChangeKind.ADD)),
    AdminRpc("RemoveRaftVoter", apb.RemoveRaftVoterRequest, True, "ALTER on the cluster",
             on_cluster(Operation.ALTER),
             functools.partial(_change_voters, VoterChangeKind.REMOVE)),
    AdminRpc("UpdateRaftVoter", apb.UpdateRaftVoterRequest, True, "ALTER on the cluster",
             on_cluster(Operation.ALTER),
             functools.partial(_change_voters, VoterChangeKind.UPDATE)),
    # Not remembered either: a resent transfer whose target already leads succeeds.
    AdminRpc("TransferLeadership", apb.TransferLeadershipRequest, True, "ALTER on the cluster",
             on_cluster(Operation.ALTER), _transfer_leadership),
    AdminRpc("DescribeNode", apb.DescribeNodeRequest, False, "DESCRIBE on the cluster",
             on_cluster(Operation.DESCRIBE), _describe_node, local=True),
    AdminRpc("DescribeFeatures", apb.DescribeFeaturesRequest, False, "DESCRIBE on the cluster",
             on_cluster(Operation.DESCRIBE), _describe_features),
    AdminRpc("UpdateFeatures", apb.UpdateFeaturesRequest, True, "ALTER on the cluster",
             on_cluster(Operation.ALTER), _update_features),
    AdminRpc("CreateAcls", apb.CreateAclsRequest, True, "ALTER on the cluster",
             on_cluster(Operation.ALTER), _create_acls),
    AdminRpc("DescribeAcls", apb.DescribeAclsRequest, False, "DESCRIBE on the cluster",
             on_cluster(Operation.DESCRIBE), _describe_acls),
    AdminRpc("DeleteAcls", apb.DeleteAclsRequest, True, "ALTER on the cluster",
             on_cluster(Operation.ALTER), _delete_acls),
)
ADMIN_RPCS_BY_NAME = {rpc.name: rpc for rpc in ADMIN_RPCS}
