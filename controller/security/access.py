"""Who is calling and what they may do: the one gate every RPC passes.

`Access` turns a gRPC context into a `Caller` (the principal from the verified
client certificate, `User:ANONYMOUS` on a plaintext listener, the client host) and
answers "may this caller do this action?" with the authorizer, or "yes" when no
authorizer is configured. A denial is `PermissionDeniedError`, which the handlers
answer PERMISSION_DENIED naming the operation and the resource; nothing is written.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

import attrs

from controller.security.acl import CLUSTER_RESOURCE_NAME, Operation, ResourceType
from controller.security.authorizer import Action, StandardAuthorizer
from controller.security.identity import UNBOUND, NodeIdentities
from controller.security.principal import (
    PrincipalMapper,
    PrincipalMappingError,
    host_of,
)


class AuthContext(Protocol):
    def peer(self) -> str: ...

    def auth_context(self) -> Mapping[str, Sequence[bytes]]: ...


class UnauthenticatedError(Exception):
    """The client's certificate maps to no principal."""


class PermissionDeniedError(Exception):
    def __init__(self, principal: str, action: Action, reason: str = "") -> None:
        super().__init__(reason or f"{principal} is not allowed {action.describe()}")
        self.principal = principal
        self.action = action


@attrs.frozen
class Caller:
    principal: str
    host: str
    # The peer address as gRPC reports it (e.g. "ipv4:127.0.0.1:53122").
    address: str


def cluster_action(operation: Operation) -> Action:
    return Action(operation, ResourceType.CLUSTER, CLUSTER_RESOURCE_NAME)


def topic_action(operation: Operation, name: str) -> Action:
    return Action(operation, ResourceType.TOPIC, name)


@attrs.frozen
class Access:
    mapper: PrincipalMapper = attrs.field(factory=PrincipalMapper.parse)
    # None: authorization is off, every authenticated caller may do everything.
    authorizer: StandardAuthorizer | None = None
    # Which node id a principal may speak for (security/identity.py).
    identities: NodeIdentities = UNBOUND

    def caller(self, context: AuthContext) -> Caller:
        address = context.peer() or ""
        try:
            principal = self.mapper.principal_of(context.auth_context())
        except PrincipalMappingError as exc:
            raise UnauthenticatedError(str(exc)) from None
        return Caller(principal, host_of(address), address)

    def allowed(self, caller: Caller, action: Action) -> bool:
        return self.authorizer is None or self.authorizer.authorize(caller.principal,
                                                                    caller.host, action)

    def require(self, caller: Caller, action: Action) -> None:
        if not self.allowed(caller, action):
            raise PermissionDeniedError(caller.principal, action)

    def require_broker(self, caller: Caller, broker_id: int) -> None:
        """May `caller` act as broker `broker_id`: CLUSTER_ACTION, and its principal
        names that broker (or no broker, for a super user's tools)?"""
        action = cluster_action(Operation.CLUSTER_ACTION)
        self.require(caller, action)
        super_user = self.authorizer is None or \
            caller.principal in self.authorizer.config.super_users
        refusal = self.identities.broker_refusal(caller.principal, broker_id,
                                                 is_super_user=super_user)
        if refusal is not None:
            raise PermissionDeniedError(caller.principal, action,
                                        f"{refusal}: a broker speaks only for itself")


# Everyone may do everything: plaintext, no authorizer (tests and explicit setups).
OPEN = Access()
