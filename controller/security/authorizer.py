"""The authorizer: may this principal, from this host, do this operation on this
resource? Kafka's StandardAuthorizer semantics:

1. a super user may do anything;
2. the ACLs that apply to the resource are its LITERAL name, the LITERAL `*`, and every
   PREFIXED prefix of its name; of those, the ones for the principal (or `User:*`) and
   the host (or `*`) count;
3. a DENY for the operation (or ALL) wins over any ALLOW;
4. an ALLOW for the operation, for ALL, or for an operation that implies it
   (READ/WRITE/DELETE/ALTER imply DESCRIBE, ALTER_CONFIGS implies DESCRIBE_CONFIGS)
   allows it;
5. otherwise denied, unless no ACL at all applies to the resource and
   `allow_everyone_if_no_acl_found` is set.

Pure: the ACLs come from an `AclSource` (the committed metadata state) and the index
over them is rebuilt only when its version changes, so a check is a few dict lookups
whatever the number of ACLs.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Protocol

import attrs

from controller.security.acl import (
    IMPLIED_BY,
    WILDCARD,
    AclBinding,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)

EVERYONE = "User:*"


@attrs.frozen
class Action:
    operation: Operation
    resource_type: ResourceType
    resource_name: str

    def describe(self) -> str:
        return f"{self.operation.name} on {self.resource_type.name} {self.resource_name!r}"


@attrs.frozen
class AuthorizerConfig:
    super_users: frozenset[str] = frozenset()
    allow_everyone_if_no_acl_found: bool = False


class AclSource(Protocol):
    """The committed ACLs: a version that changes whenever they do, and the bindings."""

    def acl_version(self) -> int: ...

    def acl_bindings(self) -> Iterable[AclBinding]: ...


class _TypeIndex:
    """The bindings of one resource type, by literal name and by prefix."""

    def __init__(self) -> None:
        self.literal: dict[str, list[AclBinding]] = defaultdict(list)
        self.prefixed: dict[str, list[AclBinding]] = defaultdict(list)
        self.prefix_lengths: list[int] = []

    def add(self, binding: AclBinding) -> None:
        if binding.pattern_type is PatternType.LITERAL:
            self.literal[binding.resource_name].append(binding)
        else:
            self.prefixed[binding.resource_name].append(binding)

    def seal(self) -> None:
        # Only the prefix lengths that exist are tried: with 10,000 prefixed ACLs of a
        # few dozen lengths, a check is a few dozen dict lookups, not one per character.
        self.prefix_lengths = sorted({len(name) for name in self.prefixed})

    def applicable(self, name: str) -> list[AclBinding]:
        found: list[AclBinding] = []
        for key in (name, WILDCARD):
            entries = self.literal.get(key)
            if entries:
                found += entries
        for length in self.prefix_lengths:
            if length > len(name):
                break
            entries = self.prefixed.get(name[:length])
            if entries:
                found += entries
        return found


class AclIndex:
    def __init__(self, bindings: Iterable[AclBinding]) -> None:
        self._by_type: dict[ResourceType, _TypeIndex] = defaultdict(_TypeIndex)
        count = 0
        for binding in bindings:
            self._by_type[binding.resource_type].add(binding)
            count += 1
        for index in self._by_type.values():
            index.seal()
        self.size = count

    def applicable(self, resource_type: ResourceType, name: str) -> list[AclBinding]:
        index = self._by_type.get(resource_type)
        return [] if index is None else index.applicable(name)


class StandardAuthorizer:
    def __init__(self, config: AuthorizerConfig, source: AclSource) -> None:
        self.config = config
        self._source = source
        self._version = -1
        self._index = AclIndex(())

    def index(self) -> AclIndex:
        version = self._source.acl_version()
        if version != self._version:
            self._index = AclIndex(self._source.acl_bindings())
            self._version = version
        return self._index

    def authorize(self, principal: str, host: str, action: Action) -> bool:
        if principal in self.config.super_users:
            return True
        applicable = self.index().applicable(action.resource_type, action.resource_name)
        if not applicable:
            return self.config.allow_everyone_if_no_acl_found
        operation = action.operation
        implied_by = IMPLIED_BY.get(operation, frozenset())
        allowed = False
        for binding in applicable:
            if binding.principal not in (principal, EVERYONE) \
                    or binding.host not in (host, WILDCARD):
                continue
            if binding.permission is Permission.DENY:
                if binding.operation in (operation, Operation.ALL):
                    return False
            elif (binding.operation in (operation, Operation.ALL)
                  or binding.operation in implied_by):
                allowed = True
        return allowed
