"""ACL values: bindings, filters and their rules (Kafka's, so `kafka-acls` users read
them the same way).

A binding says: <principal> from <host> is ALLOWed / DENYed <operation> on resources
of <type> whose name matches <name> by <pattern> (LITERAL: exactly, `*` = every
resource of the type; PREFIXED: every name that starts with it). The enum values
are the ones of the `AccessControlEntryRecord` in the metadata log.
"""

from __future__ import annotations

import enum

import attrs

from controller.security.principal import USER_PREFIX

CLUSTER_RESOURCE_NAME = "metakraft-cluster"
WILDCARD = "*"
MAX_FIELD_CHARS = 255  # principal, host and resource name are each at most this long


class ResourceType(enum.IntEnum):
    ANY = 0  # filters only
    TOPIC = 1
    CLUSTER = 3


class PatternType(enum.IntEnum):
    ANY = 0  # filters only: every pattern type
    LITERAL = 1
    PREFIXED = 2
    MATCH = 3  # filters only: bindings that would apply to the named resource


class Operation(enum.IntEnum):
    ANY = 0  # filters only
    ALL = 1
    READ = 2
    WRITE = 3
    CREATE = 4
    DELETE = 5
    ALTER = 6
    DESCRIBE = 7
    CLUSTER_ACTION = 8
    DESCRIBE_CONFIGS = 9
    ALTER_CONFIGS = 10
    IDEMPOTENT_WRITE = 11


class Permission(enum.IntEnum):
    ANY = 0  # filters only
    DENY = 1
    ALLOW = 2


# The operations each resource type has (Kafka's tables, for the types we serve).
OPERATIONS_BY_TYPE: dict[ResourceType, frozenset[Operation]] = {
    ResourceType.TOPIC: frozenset({Operation.ALL, Operation.READ, Operation.WRITE,
                                   Operation.CREATE, Operation.DELETE, Operation.ALTER,
                                   Operation.DESCRIBE, Operation.DESCRIBE_CONFIGS,
                                   Operation.ALTER_CONFIGS}),
    ResourceType.CLUSTER: frozenset({Operation.ALL, Operation.CREATE, Operation.ALTER,
                                     Operation.DESCRIBE, Operation.CLUSTER_ACTION,
                                     Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS,
                                     Operation.IDEMPOTENT_WRITE}),
}

# An ALLOW for any of these also allows the key (Kafka: READ, WRITE, DELETE or ALTER
# imply DESCRIBE; ALTER_CONFIGS implies DESCRIBE_CONFIGS). DENY implies nothing.
IMPLIED_BY: dict[Operation, frozenset[Operation]] = {
    Operation.DESCRIBE: frozenset({Operation.READ, Operation.WRITE, Operation.DELETE,
                                   Operation.ALTER}),
    Operation.DESCRIBE_CONFIGS: frozenset({Operation.ALTER_CONFIGS}),
}


class InvalidAclError(ValueError):
    """A binding or filter that breaks a rule; the message says which."""


@attrs.frozen
class AclBinding:
    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: Operation
    permission: Permission

    def validate(self) -> None:
        """Raise InvalidAclError unless this binding may be stored."""
        if self.resource_type not in OPERATIONS_BY_TYPE:
            raise InvalidAclError(f"resource type {self.resource_type.name} cannot carry ACLs "
                                  "(TOPIC or CLUSTER)")
        if self.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
            raise InvalidAclError(f"pattern type {self.pattern_type.name} is for filters; a "
                                  "binding is LITERAL or PREFIXED")
        _check_text("resource name", self.resource_name)
        if self.pattern_type is PatternType.PREFIXED and self.resource_name == WILDCARD:
            raise InvalidAclError("a PREFIXED binding cannot use the name '*' (use LITERAL '*' "
                                  "for every resource)")
        if (self.resource_type is ResourceType.CLUSTER
                and (self.resource_name != CLUSTER_RESOURCE_NAME
                     or self.pattern_type is not PatternType.LITERAL)):
            raise InvalidAclError(f"the CLUSTER resource is named {CLUSTER_RESOURCE_NAME!r} "
                                  "and is matched LITERAL")
        check_principal(self.principal)
        _check_text("host", self.host)
        if self.operation not in OPERATIONS_BY_TYPE[self.resource_type]:
            allowed = ", ".join(sorted(op.name for op in OPERATIONS_BY_TYPE[self.resource_type]))
            raise InvalidAclError(f"operation {self.operation.name} does not apply to "
                                  f"{self.resource_type.name} (one of: {allowed})")
        if self.permission not in (Permission.ALLOW, Permission.DENY):
            raise InvalidAclError("permission must be ALLOW or DENY")

    def describe(self) -> str:
        return (f"{self.permission.name} {self.principal} from {self.host} "
                f"{self.operation.name} on {self.resource_type.name}:"
                f"{self.pattern_type.name}:{self.resource_name}")


def check_principal(principal: str) -> None:
    _check_text("principal", principal)
    if not principal.startswith(USER_PREFIX) or principal == USER_PREFIX:
        raise InvalidAclError(f"principal {principal!r} must be User:<name> (User:* for "
                              "everyone)")


def _check_text(what: str, text: str) -> None:
    if not text:
        raise InvalidAclError(f"the {what} must not be empty")
    if len(text) > MAX_FIELD_CHARS:
        raise InvalidAclError(f"the {what} is longer than {MAX_FIELD_CHARS} characters")
    if not text.isprintable():
        raise InvalidAclError(f"the {what} {text!r} holds unprintable characters")


@attrs.frozen
class AclFilter:
    """Which bindings to list or delete; None / ANY fields match everything.

    `pattern_type` MATCH with a resource name selects the bindings that would apply to
    that resource: its LITERAL name, the LITERAL `*`, and every PREFIXED prefix of it.
    """

    resource_type: ResourceType = ResourceType.ANY
    resource_name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: Operation = Operation.ANY
    permission: Permission = Permission.ANY

    def validate(self) -> None:
        if self.pattern_type is PatternType.MATCH and self.resource_name is None:
            raise InvalidAclError("a MATCH filter needs a resource name")
        for what, text in (("resource name", self.resource_name),
                           ("principal", self.principal), ("host", self.host)):
            if text is not None and len(text) > MAX_FIELD_CHARS:
                raise InvalidAclError(f"the filter's {what} is longer than {MAX_FIELD_CHARS} "
                                      "characters")

    def matches(self, binding: AclBinding) -> bool:
        if self.resource_type is not ResourceType.ANY \
                and binding.resource_type is not self.resource_type:
            return False
        if not self._matches_pattern(binding):
            return False
        return ((self.principal is None or binding.principal == self.principal)
                and (self.host is None or binding.host == self.host)
                and (self.operation is Operation.ANY or binding.operation is self.operation)
                and (self.permission is Permission.ANY or binding.permission is self.permission))

    def _matches_pattern(self, binding: AclBinding) -> bool:
        name = self.resource_name
        if self.pattern_type is PatternType.MATCH:
            assert name is not None
            if binding.pattern_type is PatternType.LITERAL:
                return binding.resource_name in (name, WILDCARD)
            return name.startswith(binding.resource_name)
        if self.pattern_type is not PatternType.ANY and binding.pattern_type is not self.pattern_type:
            return False
        return name is None or binding.resource_name == name
