"""Every Admin RPC has exactly one row in the table (with its authorization rule), and
a service whose .proto has a method without a handler does not register."""

from __future__ import annotations

import asyncio

import pytest

from controller import rpc
from controller.api import admin_pb2 as apb
from controller.api.admin_service import admin_handler
from controller.api.handlers import register_service
from controller.api.rpcs import ADMIN_RPCS, ADMIN_RPCS_BY_NAME
from controller.security.access import OPEN
from tests.support.in_memory_controller import InMemoryController

SERVICE = apb.DESCRIPTOR.services_by_name["Admin"]


def test_the_table_matches_the_proto_method_for_method() -> None:
    unary = {m.name: m for m in SERVICE.methods
             if not (m.client_streaming or m.server_streaming)}
    assert set(unary) == set(ADMIN_RPCS_BY_NAME)
    assert len(ADMIN_RPCS) == len(ADMIN_RPCS_BY_NAME)
    for spec in ADMIN_RPCS:
        assert spec.request_class.DESCRIPTOR is unary[spec.name].input_type, spec.name
        assert spec.needs  # the permission in words, for the docs and errors


def test_reads_and_writes_are_what_their_names_say() -> None:
    reads = {s.name for s in ADMIN_RPCS if not s.write}
    assert all(n.startswith(("List", "Describe")) for n in reads)
    assert not any(s.name.startswith(("List", "Describe")) for s in ADMIN_RPCS if s.write)


def test_a_method_without_a_handler_is_refused_at_registration() -> None:
    handlers = {s.name: admin_handler(s, InMemoryController(), OPEN) for s in ADMIN_RPCS
                if s.name != "DeleteAcls"}

    async def register() -> None:  # a grpc.aio server needs a running loop
        register_service(rpc.create_server(), SERVICE, handlers, stream_method="Stream")

    with pytest.raises(AssertionError, match="DeleteAcls"):
        asyncio.run(register())
