"""Every Admin RPC, declared once: one row holds its name, whether it writes, the
permission it needs, its wire converters both ways (the server decodes the request
and encodes the answer; the client the reverse; the table of recent writes keeps the
encoded answer, so the row's converters are also the exactly-once codec), the
answer for every item at once when a request is refused whole, and what the
controller does: an `Operation` on the metadata (`run` for a write, `query` for a
read), or, for what is about the quorum or this node, a `custom` facade call.

Dispatch (`admin_service`), authorization, the generic write and read paths
(`ControllerApi.write` / `read`), the client (`AdminClient.call`) and the simulation
all work from these rows; registering the service fails if the .proto has a method
the table lacks. Adding an RPC: the proto, one row, the manager method it calls,
the CLI.

The permissions are Kafka's: CreateTopics needs CREATE on the topic or the cluster,
DeleteTopics DELETE, CreatePartitions ALTER, describes DESCRIBE (a listing leaves out
the topics the caller may not describe, as Kafka does), configs ALTER_CONFIGS /
DESCRIBE_CONFIGS (on the topic, or the cluster for broker and cluster configs),
everything that changes the cluster as a whole ALTER on the cluster, the ACL calls
ALTER / DESCRIBE on the cluster. A request naming several resources is refused
whole (PERMISSION_DENIED) if any one is denied: it writes nothing.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import attrs
from google.protobuf import message as pb_message
from google.protobuf import message_factory

from controller.api import acl_convert as acv
from controller.api import admin_pb2 as apb
from controller.api import convert as cv
from controller.api.authorization import (
    Authorize,
    Call,
    nothing_upfront,
    on_cluster,
    on_config_resources,
    on_topics,
    topic_names,
    visible_topics,
)
from controller.api.seam import (
    Args,
    ClusterDescription,
    ControllerFacade,
    OpContext,
    Operation,
    Origin,
    Query,
    ResultCodec,
    Run,
    VoterChangeKind,
)
from controller.metadata import (
    AlterConfigsResult,
    ApiError,
    ControllerResult,
    CreatePartitionsResult,
    CreateTopicResult,
    DeleteTopicResult,
    DescribeConfigsResult,
    ElectLeadersResult,
    ErrorCode,
    FeatureDescription,
    FeatureUpdateResult,
    ReassignmentResult,
    TopicDescription,
)
from controller.metadata.acls import CreateAclResult, DeleteAclsResult, DescribeAclsResult
from controller.security.acl import Operation as AclOperation

# The Raft layer's feature level: 1 = the voter set lives in the log (KIP-853).
KRAFT_VERSION = "kraft.version"


Custom = Callable[[ControllerFacade, Args, Call], Awaitable[Any]]


@attrs.frozen
class AdminRpc:
    name: str
    request_class: type[pb_message.Message]
    write: bool
    # The permission in words (docs, `metakraft acls --help`), and its check.
    needs: str
    authorize: Authorize
    # Wire <-> values: request -> args (server), args -> request (client), answer ->
    # response (server), response (+ the call's args) -> answer (client, a retry).
    decode: Callable[[Any], Args]
    encode_request: Callable[[Args], pb_message.Message]
    encode: Callable[[Any], pb_message.Message]
    decode_answer: Callable[[Any, Args], Any]
    # What the controller does: a write (`run`) or a read (`query`) on the metadata,
    # made the RPC's `op`; or a custom call.
    run: Run | None = None
    query: Query | None = None
    custom: Custom | None = None
    # The answer when the whole request is refused (too many items, too large); None:
    # the RPC has no items (it cannot be over the limit).
    fail_all: Callable[[Args, ApiError], Any] | None = None
    # A listing: what the caller may not see is left out of the answer.
    visible: Callable[[Any, Args, Call], Any] | None = None
    # Writes remembered by request id in the table of recent writes (exactly once).
    remembered: bool = False
    # Answered by the controller called, whatever its role (never "not controller"):
    # a question about that controller itself.
    local: bool = False

    # The Operation the controller runs (None: a custom call), named as the RPC.
    op: Operation | None = attrs.field(init=False, default=None)

    def __attrs_post_init__(self) -> None:
        operation = None
        if self.run is not None or self.query is not None:
            operation = Operation(self.name, run=self.run, query=self.query)
        object.__setattr__(self, "op", operation)
        assert (operation is None) != (self.custom is None), self.name
        assert operation is None or (self.run is not None) == self.write, self.name
        assert not self.remembered or (self.write and operation is not None), self.name

    @property
    def response_class(self) -> type[pb_message.Message]:
        return _response_class(self.name)

    def codec(self, args: Args) -> ResultCodec:
        """The answer of one call as bytes and back: its response message."""
        response_class = self.response_class
        return ResultCodec(lambda answer: self.encode(answer).SerializeToString(),
                           lambda data: self.decode_answer(response_class.FromString(data),
                                                           args))


# ---------------------------------------------------------------- row builders


def _response_class(name: str) -> type[pb_message.Message]:
    """Admin method `name`'s response message class (from the .proto's descriptor)."""
    method = apb.DESCRIPTOR.services_by_name["Admin"].methods_by_name[name]
    response_class: type[pb_message.Message] = message_factory.GetMessageClass(
        method.output_type)
    return response_class


def _per_item(name: str, request_class: type[pb_message.Message], field: str,
              item_from_pb: Callable[[Any], Any], item_to_pb: Callable[[Any], Any],
              result_to_pb: Callable[[Any], Any], result_from_pb: Callable[[Any], Any], *,
              validate_only: bool = False) -> dict[str, Any]:
    """The converters of an RPC whose request lists items (in `field`, maybe with
    `validate_only`) and whose response has one `results` entry per item."""
    def decode(r: Any) -> Args:
        return Args(tuple(item_from_pb(x) for x in getattr(r, field)),
                    validate_only=bool(getattr(r, "validate_only", False)))

    def encode_request(a: Args) -> pb_message.Message:
        extra = {"validate_only": a.validate_only} if validate_only else {}
        return request_class(**{field: [item_to_pb(x) for x in a.items or ()]}, **extra)

    response_class: Any = _response_class(name)

    def encode(results: Sequence[Any]) -> pb_message.Message:
        response: pb_message.Message = response_class(results=[result_to_pb(x) for x in results])
        return response

    def decode_answer(m: Any, _a: Args) -> tuple[Any, ...]:
        return tuple(result_from_pb(x) for x in m.results)

    return {"decode": decode, "encode_request": encode_request, "encode": encode,
            "decode_answer": decode_answer}


def _no_args(request_class: type[pb_message.Message]) -> dict[str, Any]:
    return {"decode": lambda _r: Args(), "encode_request": lambda _a: request_class()}


def _state(call: Callable[[OpContext, Args], ControllerResult[Any]]) -> Run:
    """A write that needs neither the next offset nor the time."""
    return lambda ctx, args, _next, _now: call(ctx, args)


def _alter_configs(ctx: OpContext, args: Args) -> ControllerResult[Any]:
    """The config records, and in the same batch the ELRs a min.insync.replicas change
    drops (`ReplicationControlManager.elr_cleared_by`)."""
    result = ctx.state.configs.incremental_alter_configs(args.items or (),
                                                         validate_only=args.validate_only)
    cleared = ctx.state.replication.elr_cleared_by(result.records)
    return ControllerResult((*result.records, *cleared), result.response) if cleared \
        else result


def _one(args: Args) -> Any:
    """The call's one item."""
    assert args.items is not None and len(args.items) == 1, args
    return args.items[0]


