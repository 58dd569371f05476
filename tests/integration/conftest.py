"""Fixtures shared by the integration tests: a InMemoryController behind a real grpc.aio
server on loopback (64 KiB message limit, brokers 1-3 registered), and three real
controller processes with brokers 0-2 registered (`cluster`; a module may define its
own)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from controller import rpc
from tests.support.api_server import LOCAL_CLUSTER, ApiServer, register_brokers, serving
from tests.support.controller_processes import ControllerCluster
from tests.support.in_memory_controller import InMemoryController
from tests.support.polling import wait_until

# How long three controllers get to elect an active one.
START_S = 20.0


@pytest.fixture
def controller() -> InMemoryController:
    return InMemoryController(cluster_id=LOCAL_CLUSTER)


@pytest.fixture
def server(controller: InMemoryController) -> Iterator[ApiServer]:
    with serving(controller, limits=rpc.RpcLimits(max_message_bytes=64 * 1024)) as srv:
        register_brokers(srv.address, [1, 2, 3])
        yield srv


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[ControllerCluster]:
    c = ControllerCluster(tmp_path, 3)
    try:
        c.start()
        wait_until(c.active_node, START_S, "an active controller")
        c.register_brokers([0, 1, 2])
        yield c
    finally:
        c.close()
