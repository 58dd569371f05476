"""ACL bindings and filters between the Admin API's messages and the ACL values
(`controller.security.acl`). The wire enums have the same numbers as the values."""

from __future__ import annotations

from typing import TypeVar

from controller.api import admin_pb2 as apb
from controller.api.convert import MalformedRequestError
from controller.security.acl import (
    AclBinding,
    AclFilter,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)

E = TypeVar("E", ResourceType, PatternType, Operation, Permission)


def _enum(kind: type[E], value: int, what: str) -> E:
    try:
        return kind(value)
    except ValueError:
        raise MalformedRequestError(f"unknown {what} {value}") from None


def binding_to_pb(binding: AclBinding) -> apb.AclBinding:
    return apb.AclBinding(
        resource_type=binding.resource_type.value,  # type: ignore[arg-type]
        resource_name=binding.resource_name,
        pattern_type=binding.pattern_type.value,  # type: ignore[arg-type]
        principal=binding.principal, host=binding.host,
        operation=binding.operation.value,  # type: ignore[arg-type]
        permission=binding.permission.value)  # type: ignore[arg-type]


def binding_from_pb(msg: apb.AclBinding) -> AclBinding:
    """Unknown enum values are malformed; the binding's rules are checked by the
    manager (per item), so a bad binding fails alone."""
    return AclBinding(
        _enum(ResourceType, msg.resource_type, "ACL resource type"), msg.resource_name,
        _enum(PatternType, msg.pattern_type, "ACL pattern type"), msg.principal, msg.host,
        _enum(Operation, msg.operation, "ACL operation"),
        _enum(Permission, msg.permission, "ACL permission"))


def filter_to_pb(acl_filter: AclFilter) -> apb.AclFilter:
    msg = apb.AclFilter(
        resource_type=acl_filter.resource_type.value,  # type: ignore[arg-type]
        pattern_type=acl_filter.pattern_type.value,  # type: ignore[arg-type]
        operation=acl_filter.operation.value,  # type: ignore[arg-type]
        permission=acl_filter.permission.value)  # type: ignore[arg-type]
    if acl_filter.resource_name is not None:
        msg.resource_name = acl_filter.resource_name
    if acl_filter.principal is not None:
        msg.principal = acl_filter.principal
    if acl_filter.host is not None:
        msg.host = acl_filter.host
    return msg


def filter_from_pb(msg: apb.AclFilter) -> AclFilter:
    return AclFilter(
        _enum(ResourceType, msg.resource_type, "ACL resource type"),
        msg.resource_name if msg.HasField("resource_name") else None,
        _enum(PatternType, msg.pattern_type, "ACL pattern type"),
        msg.principal if msg.HasField("principal") else None,
        msg.host if msg.HasField("host") else None,
        _enum(Operation, msg.operation, "ACL operation"),
        _enum(Permission, msg.permission, "ACL permission"))