def _each(result: Callable[[Any, ApiError], Any]) -> Callable[[Args, ApiError], Any]:
    """`fail_all` answering every item with the error."""
    return lambda args, error: tuple(result(item, error) for item in args.items or ())


# ---------------------------------------------------------------- the reads with logic


def _describe_cluster(ctx: OpContext, _args: Args, epoch: int) -> ClusterDescription:
    # The active controller as the answering one knows it (a stale read on a standby
    # names the leader it follows; -1 while there is none).
    leader = ctx.active_controller_id()
    return ClusterDescription(ctx.cluster_id, -1 if leader is None else leader,
                              ctx.state.cluster.brokers(epoch))


def _list_reassignments(ctx: OpContext, args: Args, epoch: int) -> tuple[Any, ...]:
    ongoing = ctx.state.replication.list_reassignments(epoch)
    if args.items is None:
        return ongoing
    wanted = {(p.topic, p.partition) for p in args.items}
    return tuple(r for r in ongoing if (r.topic, r.partition) in wanted)


def _describe_features(ctx: OpContext, _args: Args, epoch: int) -> tuple[Any, ...]:
    # The Raft layer's own feature: 1 when the voter set lives in the log (voter
    # changes allowed), 0 for a static quorum. Set when the quorum is formatted.
    return (*ctx.state.features.describe(epoch),
            FeatureDescription(KRAFT_VERSION, int(ctx.quorum_is_dynamic()), 0, 1))


