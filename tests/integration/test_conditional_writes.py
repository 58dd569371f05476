"""Conditional writes with real controller processes: clients racing to change a
config from the mod offset they read, exactly one wins per offset; a conditional
write retried under its request id gets its first answer (exactly once), not a
failed condition; the CLI's --if-mod-offset; describe shows the mod offsets."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator

import pytest
from click.testing import CliRunner

from controller.api import admin_pb2 as apb
from controller.api import admin_pb2_grpc as apb_grpc
from controller.api.client import AdminClient
from controller.cli.main import cli
from controller.metadata import CreatableTopic, ErrorCode
from controller.metadata.configs import (
    AlterConfigOp,
    AlterConfigsResource,
    ConfigResource,
    OpType,
    ResourceType,
)
from controller.rpc import create_sync_channel
from tests.support.controller_processes import ControllerCluster
from tests.support.polling import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControllerCluster]:
    c = ControllerCluster(tmp_path_factory.mktemp("cas"), 3)
    try:
        c.start()
        wait_until(c.active_node, 30, "an active controller")
        c.register_brokers([1, 2, 3])
        yield c
    finally:
        c.close()


def test_racing_conditional_alters_exactly_one_wins_per_offset(
        cluster: ControllerCluster) -> None:
    resource = ConfigResource(ResourceType.TOPIC, "raced")
    with AdminClient(cluster.bootstrap) as admin:
        assert admin.create_topics([CreatableTopic("raced", 1, 3)])[0].error.ok
    rounds, racers = 6, 4
    outcomes: list[list[tuple[int, ErrorCode]]] = [[] for _ in range(racers)]
    barrier = threading.Barrier(racers)

    def race(index: int) -> None:
        with AdminClient(cluster.bootstrap, timeout_ms=20_000) as client:
            for round_ in range(rounds):
                barrier.wait(30)
                # Read, then write conditional on what was read (a compare-and-set). A
                # value of its own each time: a write that changes nothing writes no
                # record and leaves the mod offset as it was.
                (seen,) = client.describe_configs([resource])
                op = AlterConfigOp("retention.ms", OpType.SET, f"{round_ + 1}00{index}")
                (result,) = client.incremental_alter_configs(
                    [AlterConfigsResource(resource, (op,), seen.mod_offset)])
                outcomes[index].append((seen.mod_offset, result.error.code))

    threads = [threading.Thread(target=race, args=(i,)) for i in range(racers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    won: dict[int, int] = {}
    for per_racer in outcomes:
        assert len(per_racer) == rounds
        for offset, code in per_racer:
            assert code in (ErrorCode.NONE, ErrorCode.CONDITION_FAILED), code
            if code is ErrorCode.NONE:
                won[offset] = won.get(offset, 0) + 1
    # Every winning condition named a different offset, once: no lost update.
    assert all(count == 1 for count in won.values()), won
    assert len(won) >= rounds  # each round someone won (they read the same offset)
    with AdminClient(cluster.bootstrap) as admin:
        (final,) = admin.describe_configs([resource])
    assert final.mod_offset > max(won)


def test_a_retried_conditional_write_gets_its_first_answer(cluster: ControllerCluster) -> None:
    with AdminClient(cluster.bootstrap) as admin:
        assert admin.create_topics([CreatableTopic("once", 1, 3)])[0].error.ok
        (desc,) = admin.describe_topics(["once"])
        leader = admin.leader_address
    assert leader is not None and desc.mod_offset > 0
    request = apb.CreatePartitionsRequest(
        header=apb.RequestHeader(request_id="cas-retry-1"),
        topics=[apb.CreatePartitionsTopic(name="once", count=2,
                                          if_mod_offset=desc.mod_offset)])
    with create_sync_channel(leader) as channel:
        stub = apb_grpc.AdminStub(channel)
        first = stub.CreatePartitions(request, timeout=10)
        again = stub.CreatePartitions(request, timeout=10)  # the condition no longer holds
        fresh = stub.CreatePartitions(
            apb.CreatePartitionsRequest(header=apb.RequestHeader(request_id="cas-retry-2"),
                                        topics=request.topics), timeout=10)
    assert first.results[0].error.code == "NONE"
    assert again == first
    assert fresh.results[0].error.code == "CONDITION_FAILED"


def test_the_cli_writes_conditionally_and_shows_mod_offsets(cluster: ControllerCluster) -> None:
    bootstrap = ",".join(cluster.bootstrap)
    runner = CliRunner()

    def run(*args: str) -> tuple[int, str]:
        result = runner.invoke(cli, [*args, "--bootstrap", bootstrap])
        return result.exit_code, result.output

    assert run("topics", "create", "--name", "clitopic", "--replication-factor", "3")[0] == 0
    code, out = run("topics", "describe", "--name", "clitopic", "--output", "json")
    assert code == 0, out
    mod = json.loads(out)[0]["mod_offset"]
    assert mod > 0
    code, out = run("configs", "alter", "--entity-type", "topic", "--entity-name", "clitopic",
                    "--set", "retention.ms=5", "--if-mod-offset", "-1")
    assert code == 0, out
    code, out = run("configs", "alter", "--entity-type", "topic", "--entity-name", "clitopic",
                    "--set", "retention.ms=6", "--if-mod-offset", "-1")
    assert code == 1 and "CONDITION_FAILED" in out, out
    code, out = run("configs", "describe", "--entity-type", "topic", "--entity-name",
                    "clitopic")
    assert code == 0 and "mod offset" in out, out
    code, out = run("topics", "delete", "--name", "clitopic", "--if-mod-offset", str(mod - 1))
    assert code == 1 and "CONDITION_FAILED" in out, out
    code, out = run("topics", "delete", "--name", "clitopic", "--if-mod-offset", str(mod))
    assert code == 0, out
