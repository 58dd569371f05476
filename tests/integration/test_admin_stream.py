"""The multiplexed ``Admin/Stream`` RPC on a real grpc.aio server with a InMemoryController:
each item is answered as its unary call would be, the stream's own failures (a
malformed or oversized message, an id reused in flight, the server going away,
a deadline) end it cleanly, and the AdminClient judges them like failed unary calls.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent import futures

import grpc
import pytest
from grpc_health.v1 import health, health_pb2_grpc

from controller import rpc
from controller.api import admin_pb2 as apb
from controller.api.admin_service import admin_handler
from controller.api.client import AdminClient, OutcomeUnknownError, RequestFailedError
from controller.api.handlers import BUSY_KEY, LEADER_ADDRESS_KEY, LEADER_ID_KEY, register_service
from controller.api.rpcs import ADMIN_RPCS
from controller.api.seam import ControllerBusyError, NotControllerError
from controller.api.stream_client import STREAM_METHOD, AdminStream, StreamItemError
from controller.metadata import CreatableTopic
from controller.security.access import OPEN
from tests.support.api_server import LOCAL_CLUSTER, ApiServer, register_brokers, serving
from tests.support.in_memory_controller import InMemoryController
from tests.support.polling import wait_until

pytestmark = pytest.mark.integration

CLUSTER = LOCAL_CLUSTER


def _create(name: str, request_id: str = "") -> bytes:
    request = apb.CreateTopicsRequest(
        topics=[apb.CreatableTopic(name=name, num_partitions=1, replication_factor=1)]
    )
    request.header.request_id = request_id
    request.header.principal = "alice"
    return request.SerializeToString()


def _item(item_id: int, method: str, payload: bytes, timeout_ms: int = 0) -> bytes:
    return apb.StreamRequest(
        id=item_id, method=method, payload=payload, timeout_ms=timeout_ms
    ).SerializeToString()


def _raw_stream(
    address: str, messages: list[bytes]
) -> tuple[list[apb.StreamResponse], grpc.RpcError | None]:
    """Send ``messages`` (then half-close); every answer, and the stream's error if any."""
    channel = rpc.create_sync_channel(address)
    answers: list[apb.StreamResponse] = []
    try:
        call = channel.stream_stream(
            STREAM_METHOD,
            request_serializer=None,
            response_deserializer=apb.StreamResponse.FromString,
        )(iter(messages), timeout=10)
        try:
            answers.extend(call)
        except grpc.RpcError as exc:
            return answers, exc
        return answers, None
    finally:
        channel.close()


def test_items_are_answered_like_their_unary_calls(
    server: ApiServer, controller: InMemoryController
) -> None:
    channel = rpc.create_sync_channel(server.address)
    stream = AdminStream(channel)
    try:
        before = controller.record_count
        created = apb.CreateTopicsResponse.FromString(
            stream.call("CreateTopics", _create("t", "req-1"), 5)
        )
        assert created.results[0].error.code == "NONE"
        # The batch origin: the authenticated principal (the one the request declares,
        # "alice", is ignored: a plaintext caller is anonymous), the peer, the id.
        origin = controller.batches[-1].origin
        assert (origin.principal, origin.request_id) == ("User:ANONYMOUS", "req-1")
        assert origin.client_address.startswith("ipv4:127.0.0.1:")
        assert controller.record_count > before

        # Item errors end only the item; the stream serves on.
        after_create = controller.record_count
        with pytest.raises(StreamItemError) as garbage:
            stream.call("CreateTopics", b"\xff\xff\xff\xff", 5)
        assert garbage.value.code is grpc.StatusCode.INVALID_ARGUMENT
        assert "does not decode" in garbage.value.details
        with pytest.raises(StreamItemError) as unknown:
            stream.call("DropEverything", b"", 5)
        assert unknown.value.code is grpc.StatusCode.UNIMPLEMENTED
        assert "DropEverything" in unknown.value.details
        duplicate = apb.CreateTopicsResponse.FromString(
            stream.call("CreateTopics", _create("t"), 5)
        )
        assert duplicate.results[0].error.code == "TOPIC_ALREADY_EXISTS"

        controller.fail_next(NotControllerError(2, "10.0.0.2:9093"))
        with pytest.raises(StreamItemError) as moved:
            stream.call("CreateTopics", _create("u"), 5)
        assert moved.value.code is grpc.StatusCode.FAILED_PRECONDITION
        assert moved.value.trailing == {LEADER_ID_KEY: "2", LEADER_ADDRESS_KEY: "10.0.0.2:9093"}
        controller.fail_next(ControllerBusyError("queue full"))
        with pytest.raises(StreamItemError) as busy:
            stream.call("CreateTopics", _create("u"), 5)
        assert busy.value.code is grpc.StatusCode.UNAVAILABLE
        assert busy.value.trailing == {BUSY_KEY: "true"}
        assert controller.record_count == after_create

        listed = apb.ListTopicsResponse.FromString(
            stream.call("ListTopics", apb.ListTopicsRequest().SerializeToString(), 5)
        )
        assert [t.name for t in listed.topics] == ["t"]
        assert stream.usable()
    finally:
        stream.close()
        channel.close()