def _update_features(ctx: OpContext, args: Args) -> ControllerResult[Any]:
    items = args.items or ()
    if any(u.name == KRAFT_VERSION for u in items):
        error = ApiError(ErrorCode.UNSUPPORTED_VERSION, (
            f"{KRAFT_VERSION} is chosen when the controllers are formatted: 1 with "
            "--initial-controllers (a dynamic quorum), else 0; a static quorum cannot "
            "be upgraded online"))
        return ControllerResult((), tuple(FeatureUpdateResult(u.name, error) for u in items))
    return ctx.state.features.update_features(items, validate_only=args.validate_only,
                                              controllers=ctx.voter_versions())


def _elect_leaders_args(r: apb.ElectLeadersRequest) -> Args:
    if r.all_partitions and r.partitions:
        raise cv.MalformedRequestError("give either all_partitions or a list of partitions, "
                                       "not both")
    items = None if r.all_partitions else tuple(cv.topic_partition_from_pb(p)
                                                 for p in r.partitions)
    return Args(items, extra=cv.election_type_from_pb(r.election_type))


# ---------------------------------------------------------------- the custom calls


async def _describe_quorum(f: ControllerFacade, _a: Args, c: Call) -> Any:
    return await f.describe_quorum(origin=c.origin)


def _voter_change(kind: VoterChangeKind) -> Custom:
    async def change(f: ControllerFacade, a: Args, c: Call) -> Any:
        node_id, directory_id, endpoint, timeout_ms = a.extra
        return await f.change_raft_voters(kind, node_id, directory_id, endpoint,
                                          validate_only=a.validate_only,
                                          timeout_ms=timeout_ms, origin=c.origin)
    return change


def _voter_rpc(name: str, request_class: Any, kind: VoterChangeKind) -> AdminRpc:
    has_endpoint = kind is not VoterChangeKind.REMOVE

    def decode(r: Any) -> Args:
        return Args(validate_only=r.validate_only,
                    extra=(r.node_id, r.directory_id, r.endpoint if has_endpoint else "",
                           r.timeout_ms))

    def encode_request(a: Args) -> pb_message.Message:
        node_id, directory_id, endpoint, timeout_ms = a.extra
        fields = {"node_id": node_id, "directory_id": directory_id,
                  "validate_only": a.validate_only, "timeout_ms": timeout_ms}
        if has_endpoint:
            fields["endpoint"] = endpoint
        return request_class(**fields)  # type: ignore[no-any-return]

    # Raft-level writes, without the table of recent writes: a client resends one only
    # after a transport failure, and a resent change that went through the first time
    # is refused as such (DUPLICATE_VOTER, VOTER_NOT_FOUND), changing nothing.
    return AdminRpc(name, request_class, True, "ALTER on the cluster",
                    on_cluster(AclOperation.ALTER), decode, encode_request,
                    cv.voter_change_to_pb, lambda m, _a: cv.voter_change_from_pb(m),
                    custom=_voter_change(kind))


async def _transfer_leadership(f: ControllerFacade, a: Args, c: Call) -> Any:
    target_id, timeout_ms = a.extra
    return await f.transfer_leadership(target_id, timeout_ms=timeout_ms, origin=c.origin)


