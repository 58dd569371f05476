"""Fixtures shared by the API tests: a LocalController behind a real grpc.aio server
on loopback (64 KiB message limit, brokers 1-3 registered)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from controller import rpc
from tests.support.api_server import LOCAL_CLUSTER, ApiServer, register_brokers, serving
from tests.support.local_controller import LocalController


@pytest.fixture
def controller() -> LocalController:
    return LocalController(cluster_id=LOCAL_CLUSTER)


@pytest.fixture
def server(controller: LocalController) -> Iterator[ApiServer]:
    with serving(controller, limits=rpc.RpcLimits(max_message_bytes=64 * 1024)) as srv:
        register_brokers(srv.address, [1, 2, 3])
        yield srv
