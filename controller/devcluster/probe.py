"""What the dev cluster looks like from outside: health checks and admin reads.

Everything here is one bounded call; the waiting loops are the caller's (they also
watch for dead processes and Ctrl-C between calls).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
import grpc

from controller.api.client import AdminClient, AdminClientError
from controller.devcluster.layout import ClusterSpec
from controller.devcluster.security import client_credentials, principal_of
from controller.metadata import TopicDescription
from controller.rpc import health_status
from controller.security.acl import (
    CLUSTER_RESOURCE_NAME,
    WILDCARD,
    AclBinding,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)
from controller.security.tls import TlsCredentials

# One probe call waits at most this; the caller polls again.
PROBE_TIMEOUT_MS = 2_000


def serving(address: str, tls: TlsCredentials | None,
            timeout_ms: int = PROBE_TIMEOUT_MS) -> bool:
    """grpc.health.v1 of the whole server (service "") says SERVING."""
    return health_status(address, tls, "", timeout_ms) == "SERVING"


@attrs.frozen
class BrokerView:
    broker_id: int
    fenced: bool
    in_controlled_shutdown: bool
    epoch: int

    @property
    def state(self) -> str:
        if self.fenced:
            return "fenced"
        return "shutting down" if self.in_controlled_shutdown else "active"


class ClusterProbe:
    """Admin reads through the real AdminClient, each bounded by PROBE_TIMEOUT_MS."""

    def __init__(self, spec: ClusterSpec, timeout_ms: int = PROBE_TIMEOUT_MS) -> None:
        self.tls = client_credentials(spec)
        self.admin = AdminClient([spec.bootstrap], timeout_ms=timeout_ms, tls=self.tls)

    def close(self) -> None:
        self.admin.close()

    def leader_id(self) -> int | None:
        try:
            leader = self.admin.describe_quorum().leader_id
        except AdminClientError:
            return None
        return leader if leader >= 0 else None

    def brokers(self) -> Mapping[int, BrokerView] | None:
        """Registered brokers by id (None: no controller answered)."""
        try:
            desc = self.admin.describe_cluster()
        except AdminClientError:
            return None
        return {b.broker_id: BrokerView(b.broker_id, b.fenced, b.in_controlled_shutdown,
                                        b.broker_epoch) for b in desc.brokers}

    def grant_brokers(self, spec: ClusterSpec) -> bool:
        """Let every broker follow the log and heartbeat: ALLOW CLUSTER_ACTION on the
        cluster for its principal (creating an existing ACL changes nothing). True
        once the controller accepted them all."""
        bindings = [AclBinding(ResourceType.CLUSTER, CLUSTER_RESOURCE_NAME,
                               PatternType.LITERAL, principal_of(node), WILDCARD,
                               Operation.CLUSTER_ACTION, Permission.ALLOW)
                    for node in spec.brokers]
        try:
            return all(error.ok for error in self.admin.create_acls(bindings))
        except AdminClientError:
            return False

    def topics(self, names: list[str]) -> tuple[TopicDescription, ...] | None:
        try:
            return self.admin.describe_topics(names)
        except AdminClientError:
            return None


def broker_status(address: str, tls: TlsCredentials | None,
                  timeout_ms: int = PROBE_TIMEOUT_MS) -> dict[str, Any] | None:
    """A broker's own view (the status RPC, as `metakraft broker-status --output json`
    prints it): lifecycle state, metadata offset, local replicas. None if it does not
    answer."""
    # Imported here, as the CLI does: the dev cluster composes both sides, while the
    # rest of `controller` never depends on the broker agent.
    from broker_agent.status import get_status, status_to_dict

    try:
        return status_to_dict(get_status(address, timeout_ms / 1000, tls))
    except grpc.RpcError:
        return None


def broker_running(address: str, tls: TlsCredentials | None) -> bool:
    status = broker_status(address, tls)
    return status is not None and status["state"] == "RUNNING"
