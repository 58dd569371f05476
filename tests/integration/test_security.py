"""Security against real controller processes with mutual TLS and the authorizer on:
each attack and each bad input of the security issue, as an outsider would try it.

One cluster for the module (3 controllers, `User:admin` a super user, certificates
from `ControllerCluster.pki`); every test uses names of its own.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from controller.api import admin_pb2 as apb
from controller.api import admin_pb2_grpc as apb_grpc
from controller.api import broker_pb2_grpc as bpb_grpc
from controller.api.broker_convert import heartbeat_request_to_pb
from controller.api.client import (
    AdminClient,
    ControllerUnreachableError,
    OutcomeUnknownError,
    RequestFailedError,
)
from controller.api.watch_client import Watcher, WatchFailedError
from controller.devcluster.probe import serving
from controller.metadata import BrokerHeartbeatRequest, CreatableTopic
from controller.quorum import raft_service_pb2 as pb
from controller.quorum import raft_service_pb2_grpc as pb_grpc
from controller.rpc import create_sync_channel
from controller.security.acl import (
    CLUSTER_RESOURCE_NAME,
    AclBinding,
    AclFilter,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)
from controller.security.tls import TlsCredentials
from controller.storage.meta_properties import DataDir
from tests.support.controller_processes import ControllerCluster, ControllerProcess
from tests.support.pki import TestPki
from tests.support.polling import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

ALICE = "User:alice"
# What `metakraft dev` grants each broker: follow the log, register, heartbeat.
BROKER_1_MAY_JOIN = AclBinding(ResourceType.CLUSTER, CLUSTER_RESOURCE_NAME, PatternType.LITERAL,
                               "User:broker-1", "*", Operation.CLUSTER_ACTION, Permission.ALLOW)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControllerCluster]:
    # Small snapshots, so the restart test reloads ACLs from a snapshot.
    c = ControllerCluster(tmp_path_factory.mktemp("secure"), 3, secure=True,
                          snapshot_interval_bytes=2048)
    try:
        c.start()
        wait_until(c.active_node, 30.0, "an active controller")
        c.register_brokers([1, 2, 3])
        yield c
    finally:
        c.close()


def client(c: ControllerCluster, name: str | None = "admin", *,
           tls: TlsCredentials | None = None, timeout_ms: int = 15_000) -> AdminClient:
    credentials = tls if tls is not None else (c.credentials(name) if name else None)
    return AdminClient(c.bootstrap, tls=credentials, timeout_ms=timeout_ms)


def topic_acl(name: str, op: Operation, permission: Permission = Permission.ALLOW,
              pattern: PatternType = PatternType.LITERAL,
              principal: str = ALICE) -> AclBinding:
    return AclBinding(ResourceType.TOPIC, name, pattern, principal, "*", op, permission)


def grant(c: ControllerCluster, *bindings: AclBinding) -> None:
    with client(c) as admin:
        assert all(e.ok for e in admin.create_acls(bindings))


def topic_names(c: ControllerCluster, name: str = "admin") -> list[str]:
    with client(c, name) as admin:
        return [t.name for t in admin.list_topics()]


def denied(exc: pytest.ExceptionInfo[RequestFailedError]) -> str:
    assert exc.value.code is grpc.StatusCode.PERMISSION_DENIED, exc.value
    return exc.value.details


def test_a_prefixed_acl_allows_creates_under_its_prefix_and_nothing_else(
        cluster: ControllerCluster) -> None:
    grant(cluster, topic_acl("team-", Operation.CREATE, pattern=PatternType.PREFIXED))
    with client(cluster, "alice") as alice:
        [made] = alice.create_topics([CreatableTopic("team-a", 1, 3)])
        assert made.error.ok, made.error
        with pytest.raises(RequestFailedError) as info:
            alice.create_topics([CreatableTopic("other", 1, 3)])
        assert "User:alice is not allowed CREATE on TOPIC 'other'" in denied(info)
        # A request naming an allowed and a denied topic is refused whole.
        with pytest.raises(RequestFailedError):
            alice.create_topics([CreatableTopic("team-b", 1, 3), CreatableTopic("x", 1, 3)])
    names = topic_names(cluster)
    assert "team-a" in names and not {"other", "team-b", "x"} & set(names)


def test_deny_overrides_allow_and_listings_leave_out_what_is_denied(
        cluster: ControllerCluster) -> None:
    with client(cluster) as admin:
        for name in ("open-1", "secret-1"):
            [made] = admin.create_topics([CreatableTopic(name, 1, 3)])
            assert made.error.ok
    grant(cluster, topic_acl("*", Operation.DESCRIBE),
          topic_acl("secret-", Operation.DESCRIBE, Permission.DENY, PatternType.PREFIXED))
    listed = topic_names(cluster, "alice")
    assert "open-1" in listed and "secret-1" not in listed
    with client(cluster, "alice") as alice:
        with pytest.raises(RequestFailedError) as info:
            alice.describe_topics(["secret-1"])
        assert "DESCRIBE on TOPIC 'secret-1'" in denied(info)
        # Someone with no ACL at all sees nothing (allow_everyone_if_no_acl_found is off
        # by default, and `*` ACLs name alice only).
    assert topic_names(cluster, "mallory") == []


def test_a_standby_redirects_writes_before_authorizing_them(cluster: ControllerCluster) -> None:
    # A standby's ACLs are as of its committed offset, which may lag the active
    # controller's: just after a grant it used to deny the write the grant allows.
    # It judges no write: it names the active controller, which authorizes.
    active = wait_until(cluster.active_node, 20.0, "leader")
    request = apb.CreateTopicsRequest(topics=[apb.CreatableTopic(
        name="never-granted", num_partitions=1, replication_factor=3)])
    for node in cluster.nodes.values():
        channel = create_sync_channel(node.address, tls=cluster.credentials("alice"))
        try:
            with pytest.raises(grpc.RpcError) as exc:
                apb_grpc.AdminStub(channel).CreateTopics(request, timeout=10)
        finally:
            channel.close()
        error: grpc.Call = exc.value  # type: ignore[assignment]
        trailing = dict(error.trailing_metadata() or ())
        if node is active:
            assert error.code() is grpc.StatusCode.PERMISSION_DENIED, error
        else:
            assert error.code() is grpc.StatusCode.FAILED_PRECONDITION, error
            assert trailing.get("x-metakraft-leader-address") == active.address, trailing
    # The client follows the redirect and gets the active controller's verdict.
    with client(cluster, "alice") as alice, pytest.raises(RequestFailedError) as denied_exc:
        alice.create_topics([CreatableTopic("never-granted", 1, 3)])
    assert "not allowed CREATE" in denied(denied_exc)


def test_a_super_user_bypasses_even_a_deny(cluster: ControllerCluster) -> None:
    deny_admin = topic_acl("*", Operation.ALL, Permission.DENY, principal="User:admin")
    grant(cluster, deny_admin)
    try:
        with client(cluster) as admin:
            [made] = admin.create_topics([CreatableTopic("super-1", 1, 3)])
            assert made.error.ok
    finally:
        with client(cluster) as admin:
            [(error, deleted)] = admin.delete_acls([AclFilter(principal="User:admin")])
            assert error.ok and deleted == (deny_admin,)


def test_the_log_records_the_authenticated_principal_not_the_declared_one(
        cluster: ControllerCluster) -> None:
    grant(cluster, topic_acl("forged-", Operation.CREATE, pattern=PatternType.PREFIXED))
    channel = create_sync_channel(wait_until(cluster.active_node, 20.0, "leader").address,
                                  tls=cluster.credentials("alice"))
    try:
        request = apb.CreateTopicsRequest(topics=[apb.CreatableTopic(name="forged-1",
                                                                     num_partitions=1,
                                                                     replication_factor=3)])
        request.header.principal = "User:admin"  # a forged claim: ignored
        request.header.request_id = "forged-request"
        reply = apb_grpc.AdminStub(channel).CreateTopics(request, timeout=10)
        assert reply.results[0].error.code == "NONE", reply
    finally:
        channel.close()
    origins = _restart_all(cluster)
    assert ("forged-request", ALICE) in origins
    assert not any(p == "User:admin" for r, p in origins if r == "forged-request")


def _restart_all(cluster: ControllerCluster) -> set[tuple[str, str]]:
    """Stop every controller, read the (request id, principal) of every batch in the
    logs, start them again (ACLs come back from the snapshots and logs)."""
    for node in cluster.nodes.values():
        assert node.terminate() == 0, node.log_text()[-2000:]
    origins = {(b.origin.request_id, b.origin.principal)
               for node in cluster.nodes.values() for b in node.read_log()}
    for node in cluster.nodes.values():
        node.proc = None
        node.start()
    wait_serving(cluster, *cluster.nodes.values())
    wait_until(cluster.active_node, 30.0, "an active controller after the restart")
    return origins


def wait_serving(cluster: ControllerCluster, *nodes: ControllerProcess) -> None:
    for node in nodes:
        wait_until(lambda n=node: serving(n.address, cluster.credentials("admin")), 30.0,
                   f"controller {node.node_id} serving")


def test_acls_survive_a_leader_kill_and_a_snapshot_reload(cluster: ControllerCluster) -> None:
    grant(cluster, topic_acl("kept-", Operation.CREATE, pattern=PatternType.PREFIXED))
    with client(cluster) as admin:
        before = set(admin.describe_acls(AclFilter()))
        # Enough records past the ACLs that every controller writes a snapshot.
        [bulk] = admin.create_topics([CreatableTopic("bulk-1", 100, 3)])
        assert bulk.error.ok
    wait_until(lambda: any(any(DataDir(n.data_dir).snapshot_dir.glob("*.checkpoint"))
                           for n in cluster.nodes.values()), 30.0, "a snapshot")
    active = wait_until(cluster.active_node, 20.0, "an active controller")
    active.kill()
    wait_until(lambda: (n := cluster.active_node()) is not None and n is not active, 30.0,
               "a new active controller")
    with client(cluster, "alice") as alice:
        [made] = alice.create_topics([CreatableTopic("kept-1", 1, 2)])
        assert made.error.ok, made.error
        request_id = alice.last_request_id
    active.proc = None
    active.start()
    wait_serving(cluster, active)
    assert (request_id, ALICE) in _restart_all(cluster)
    with client(cluster) as admin:
        assert set(admin.describe_acls(AclFilter())) == before
    with client(cluster, "alice") as alice:
        [made] = alice.create_topics([CreatableTopic("kept-2", 1, 3)])
        assert made.error.ok
        with pytest.raises(RequestFailedError):
            alice.create_topics([CreatableTopic("lost-1", 1, 3)])


def test_acl_calls_check_their_input(cluster: ControllerCluster) -> None:
    with client(cluster) as admin:
        errors = admin.create_acls([
            AclBinding(ResourceType.TOPIC, "t", PatternType.LITERAL, "", "*", Operation.READ,
                       Permission.ALLOW),
            AclBinding(ResourceType.CLUSTER, CLUSTER_RESOURCE_NAME, PatternType.PREFIXED,
                       ALICE, "*", Operation.ALTER, Permission.ALLOW),
            topic_acl("fine", Operation.READ)])
        assert [e.ok for e in errors] == [False, False, True]
        assert "principal must not be empty" in errors[0].message
        # Deleting what does not exist: fine, nothing matched.
        [(error, deleted)] = admin.delete_acls([AclFilter(principal="User:nobody")])
        assert error.ok and deleted == ()
    # An operation the API does not know: malformed, nothing applied.
    channel = create_sync_channel(cluster.bootstrap[0], tls=cluster.credentials("admin"))
    try:
        with pytest.raises(grpc.RpcError) as info:
            apb_grpc.AdminStub(channel).CreateAcls(apb.CreateAclsRequest(creations=[
                apb.AclBinding(resource_type=1, resource_name="t", pattern_type=1,
                               principal=ALICE, host="*", operation=99,  # type: ignore
                               permission=2)]), timeout=10)
        assert info.value.code() in (grpc.StatusCode.INVALID_ARGUMENT,  # type: ignore
                                     grpc.StatusCode.FAILED_PRECONDITION)
    finally:
        channel.close()
    # Only principals with ALTER on the cluster may change ACLs.
    with client(cluster, "alice") as alice, pytest.raises(RequestFailedError) as denial:
        alice.create_acls([topic_acl("*", Operation.ALL)])
    assert "ALTER on CLUSTER" in denied(denial)


def test_clients_without_a_valid_certificate_are_refused(
        cluster: ControllerCluster, tmp_path: Path) -> None:
    other_ca = TestPki(tmp_path / "other", "another CA")
    pki = cluster.pki
    assert pki is not None
    for what, tls in (("plaintext", None),
                      ("a certificate from another CA", other_ca.credentials("admin")),
                      ("an expired certificate", pki.expired_credentials("admin"))):
        with AdminClient(cluster.bootstrap, tls=tls, timeout_ms=3_000) as stranger, \
                pytest.raises(ControllerUnreachableError) as info:
            stranger.list_topics()
        assert "no controller answered" in str(info.value), what
    # TLS without a client certificate: the server ends the handshake.
    secure = grpc.secure_channel(cluster.bootstrap[0],
                                 grpc.ssl_channel_credentials(pki.ca.certificate_pem()))
    try:
        with pytest.raises(grpc.RpcError) as refused:
            apb_grpc.AdminStub(secure).ListTopics(apb.ListTopicsRequest(), timeout=3)
        assert refused.value.code() is grpc.StatusCode.UNAVAILABLE  # type: ignore
    finally:
        secure.close()
    # None of it disturbed the cluster: the admin is served as before.
    with client(cluster) as admin:
        assert admin.describe_quorum().leader_id in cluster.nodes


def raft(address: str, tls: TlsCredentials | None, method: str, request: object) -> object:
    channel = create_sync_channel(address, tls=tls)
    try:
        return getattr(pb_grpc.RaftStub(channel), method)(request, timeout=5)
    finally:
        channel.close()


def test_only_controllers_speak_raft_and_only_as_themselves(
        cluster: ControllerCluster) -> None:
    grant(cluster, BROKER_1_MAY_JOIN)
    active = wait_until(cluster.active_node, 20.0, "an active controller")
    voter, third = (i for i in cluster.nodes if i != active.node_id)
    other = f"controller-{third}"
    broker = cluster.credentials("broker-1")

    def fetch(src: int) -> pb.FetchRequest:
        return pb.FetchRequest(header=pb.Header(cluster_id=cluster.cluster_id, src=src,
                                                dst=active.node_id, epoch=0),
                               seq=1, fetch_offset=0, last_fetched_epoch=0, high_watermark=0,
                               max_wait_ms=0)

    # A broker certificate follows the log as an observer under its own id ...
    reply = raft(active.address, broker, "Fetch", fetch(1))
    assert reply.error in (pb.ERROR_NONE, pb.ERROR_FENCED_LEADER_EPOCH)  # type: ignore
    for who, tls, method, request in (
            # ... but may not vote, nor fetch as a voter (the impostor follower),
            ("broker", broker, "Vote", pb.VoteRequest(header=pb.Header(
                cluster_id=cluster.cluster_id, src=voter, dst=active.node_id, epoch=1000),
                last_epoch=1000, end_offset=10**6)),
            ("broker", broker, "Fetch", fetch(voter)),
            # and neither may the admin, a super user of the Admin API only;
            ("admin", cluster.credentials("admin"), "Fetch", fetch(voter)),
            # another controller's certificate may not claim to be this voter,
            (other, cluster.credentials(other), "Fetch", fetch(voter)),
            (other, cluster.credentials(other), "Vote", pb.VoteRequest(header=pb.Header(
                cluster_id=cluster.cluster_id, src=voter, dst=active.node_id, epoch=1000),
                last_epoch=1000, end_offset=10**6)),
            # a broker's may not follow the log as another broker;
            ("broker", broker, "Fetch", fetch(2)),
            # alice has no CLUSTER_ACTION: not even an observer.
            ("alice", cluster.credentials("alice"), "Fetch", fetch(77))):
        with pytest.raises(grpc.RpcError) as info:
            raft(active.address, tls, method, request)
        assert info.value.code() is grpc.StatusCode.PERMISSION_DENIED, (who, method)  # type: ignore
    assert f"User:{other} is controller {third}, not node {voter}" in active.log_text()
    assert "event=access_denied" in active.log_text()
    # A broker certificate on the Admin API: no rights there.
    with client(cluster, "broker-1") as as_broker, pytest.raises(RequestFailedError) as info2:
        as_broker.create_topics([CreatableTopic("by-broker", 1, 3)])
    denied(info2)
    assert wait_until(cluster.active_node, 20.0, "leader").node_id == active.node_id


def test_an_impostor_follower_cannot_complete_a_majority(cluster: ControllerCluster) -> None:
    active = wait_until(cluster.active_node, 20.0, "an active controller")
    followers = [n for n in cluster.nodes.values() if n is not active]
    paused: list[ControllerProcess] = []
    try:
        for node in followers:
            assert node.proc is not None
            node.proc.send_signal(signal.SIGSTOP)
            paused.append(node)
        # Claim to be a paused voter: refused, so it can never count toward the HW;
        # with no controller certificate, or with another controller's.
        request = pb.FetchRequest(header=pb.Header(cluster_id=cluster.cluster_id,
                                                   src=followers[0].node_id,
                                                   dst=active.node_id, epoch=0),
                                  seq=1, fetch_offset=10**6, last_fetched_epoch=1000,
                                  high_watermark=0, max_wait_ms=0)
        for name in ("alice", f"controller-{followers[1].node_id}"):
            with pytest.raises(grpc.RpcError) as info:
                raft(active.address, cluster.credentials(name), "Fetch", request)
            assert info.value.code() is grpc.StatusCode.PERMISSION_DENIED, name  # type: ignore
        # With only the leader's disk, a write is never acknowledged.
        with AdminClient([active.address], tls=cluster.credentials("admin"),
                         timeout_ms=2_000) as admin, pytest.raises(
                             (OutcomeUnknownError, ControllerUnreachableError)):
            admin.create_topics([CreatableTopic("unacked-1", 1, 1)])
    finally:
        for node in paused:
            assert node.proc is not None
            node.proc.send_signal(signal.SIGCONT)
    wait_until(cluster.active_node, 30.0, "an active controller after the pause")


def heartbeat(c: ControllerCluster, address: str, name: str, broker_id: int) -> object:
    request = heartbeat_request_to_pb(BrokerHeartbeatRequest(broker_id, 1, 0), c.cluster_id)
    channel = create_sync_channel(address, tls=c.credentials(name))
    try:
        return bpb_grpc.BrokerLifecycleStub(channel).BrokerHeartbeat(request, timeout=5)
    finally:
        channel.close()


def test_a_broker_certificate_speaks_only_for_its_own_broker(
        cluster: ControllerCluster) -> None:
    grant(cluster, BROKER_1_MAY_JOIN)
    active = wait_until(cluster.active_node, 20.0, "an active controller")
    # Its own heartbeat is served (answered with the broker's state, here a stale epoch).
    heartbeat(cluster, active.address, "broker-1", 1)
    # Keeping broker 3 alive with broker 1's certificate is refused, and logged.
    with pytest.raises(grpc.RpcError) as info:
        heartbeat(cluster, active.address, "broker-1", 3)
    assert info.value.code() is grpc.StatusCode.PERMISSION_DENIED  # type: ignore
    assert "User:broker-1 is broker 1, not broker 3" in info.value.details()  # type: ignore
    assert wait_until(lambda: "method=BrokerHeartbeat principal=User:broker-1" in
                      active.log_text(), 5.0, "the access_denied line")
    # A super user's tools may act for any broker (how the tests register them).
    heartbeat(cluster, active.address, "admin", 3)


def test_a_watch_shows_only_what_its_principal_may_describe(cluster: ControllerCluster) -> None:
    # A principal of its own: the module's cluster is shared, and another test grants
    # alice DESCRIBE on every topic (the order the tests run in varies).
    grant(cluster, topic_acl("wseen", Operation.DESCRIBE, principal="User:wanda"))
    with client(cluster) as admin:
        admin.describe_cluster()  # any read names the committed offset: the watch's start
        start_offset = admin.last_read_offset
        assert start_offset is not None
        for name in ("wseen", "whidden"):
            assert admin.create_topics([CreatableTopic(name, 1, 3)])[0].error.ok
    with client(cluster, "wanda") as wanda:
        for denied_watch in (Watcher(wanda, from_offset=start_offset, topic="whidden"),
                             Watcher(wanda, from_offset=start_offset,
                                     resource_types=[apb.WATCH_RESOURCE_TYPE_BROKER])):
            with pytest.raises(WatchFailedError) as info:
                next(iter(denied_watch))
            assert info.value.code is grpc.StatusCode.PERMISSION_DENIED, info.value
        shown: list[apb.WatchEvent] = []
        watcher = Watcher(wanda, from_offset=start_offset)
        for update in watcher:
            shown += update.events
            if update.next_offset >= update.committed_offset and \
                    any(e.resource_name == "wseen" for e in shown):
                break
        watcher.close()
    # Its topic's changes only: not the other topic's, nor cluster-wide ones.
    names = {e.resource_name for e in shown}
    assert "wseen" in names and "whidden" not in names
    assert all(e.resource_type in (apb.WATCH_RESOURCE_TYPE_TOPIC,
                                   apb.WATCH_RESOURCE_TYPE_PARTITION,
                                   apb.WATCH_RESOURCE_TYPE_CONFIG) for e in shown)
