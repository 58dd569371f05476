"""Who may call an Admin RPC: the caller of one request (`Call`) and the rules the
RPC table (`rpcs.py`) picks from. The permissions are Kafka's; see rpcs.py."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import attrs

from controller.api.seam import Args, Origin
from controller.metadata.config_schema import ResourceType as ConfigResourceType
from controller.security.access import Access, Caller, cluster_action, topic_action
from controller.security.acl import Operation as AclOperation
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


Authorize = Callable[[Args, Call], None]


def on_cluster(operation: AclOperation) -> Authorize:
    def check(_args: Args, call: Call) -> None:
        call.require([cluster_action(operation)])
    return check


def on_topics(operation: AclOperation, names: Callable[[Args], Iterable[str]], *,
              or_cluster: bool = False) -> Authorize:
    """`operation` on every named topic (or, if `or_cluster`, on the cluster)."""
    def check(args: Args, call: Call) -> None:
        if or_cluster and call.may(cluster_action(operation)):
            return
        call.require(topic_action(operation, name) for name in dict.fromkeys(names(args)))
    return check


def on_config_resources(operation: AclOperation) -> Authorize:
    """Topic configs need `operation` on the topic; broker and cluster configs on the
    cluster."""
    def check(args: Args, call: Call) -> None:
        actions: list[Action] = []
        for item in args.items or ():
            resource = getattr(item, "resource", item)
            actions.append(topic_action(operation, resource.name)
                           if resource.type is ConfigResourceType.TOPIC
                           else cluster_action(operation))
        call.require(dict.fromkeys(actions))
    return check


def nothing_upfront(_args: Args, _call: Call) -> None:
    """A listing: what the caller may not see is left out by `visible`."""


def topic_names(args: Args) -> Iterable[str]:
    return (getattr(item, "name", item) for item in args.items or ())


def visible_topics(topics: Sequence[Any], call: Call) -> tuple[Any, ...]:
    return tuple(t for t in topics if call.may(topic_action(AclOperation.DESCRIBE, t.name)))