async def _describe_node(f: ControllerFacade, _a: Args, c: Call) -> Any:
    return await f.describe_node(origin=c.origin)


# ---------------------------------------------------------------- the table

_CREATE_ACLS_DECODE = _per_item("CreateAcls", apb.CreateAclsRequest, "creations",
                                acv.binding_from_pb, acv.binding_to_pb,
                                lambda r: cv.error_to_pb(r.error), cv.error_from_pb)
_DELETE_ACLS = _per_item(
    "DeleteAcls", apb.DeleteAclsRequest, "filters", acv.filter_from_pb, acv.filter_to_pb,
    lambda r: apb.DeleteAclsFilterResult(error=cv.error_to_pb(r.error),
                                         deleted=[acv.binding_to_pb(b) for b in r.deleted]),
    lambda m: m)

ADMIN_RPCS: tuple[AdminRpc, ...] = (
    AdminRpc("CreateTopics", apb.CreateTopicsRequest, True,
             "CREATE on each topic, or CREATE on the cluster",
             on_topics(AclOperation.CREATE, topic_names, or_cluster=True),
             **_per_item("CreateTopics", apb.CreateTopicsRequest, "topics",
                         cv.creatable_topic_from_pb, cv.creatable_topic_to_pb,
                         cv.create_topic_result_to_pb, cv.create_topic_result_from_pb,
                         validate_only=True),
             run=_state(lambda ctx, a: ctx.state.replication.create_topics(
                 a.items or (), validate_only=a.validate_only)),
             fail_all=_each(lambda t, e: CreateTopicResult(t.name, e)), remembered=True),
    AdminRpc("DeleteTopics", apb.DeleteTopicsRequest, True, "DELETE on each topic",
             on_topics(AclOperation.DELETE, topic_names),
             **{**_per_item("DeleteTopics", apb.DeleteTopicsRequest, "names", str, str,
                            cv.delete_topic_result_to_pb, cv.delete_topic_result_from_pb),
                "decode": lambda r: Args(tuple(r.names), extra=cv.delete_conditions_from_pb(r)),
                "encode_request": lambda a: apb.DeleteTopicsRequest(
                    names=a.items or (), if_mod_offsets=a.extra or {})},
             run=_state(lambda ctx, a: ctx.state.replication.delete_topics(a.items or (),
                                                                            a.extra)),
             fail_all=_each(DeleteTopicResult), remembered=True),
    AdminRpc("CreatePartitions", apb.CreatePartitionsRequest, True, "ALTER on each topic",
             on_topics(AclOperation.ALTER, topic_names),
             **_per_item("CreatePartitions", apb.CreatePartitionsRequest, "topics",
                         cv.create_partitions_topic_from_pb, cv.create_partitions_topic_to_pb,
                         cv.create_partitions_result_to_pb, cv.create_partitions_result_from_pb,
                         validate_only=True),
             run=_state(lambda ctx, a: ctx.state.replication.create_partitions(
                 a.items or (), validate_only=a.validate_only)),
             fail_all=_each(lambda t, e: CreatePartitionsResult(t.name, e)), remembered=True),
    AdminRpc("ListTopics", apb.ListTopicsRequest, False,
             "DESCRIBE on a topic to see it listed", nothing_upfront,
             **_no_args(apb.ListTopicsRequest),
             encode=lambda found: apb.ListTopicsResponse(
                 topics=[cv.topic_listing_to_pb(t) for t in found]),
             decode_answer=lambda m, _a: tuple(cv.topic_listing_from_pb(t) for t in m.topics),
             query=lambda ctx, _a, epoch: ctx.state.replication.list_topics(epoch),
             fail_all=lambda _a, _e: (),
             visible=lambda found, _a, call: visible_topics(found, call)),
    AdminRpc("DescribeTopics", apb.DescribeTopicsRequest, False,
             "DESCRIBE on each named topic (all topics: the ones the caller may describe)",
             on_topics(AclOperation.DESCRIBE, topic_names),
             # Empty means every topic (documented in admin.proto).
             decode=lambda r: Args(tuple(r.names) or None),
             encode_request=lambda a: apb.DescribeTopicsRequest(names=a.items or ()),
             encode=lambda found: apb.DescribeTopicsResponse(
                 topics=[cv.topic_description_to_pb(d) for d in found]),
             decode_answer=lambda m, _a: tuple(cv.topic_description_from_pb(t)
                                               for t in m.topics),
             query=lambda ctx, a, epoch: ctx.state.replication.describe_topics(a.items, epoch),
             fail_all=_each(TopicDescription),
             visible=lambda found, a, call: found if a.items is not None
             else visible_topics(found, call)),
    AdminRpc("DescribeCluster", apb.DescribeClusterRequest, False, "DESCRIBE on the cluster",
             on_cluster(AclOperation.DESCRIBE), **_no_args(apb.DescribeClusterRequest),
             encode=cv.cluster_to_pb, decode_answer=lambda m, _a: cv.cluster_from_pb(m),
             query=_describe_cluster),
    AdminRpc("IncrementalAlterConfigs", apb.IncrementalAlterConfigsRequest, True,
             "ALTER_CONFIGS on each topic (the cluster for broker and cluster configs)",
             on_config_resources(AclOperation.ALTER_CONFIGS),
             **_per_item("IncrementalAlterConfigs", apb.IncrementalAlterConfigsRequest,
                         "resources", cv.alter_configs_resource_from_pb,
                         cv.alter_configs_resource_to_pb, cv.alter_configs_result_to_pb,
                         cv.alter_configs_result_from_pb, validate_only=True),
             run=_state(_alter_configs),
             fail_all=_each(lambda r, e: AlterConfigsResult(r.resource, e)), remembered=True),
    AdminRpc("DescribeConfigs", apb.DescribeConfigsRequest, False,
             "DESCRIBE_CONFIGS on each topic (the cluster for broker and cluster configs)",
             on_config_resources(AclOperation.DESCRIBE_CONFIGS),
             **_per_item("DescribeConfigs", apb.DescribeConfigsRequest, "resources",
                         cv.config_resource_from_pb, cv.config_resource_to_pb,
                         cv.describe_configs_result_to_pb, cv.describe_configs_result_from_pb),
             query=lambda ctx, a, epoch: ctx.state.configs.describe_configs(a.items or (), epoch),
             fail_all=_each(DescribeConfigsResult)),
    AdminRpc("AlterPartitionReassignments", apb.AlterPartitionReassignmentsRequest, True,
             "ALTER on the cluster", on_cluster(AclOperation.ALTER),
             **_per_item("AlterPartitionReassignments", apb.AlterPartitionReassignmentsRequest,
                         "partitions", cv.reassignment_request_from_pb,
                         cv.reassignment_request_to_pb, cv.reassignment_result_to_pb,
                         cv.reassignment_result_from_pb),
             run=_state(lambda ctx, a: ctx.state.replication.alter_partition_reassignments(
                 a.items or ())),
             fail_all=_each(lambda r, e: ReassignmentResult(r.topic, r.partition, e)),
             remembered=True),
    AdminRpc("ListPartitionReassignments", apb.ListPartitionReassignmentsRequest, False,
             "DESCRIBE on the cluster", on_cluster(AclOperation.DESCRIBE),
             decode=lambda r: Args(tuple(cv.topic_partition_from_pb(p)
                                         for p in r.partitions) or None),
             encode_request=lambda a: apb.ListPartitionReassignmentsRequest(
                 partitions=[cv.topic_partition_to_pb(p) for p in a.items or ()]),
             encode=lambda found: apb.ListPartitionReassignmentsResponse(
                 reassignments=[cv.ongoing_reassignment_to_pb(x) for x in found]),
             decode_answer=lambda m, _a: tuple(cv.ongoing_reassignment_from_pb(r)
                                               for r in m.reassignments),
             query=_list_reassignments,
             fail_all=lambda _a, _e: ()),
    AdminRpc("ElectLeaders", apb.ElectLeadersRequest, True, "ALTER on the cluster",
             on_cluster(AclOperation.ALTER), decode=_elect_leaders_args,
             encode_request=lambda a: apb.ElectLeadersRequest(
                 election_type=cv.election_type_to_pb(a.extra),
                 partitions=[cv.topic_partition_to_pb(p) for p in a.items or ()],
                 all_partitions=a.items is None),
             encode=lambda results: apb.ElectLeadersResponse(
                 results=[cv.elect_leaders_result_to_pb(x) for x in results]),
             decode_answer=lambda m, _a: tuple(cv.elect_leaders_result_from_pb(r)
                                               for r in m.results),
             run=_state(lambda ctx, a: ctx.state.replication.elect_leaders(
                 a.items, a.extra)),
             fail_all=_each(lambda p, e: ElectLeadersResult(p.topic, p.partition, e)),
             remembered=True),
    AdminRpc("UnregisterBroker", apb.UnregisterBrokerRequest, True, "ALTER on the cluster",
             on_cluster(AclOperation.ALTER),
             decode=lambda r: Args((r.broker_id,)),
             encode_request=lambda a: apb.UnregisterBrokerRequest(broker_id=_one(a)),
             encode=lambda error: apb.UnregisterBrokerResponse(error=cv.error_to_pb(error)),
             decode_answer=lambda m, _a: cv.error_from_pb(m.error),
             run=_state(lambda ctx, a: ctx.state.cluster.unregister_broker(_one(a))),
             fail_all=lambda _a, error: error, remembered=True),
    AdminRpc("DescribeQuorum", apb.DescribeQuorumRequest, False, "DESCRIBE on the cluster",
             on_cluster(AclOperation.DESCRIBE), **_no_args(apb.DescribeQuorumRequest),
             encode=cv.quorum_to_pb, decode_answer=lambda m, _a: cv.quorum_from_pb(m),
             custom=_describe_quorum),
    _voter_rpc("AddRaftVoter", apb.AddRaftVoterRequest, VoterChangeKind.ADD),
    _voter_rpc("RemoveRaftVoter", apb.RemoveRaftVoterRequest, VoterChangeKind.REMOVE),
    _voter_rpc("UpdateRaftVoter", apb.UpdateRaftVoterRequest, VoterChangeKind.UPDATE),
    # Not remembered either: a resent transfer whose target already leads succeeds.
    AdminRpc("TransferLeadership", apb.TransferLeadershipRequest, True, "ALTER on the cluster",
             on_cluster(AclOperation.ALTER),
             decode=lambda r: Args(extra=(r.target_id, r.timeout_ms)),
             encode_request=lambda a: apb.TransferLeadershipRequest(target_id=a.extra[0],
                                                                    timeout_ms=a.extra[1]),
             encode=cv.transfer_to_pb, decode_answer=lambda m, _a: cv.transfer_from_pb(m),
             custom=_transfer_leadership),
    AdminRpc("DescribeNode", apb.DescribeNodeRequest, False, "DESCRIBE on the cluster",
             on_cluster(AclOperation.DESCRIBE), **_no_args(apb.DescribeNodeRequest),
             encode=cv.node_to_pb, decode_answer=lambda m, _a: cv.node_from_pb(m),
             custom=_describe_node, local=True),
    AdminRpc("DescribeFeatures", apb.DescribeFeaturesRequest, False, "DESCRIBE on the cluster",
             on_cluster(AclOperation.DESCRIBE), **_no_args(apb.DescribeFeaturesRequest),
             encode=lambda found: apb.DescribeFeaturesResponse(
                 features=[cv.feature_description_to_pb(x) for x in found]),
             decode_answer=lambda m, _a: tuple(cv.feature_description_from_pb(f)
                                               for f in m.features),
             query=_describe_features, fail_all=lambda _a, _e: ()),
    AdminRpc("UpdateFeatures", apb.UpdateFeaturesRequest, True, "ALTER on the cluster",
             on_cluster(AclOperation.ALTER),
             **_per_item("UpdateFeatures", apb.UpdateFeaturesRequest, "updates",
                         cv.feature_update_from_pb, cv.feature_update_to_pb,
                         cv.feature_update_result_to_pb, cv.feature_update_result_from_pb,
                         validate_only=True),
             run=_state(_update_features),
             fail_all=_each(lambda u, e: FeatureUpdateResult(u.name, e)), remembered=True),
    AdminRpc("CreateAcls", apb.CreateAclsRequest, True, "ALTER on the cluster",
             on_cluster(AclOperation.ALTER),
             decode=_CREATE_ACLS_DECODE["decode"],
             encode_request=_CREATE_ACLS_DECODE["encode_request"],
             encode=_CREATE_ACLS_DECODE["encode"],
             # The response carries errors only: each answer's binding is the call's.
             decode_answer=lambda m, a: tuple(
                 CreateAclResult(b, cv.error_from_pb(e))
                 for b, e in zip(a.items or (), m.results, strict=True)),
             run=_state(lambda ctx, a: ctx.state.access.create_acls(
                 a.items or ())),
             fail_all=_each(CreateAclResult), remembered=True),
    AdminRpc("DescribeAcls", apb.DescribeAclsRequest, False, "DESCRIBE on the cluster",
             on_cluster(AclOperation.DESCRIBE),
             decode=lambda r: Args(extra=acv.filter_from_pb(r.filter)),
             encode_request=lambda a: apb.DescribeAclsRequest(filter=acv.filter_to_pb(a.extra)),
             encode=lambda found: apb.DescribeAclsResponse(
                 error=cv.error_to_pb(found.error),
                 bindings=[acv.binding_to_pb(b) for b in found.bindings]),
             decode_answer=lambda m, _a: DescribeAclsResult(
                 cv.error_from_pb(m.error), tuple(acv.binding_from_pb(b) for b in m.bindings)),
             query=lambda ctx, a, epoch: ctx.state.access.describe_acls(a.extra, epoch)),
    AdminRpc("DeleteAcls", apb.DeleteAclsRequest, True, "ALTER on the cluster",
             on_cluster(AclOperation.ALTER),
             decode=_DELETE_ACLS["decode"], encode_request=_DELETE_ACLS["encode_request"],
             encode=_DELETE_ACLS["encode"],
             # Each answer's filter is the call's.
             decode_answer=lambda m, a: tuple(
                 DeleteAclsResult(f, cv.error_from_pb(r.error),
                                  tuple(acv.binding_from_pb(b) for b in r.deleted))
                 for f, r in zip(a.items or (), m.results, strict=True)),
             run=_state(lambda ctx, a: ctx.state.access.delete_acls(
                 a.items or ())),
             fail_all=_each(DeleteAclsResult), remembered=True),
)
ADMIN_RPCS_BY_NAME = {rpc.name: rpc for rpc in ADMIN_RPCS}


