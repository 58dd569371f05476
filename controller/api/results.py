"""Admin write answers as bytes, for the replicated table of recent writes.

A retried write (same principal and request id) is answered from that table
(`controller.metadata.requests`), possibly by another controller after a failover,
so the answer is kept encoded: as the Admin API's own response message for the
method, which is what the caller would have received. `codec_for` gives the codec
of one call; the items of the call fill in what the response message does not carry
(the ACL binding or filter of each result), the same items a retry repeats.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import attrs
from google.protobuf import message as pb_message

from controller.api import acl_convert as acv
from controller.api import admin_pb2 as apb
from controller.api import convert as cv
from controller.metadata import ApiError
from controller.metadata.acls import CreateAclResult, DeleteAclsResult
from controller.security.acl import AclBinding, AclFilter


@attrs.frozen
class ResultCodec:
    encode: Callable[[Any], bytes]
    decode: Callable[[bytes], Any]


def _items(response_class: type[pb_message.Message], to_pb: Callable[[Any], Any],
           from_pb: Callable[[Any], Any]) -> ResultCodec:
    """A response message whose `results` are one per item."""
    def encode(results: Sequence[Any]) -> bytes:
        return response_class(results=[to_pb(r) for r in results]).SerializeToString()

    def decode(data: bytes) -> tuple[Any, ...]:
        message: Any = response_class.FromString(data)
        return tuple(from_pb(r) for r in message.results)

    return ResultCodec(encode, decode)


def _unregister() -> ResultCodec:
    def encode(error: ApiError) -> bytes:
        return apb.UnregisterBrokerResponse(error=cv.error_to_pb(error)).SerializeToString()

    def decode(data: bytes) -> ApiError:
        return cv.error_from_pb(apb.UnregisterBrokerResponse.FromString(data).error)

    return ResultCodec(encode, decode)


def _create_acls(bindings: Sequence[AclBinding]) -> ResultCodec:
    def encode(results: Sequence[CreateAclResult]) -> bytes:
        return apb.CreateAclsResponse(
            results=[cv.error_to_pb(r.error) for r in results]).SerializeToString()

    def decode(data: bytes) -> tuple[CreateAclResult, ...]:
        errors = apb.CreateAclsResponse.FromString(data).results
        return tuple(CreateAclResult(b, cv.error_from_pb(e)) for b, e in zip(bindings, errors,
                                                                             strict=True))

    return ResultCodec(encode, decode)


def _delete_acls(filters: Sequence[AclFilter]) -> ResultCodec:
    def encode(results: Sequence[DeleteAclsResult]) -> bytes:
        return apb.DeleteAclsResponse(results=[
            apb.DeleteAclsFilterResult(error=cv.error_to_pb(r.error),
                                       deleted=[acv.binding_to_pb(b) for b in r.deleted])
            for r in results]).SerializeToString()

    def decode(data: bytes) -> tuple[DeleteAclsResult, ...]:
        results = apb.DeleteAclsResponse.FromString(data).results
        return tuple(DeleteAclsResult(f, cv.error_from_pb(r.error),
                                      tuple(acv.binding_from_pb(b) for b in r.deleted))
                     for f, r in zip(filters, results, strict=True))

    return ResultCodec(encode, decode)


_FIXED: dict[str, ResultCodec] = {
    "create_topics": _items(apb.CreateTopicsResponse, cv.create_topic_result_to_pb,
                            cv.create_topic_result_from_pb),
    "delete_topics": _items(apb.DeleteTopicsResponse, cv.delete_topic_result_to_pb,
                            cv.delete_topic_result_from_pb),
    "create_partitions": _items(apb.CreatePartitionsResponse, cv.create_partitions_result_to_pb,
                                cv.create_partitions_result_from_pb),
    "incremental_alter_configs": _items(apb.IncrementalAlterConfigsResponse,
                                        cv.alter_configs_result_to_pb,
                                        cv.alter_configs_result_from_pb),
    "alter_partition_reassignments": _items(apb.AlterPartitionReassignmentsResponse,
                                            cv.reassignment_result_to_pb,
                                            cv.reassignment_result_from_pb),
    "elect_leaders": _items(apb.ElectLeadersResponse, cv.elect_leaders_result_to_pb,
                            cv.elect_leaders_result_from_pb),
    "update_features": _items(apb.UpdateFeaturesResponse, cv.feature_update_result_to_pb,
                              cv.feature_update_result_from_pb),
    "unregister_broker": _unregister(),
}

# Every admin write the table remembers (the facade's write methods).
REMEMBERED_WRITES = frozenset({*_FIXED, "create_acls", "delete_acls"})


def codec_for(method: str, items: Sequence[Any] = ()) -> ResultCodec:
    """The codec of one call of `method` (`items`: the call's ACL bindings or filters)."""
    if method == "create_acls":
        return _create_acls(items)
    if method == "delete_acls":
        return _delete_acls(items)
    return _FIXED[method]