def test_a_malformed_message_ends_the_stream_after_what_came_before(
    server: ApiServer, controller: InMemoryController
) -> None:
    answers, error = _raw_stream(
        server.address, [_item(1, "CreateTopics", _create("first")), b"\xff\xff\xff"]
    )
    assert [(a.id, a.status_code) for a in answers] == [(1, 0)]
    assert error is not None and error.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "does not decode as a StreamRequest" in (error.details() or "")
    assert [t.name for t in controller.state.replication.list_topics()] == ["first"]


def test_an_id_reused_in_flight_ends_the_stream_and_the_first_is_answered(
    server: ApiServer, controller: InMemoryController
) -> None:
    server.run(controller.hold())
    outcome: list[tuple[list[apb.StreamResponse], grpc.RpcError | None]] = []
    sender = threading.Thread(
        target=lambda: outcome.append(
            _raw_stream(
                server.address,
                [_item(7, "CreateTopics", _create("a")), _item(7, "CreateTopics", _create("b"))],
            )
        )
    )
    sender.start()
    wait_until(lambda: "CreateTopics" in controller.calls, 10, "the first item in the facade")
    server.run(controller.release())
    sender.join(10)
    ((answers, error),) = outcome
    assert [(a.id, a.status_code) for a in answers] == [(7, 0)]
    assert error is not None and error.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "already in flight" in (error.details() or "")
    assert [t.name for t in controller.state.replication.list_topics()] == ["a"]


def test_an_item_past_its_timeout_is_answered_deadline_exceeded(
    server: ApiServer, controller: InMemoryController
) -> None:
    server.run(controller.hold())
    try:
        answers, error = _raw_stream(server.address, [_item(1, "ListTopics", b"", timeout_ms=50)])
    finally:
        server.run(controller.release())
    assert error is None
    (answer,) = answers
    assert answer.status_code == grpc.StatusCode.DEADLINE_EXCEEDED.value[0]
    assert "within 50 ms" in answer.status_details


def test_an_oversized_request_is_refused_and_the_client_goes_on(
    server: ApiServer, controller: InMemoryController
) -> None:
    with AdminClient([server.address], timeout_ms=5_000) as admin:
        assert admin.create_topics([CreatableTopic("small", 1, 1)])[0].error.ok
        before = controller.record_count
        with pytest.raises(RequestFailedError) as refused:
            admin.create_topics([CreatableTopic("x" * 100_000, 1, 1)])
        assert refused.value.code is grpc.StatusCode.RESOURCE_EXHAUSTED
        assert controller.record_count == before
        # The stream died with the message; the next request gets a new one.
        assert admin.create_topics([CreatableTopic("next", 1, 1)])[0].error.ok