def _itemless(rpc: AdminRpc) -> Callable[[Args, ApiError], Any]:
    def fail(args: Args, error: ApiError) -> Any:
        raise AssertionError(f"{rpc.name} has no items, yet was refused whole: {error}")
    return fail


async def run(rpc: AdminRpc, facade: ControllerFacade, args: Args, origin: Origin) -> Any:
    """The answer to one call of an RPC that is an operation on the metadata: the
    facade's one write path or one read path."""
    assert rpc.op is not None, f"{rpc.name} is a custom call"
    fail_all = rpc.fail_all or _itemless(rpc)
    if rpc.write:
        return await facade.write(rpc.op, args, origin=origin, fail_all=fail_all,
                                  codec=rpc.codec(args) if rpc.remembered else None)
    return await facade.read(rpc.op, args, origin=origin, fail_all=fail_all)


async def handle(rpc: AdminRpc, facade: ControllerFacade, request: Any, call: Call
                 ) -> pb_message.Message:
    """One Admin call, after its request decoded: authorize, run, answer."""
    args = rpc.decode(request)
    rpc.authorize(args, call)
    if rpc.custom is not None:
        answer = await rpc.custom(facade, args, call)
    else:
        answer = await run(rpc, facade, args, call.origin)
    if rpc.visible is not None:
        answer = rpc.visible(answer, args, call)
    return rpc.encode(answer)


__all__ = ["ADMIN_RPCS", "ADMIN_RPCS_BY_NAME", "KRAFT_VERSION", "AdminRpc", "Call", "handle",
           "run"]