def test_leader_lost_mid_stream_the_write_is_resent_elsewhere_under_its_id() -> None:
    first, second = InMemoryController(cluster_id=CLUSTER), InMemoryController(cluster_id=CLUSTER)
    with serving(second) as other:
        register_brokers(other.address, [1])
        gone = ApiServer(first).start()
        register_brokers(gone.address, [1])
        with AdminClient([gone.address, other.address], timeout_ms=10_000) as admin:
            assert admin.create_topics([CreatableTopic("a", 1, 1)])[0].error.ok
            gone.run(first.hold())
            failures: list[BaseException] = []

            def write() -> None:
                try:
                    admin.create_topics([CreatableTopic("b", 1, 1)])
                except BaseException as exc:  # examined below
                    failures.append(exc)

            writer = threading.Thread(target=write)
            writer.start()
            wait_until(lambda: first.calls.count("CreateTopics") == 2, 10, "b in the facade")
            gone.stop()  # the held write never applies, but the client cannot know that
            writer.join(15)
            assert not writer.is_alive()
            # The client resent it (same request id) to the other controller.
            assert failures == [] and admin.outcome_unknown_retries >= 1
            assert admin.leader_address == other.address
            assert admin.create_topics([CreatableTopic("c", 1, 1)])[0].error.ok
    assert [t.name for t in second.state.replication.list_topics()] == ["b", "c"]


class _SilentAdmin:
    """A server whose Stream reads requests and never answers (a stuck controller)."""

    def __init__(self) -> None:
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        release = self.release = threading.Event()

        def never_answer(requests: Iterator[bytes], context: object) -> Iterator[bytes]:
            for _ in requests:
                release.wait(30)
            return iter(())

        handler = grpc.method_handlers_generic_handler(
            "metakraft.admin.v1.Admin",
            {"Stream": grpc.stream_stream_rpc_method_handler(never_answer)},
        )
        self.server.add_generic_rpc_handlers((handler,))
        health_pb2_grpc.add_HealthServicer_to_server(health.HealthServicer(), self.server)
        self.address = f"127.0.0.1:{self.server.add_insecure_port('127.0.0.1:0')}"
        self.server.start()

    def stop(self) -> None:
        self.release.set()
        self.server.stop(None)


def test_a_stream_without_an_answer_in_time_is_cancelled_and_the_write_unknown() -> None:
    silent = _SilentAdmin()
    try:
        channel = rpc.create_sync_channel(silent.address)
        stream = AdminStream(channel)
        with pytest.raises(StreamItemError) as late:
            stream.call("ListTopics", b"", 0.2)
        assert late.value.code is grpc.StatusCode.DEADLINE_EXCEEDED
        assert not stream.usable()
        stream.close()
        channel.close()
        with (
            AdminClient([silent.address], timeout_ms=300) as admin,
            pytest.raises(OutcomeUnknownError),
        ):
            admin.create_topics([CreatableTopic("t", 1, 1)])
    finally:
        silent.stop()


class _UnaryOnlyServer(ApiServer):
    """A controller from before the Stream RPC: only the unary methods."""

    async def _start(self) -> str:
        server = rpc.create_server()
        register_service(
            server, apb.DESCRIPTOR.services_by_name["Admin"],
            {spec.name: admin_handler(spec, self.facade, OPEN) for spec in ADMIN_RPCS})
        port = rpc.bind(server, "127.0.0.1:0", None)
        await server.start()
        self._server = server
        return f"127.0.0.1:{port}"


def test_a_controller_without_stream_is_called_unary(controller: InMemoryController) -> None:
    with serving(controller) as helper:
        register_brokers(helper.address, [1])
    old = _UnaryOnlyServer(controller).start()
    try:
        with AdminClient([old.address], timeout_ms=5_000) as admin:
            assert admin.create_topics([CreatableTopic("t", 1, 1)])[0].error.ok
            assert [t.name for t in admin.list_topics()] == ["t"]
        assert controller.calls.count("CreateTopics") == 1
    finally:
        old.stop()
