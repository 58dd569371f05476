"""The admin CLI (click's CliRunner) against a real API server with a InMemoryController:
tables, --output json, and the exit codes 0 / 1 / 2 / 3 / 4."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from controller import __version__, rpc
from controller.api import broker_pb2 as bpb
from controller.api import broker_pb2_grpc as bpb_grpc
from controller.api.seam import ControllerTimeoutError
from controller.cli.main import cli
from controller.metadata.levels import LATEST_METADATA_VERSION
from tests.support.api_server import ApiServer, dead_address, register_brokers, serving
from tests.support.in_memory_controller import InMemoryController


@pytest.fixture
def controller() -> InMemoryController:
    return InMemoryController()


@pytest.fixture
def server(controller: InMemoryController) -> Iterator[ApiServer]:
    with serving(controller) as srv:
        register_brokers(srv.address, [1, 2, 3], racks={1: "a", 2: "b", 3: "c"})
        yield srv


def run(server: ApiServer | None, *args: str, env: dict[str, str] | None = None) -> Result:
    full = list(args)
    if server is not None:
        full += ["--bootstrap", server.address]
    return CliRunner().invoke(cli, full, env=env, catch_exceptions=False)


def run_json(server: ApiServer, *args: str) -> tuple[int, Any]:
    result = run(server, *args, "--output", "json")
    return result.exit_code, json.loads(result.stdout)


def test_topics_lifecycle_tables(server: ApiServer, controller: InMemoryController) -> None:
    created = run(
        server,
        "topics", "create", "--name", "orders", "--topic", "payments",
        "--partitions", "3", "--replication-factor", "2", "--config", "retention.ms=1000",
    )  # fmt: skip
    assert created.exit_code == 0, created.output
    assert "orders" in created.stdout and "payments" in created.stdout and "OK" in created.stdout
    listed = run(server, "topics", "list")
    assert listed.exit_code == 0 and "orders" in listed.stdout
    described = run(server, "topics", "describe", "--name", "orders")
    assert described.exit_code == 0
    assert described.stdout.count("orders") == 3  # one row per partition
    grown = run(server, "topics", "add-partitions", "--topic", "orders", "--partitions", "5")
    assert grown.exit_code == 0, grown.output
    deleted = run(server, "topics", "delete", "--name", "payments")
    assert deleted.exit_code == 0
    assert [t.name for t in controller.state.replication.list_topics()] == ["orders"]


def test_json_output_is_machine_readable(server: ApiServer) -> None:
    code, created = run_json(
        server, "topics", "create", "--name", "t", "--partitions", "2", "--replication-factor", "3"
    )
    assert code == 0
    assert created[0]["name"] == "t" and created[0]["error"] == {"code": "NONE", "message": ""}
    assert created[0]["num_partitions"] == 2
    code, described = run_json(server, "topics", "describe")
    assert code == 0 and described[0]["partitions"][0]["registration"]["replicas"]
    assert described[0]["partitions"][0]["registration"]["leader_recovery_state"] == "RECOVERED"
    code, listed = run_json(server, "topics", "list")
    assert listed == [{"name": "t", "topic_id": created[0]["topic_id"]}]
    code, cluster = run_json(server, "cluster", "describe")
    assert [b["broker_id"] for b in cluster["brokers"]] == [1, 2, 3]
    assert cluster["brokers"][0]["rack"] == "a"
    code, quorum = run_json(server, "quorum", "describe")
    assert quorum["leader_id"] == quorum["voters"][0]["replica_id"] == server.facade.node_id
    code, feats = run_json(server, "features", "describe")
    assert feats["features"][0]["name"] == "metadata.version"
    assert feats["release"] == __version__
    # Each quorum member with the range it said it supports (null: not said).
    assert [n["node_id"] for n in feats["nodes"]] == [
        v["replica_id"] for v in quorum["voters"] + quorum["observers"]]
    assert all(n["metadata_version"] is None or len(n["metadata_version"]) == 2
               for n in feats["nodes"])


def test_some_items_failing_exits_1_and_prints_each_error(
    server: ApiServer, controller: InMemoryController
) -> None:
    result = run(server, "topics", "create", "--name", "good", "--name", "bad/name")
    assert result.exit_code == 1
    assert "bad/name: INVALID_TOPIC_EXCEPTION" in result.stderr
    assert "1 of 2 items failed" in result.stderr
    assert [t.name for t in controller.state.replication.list_topics()] == ["good"]
    code, out = run_json(server, "topics", "delete", "--name", "ghost")
    assert code == 1 and out[0]["error"]["code"] == "UNKNOWN_TOPIC_OR_PARTITION"
    assert run(server, "topics", "describe", "--name", "ghost").exit_code == 1
    assert run(server, "brokers", "unregister", "--id", "99").exit_code == 1


def test_validate_only_creates_nothing(server: ApiServer, controller: InMemoryController) -> None:
    before = controller.record_count
    result = run(server, "topics", "create", "--name", "t", "--validate-only")
    assert result.exit_code == 0 and "validate only" in result.stdout
    assert controller.record_count == before


def test_configs_describe_and_alter(server: ApiServer) -> None:
    assert run(server, "topics", "create", "--name", "t").exit_code == 0
    altered = run(
        server,
        "configs", "alter", "--entity-type", "topic", "--entity-name", "t",
        "--set", "retention.ms=5000", "--append", "cleanup.policy=compact",
    )  # fmt: skip
    assert altered.exit_code == 0, altered.output
    code, described = run_json(
        server, "configs", "describe", "--entity-type", "topic", "--entity-name", "t"
    )
    assert code == 0
    entries = {e["key"]: e for e in described["entries"]}
    assert entries["retention.ms"]["value"] == "5000"
    assert entries["retention.ms"]["source"] == "DYNAMIC_TOPIC"
    assert entries["cleanup.policy"]["value"] == "delete,compact"
    table = run(server, "configs", "describe", "--entity-type", "cluster")
    assert table.exit_code == 0 and "num.partitions" in table.stdout
    reset = run(
        server, "configs", "alter", "--entity-type", "topic", "--entity-name", "t",
        "--delete", "retention.ms", "--subtract", "cleanup.policy=compact",
    )  # fmt: skip
    assert reset.exit_code == 0, reset.output
    bad = run(
        server, "configs", "alter", "--entity-type", "broker", "--entity-name", "1",
        "--set", "no.such.key=1",
    )  # fmt: skip
    assert bad.exit_code == 1 and "INVALID_CONFIG" in bad.stderr


def test_reassign_start_list_cancel_and_elect(server: ApiServer, tmp_path: Path) -> None:
    assert run(server, "topics", "create", "--name", "t", "--partitions", "2",
               "--replication-factor", "1").exit_code == 0  # fmt: skip
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": "t", "partition": 0, "replicas": [1, 2, 3]},
        {"topic": "t", "partition": 9, "replicas": [1]},
    ]}))  # fmt: skip
    started = run(server, "reassign", "start", "--file", str(plan))
    assert started.exit_code == 1  # partition 9 does not exist; partition 0 was started
    assert "t-9: UNKNOWN_TOPIC_OR_PARTITION" in started.stderr
    one = run(server, "reassign", "start", "--topic", "t", "--partition", "1", "--replicas", "2,3")
    assert one.exit_code == 0, one.output
    assert run(server, "reassign", "list").exit_code == 0
    code, ongoing = run_json(server, "reassign", "list")
    assert code == 0 and isinstance(ongoing, list)
    cancel = run(server, "reassign", "cancel", "--topic", "t", "--partition", "0")
    assert cancel.exit_code in (0, 1)  # 1 when the move already completed
    elected = run(server, "elect-leaders", "--all-topic-partitions")
    assert elected.exit_code in (0, 1), elected.output
    one_topic = run(server, "elect-leaders", "--topic", "t", "--election-type", "unclean")
    # Nothing to do is the outcome asked for: safe to repeat in a script.
    assert one_topic.exit_code == 0 and "ELECTION_NOT_NEEDED" in one_topic.stdout


def test_cluster_quorum_features_brokers(server: ApiServer) -> None:
    cluster = run(server, "cluster", "describe")
    assert cluster.exit_code == 0 and "local-cluster" in cluster.stdout
    assert "PLAINTEXT://localhost:9001" in cluster.stdout
    replication = run(server, "quorum", "describe", "--replication")
    assert replication.exit_code == 0 and "leader" in replication.stdout
    assert "high watermark" in run(server, "quorum", "describe").stdout
    assert "metadata.version" in run(server, "features", "describe").stdout
    upgrade = run(server, "features", "upgrade", "--metadata-version",
                  str(LATEST_METADATA_VERSION))
    assert upgrade.exit_code == 0, upgrade.output
    downgrade = run(server, "features", "upgrade", "--feature", "metadata.version=1")
    assert downgrade.exit_code == 1 and "INVALID_UPDATE_VERSION" in downgrade.stderr
    register_brokers(server.address, [7])
    assert run(server, "brokers", "unregister", "--id", "7").exit_code == 0


def test_bootstrap_from_the_environment(server: ApiServer) -> None:
    result = run(None, "topics", "list", env={"METAKRAFT_BOOTSTRAP": server.address})
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize(
    "args",
    [
        ["topics", "list"],  # no --bootstrap
        ["topics", "list", "--bootstrap", "nohostport"],
        ["topics", "create", "--bootstrap", "h:1"],  # no --name
        ["topics", "create", "--name", "t", "--config", "novalue", "--bootstrap", "h:1"],
        ["configs", "alter", "--entity-type", "topic", "--bootstrap", "h:1"],
        ["reassign", "start", "--topic", "t", "--bootstrap", "h:1"],
        ["reassign", "start", "--topic", "t", "--partition", "0", "--replicas", "a,b",
         "--bootstrap", "h:1"],
        ["elect-leaders", "--bootstrap", "h:1"],
        ["features", "upgrade", "--bootstrap", "h:1"],
    ],
)  # fmt: skip
def test_usage_errors_exit_2(args: list[str]) -> None:
    result = CliRunner().invoke(cli, args, env={"METAKRAFT_BOOTSTRAP": None})
    assert result.exit_code == 2, result.output


def test_no_controller_exits_3() -> None:
    for args in (["topics", "list"], ["topics", "create", "--name", "t"]):
        result = CliRunner().invoke(
            cli, [*args, "--bootstrap", dead_address(), "--timeout-ms", "300"]
        )
        assert result.exit_code == 3, result.output
        assert "no controller answered" in result.stderr


def test_unknown_outcome_exits_4_with_the_request_id(
    server: ApiServer, controller: InMemoryController
) -> None:
    # Every attempt times out until the command's deadline: the outcome stays unknown.
    controller.fail_always(ControllerTimeoutError("commit is slow"))
    result = run(server, "topics", "create", "--name", "t", "--timeout-ms", "600")
    assert result.exit_code == 4
    assert "outcome unknown" in result.stderr and "request id" in result.stderr
    assert controller.calls.count("CreateTopics") >= 2, "resent within the deadline"


def test_an_unknown_outcome_is_retried_and_succeeds(
    server: ApiServer, controller: InMemoryController
) -> None:
    controller.fail_next(ControllerTimeoutError("commit is slow"))
    result = run(server, "topics", "create", "--name", "t")
    assert result.exit_code == 0, result.stderr
    assert controller.calls.count("CreateTopics") == 2


def fence(address: str, broker_id: int, epoch: int) -> None:
    """A heartbeat asking to be fenced (as a broker does while it loads its state)."""
    channel = rpc.create_sync_channel(address)
    try:
        beat = bpb_grpc.BrokerLifecycleStub(channel).BrokerHeartbeat(
            bpb.BrokerHeartbeatRequest(cluster_id="local-cluster", broker_id=broker_id,
                                       broker_epoch=epoch, metadata_offset=1 << 40,
                                       want_fence=True), timeout=10)
        assert beat.is_fenced, beat
    finally:
        channel.close()


def test_filters_verify_and_kafka_aliases(server: ApiServer) -> None:
    epochs = register_brokers(server.address, [4])
    for name, plan in (("u", "4:1:2,1:2:3"), ("solo", "4,1")):
        created = run(server, "topics", "create", "--name", name, "--replica-assignment", plan)
        assert created.exit_code == 0, created.output
    fence(server.address, 4, epochs[4])
    # Kafka's filters: u-0 lost an ISR member, solo-0 its only replica (no leader).
    code, under = run_json(server, "topics", "describe", "--under-replicated-partitions")
    assert code == 0
    assert [(t["name"], [p["partition_id"] for p in t["partitions"]]) for t in under] == \
        [("u", [0])]
    code, offline = run_json(server, "topics", "describe", "--unavailable-partitions")
    assert [(t["name"], [p["partition_id"] for p in t["partitions"]]) for t in offline] == \
        [("solo", [0])]
    # --bootstrap-server is Kafka's name for --bootstrap.
    aliased = CliRunner().invoke(cli, ["topics", "list", "--bootstrap-server", server.address])
    assert aliased.exit_code == 0 and "solo" in aliased.stdout
    # reassign verify: complete (the replicas are the target, nothing moving), or not.
    done = run(server, "reassign", "verify", "--topic", "u", "--partition", "1",
               "--replicas", "1,2,3")
    assert done.exit_code == 0 and "complete" in done.stdout, done.output
    code, rows = run_json(server, "reassign", "verify", "--topic", "u", "--partition", "1",
                          "--replicas", "2,3")
    assert code == 1 and rows[0]["state"] == "not the target"
    # A topic that does not exist: JSON still says so (not an empty output).
    code, missing = run_json(server, "elect-leaders", "--topic", "nope")
    assert code == 1 and missing[0]["error"]["code"] == "UNKNOWN_TOPIC_OR_PARTITION"
    # A downgrade names the command that does it; without --unsafe it is refused.
    up = run(server, "features", "upgrade", "--metadata-version", str(LATEST_METADATA_VERSION))
    assert up.exit_code == 0, up.output
    refused = run(server, "features", "upgrade", "--metadata-version", "2")
    assert refused.exit_code == 1 and "features downgrade --unsafe" in refused.stderr
    # The CLI's writes were remembered (request ids) at level 4: a safe downgrade to 3
    # would lose that table, so it is refused saying why; --unsafe drops it.
    safe = run(server, "features", "downgrade", "--metadata-version", "3")
    assert safe.exit_code == 1 and "request-result table holds" in safe.stderr, safe.output
    down = run(server, "features", "downgrade", "--metadata-version", "2", "--unsafe")
    assert down.exit_code == 0, down.output


def test_version_and_broker_status_exit_codes() -> None:
    version = CliRunner().invoke(cli, ["--version"])
    assert version.exit_code == 0 and version.stdout.startswith("metakraft ")
    unreachable = CliRunner().invoke(cli, ["broker-status", "--address", dead_address(),
                                           "--timeout-ms", "500"])
    assert unreachable.exit_code == 3 and unreachable.stderr.startswith("error: broker ")
    assert CliRunner().invoke(cli, ["broker-status", "--address", "x:1", "--output",
                                    "text"]).exit_code == 2


def test_a_leadership_transfer_that_lost_its_election_is_asked_again() -> None:
    """Another controller won the election the hand-over started: the client asks the
    new leader again (a few times), and reports the outcome it ends with."""
    from controller.api.client import AdminClient
    from controller.api.seam import TransferOutcome
    from controller.metadata import ApiError, ErrorCode

    lost = TransferOutcome(ApiError(ErrorCode.REQUEST_TIMED_OUT, "3001 took over"), 3001, 3)
    won = TransferOutcome(ApiError(ErrorCode.NONE), 3002, 4)
    refused = TransferOutcome(ApiError(ErrorCode.VOTER_NOT_FOUND, "not a voter"), 3000, 2)
    for answers, want, calls in (([lost, won], won, 2), ([lost, lost, lost], lost, 3),
                                 ([refused], refused, 1)):
        client = AdminClient(["127.0.0.1:1"], timeout_ms=30_000)
        given = list(answers)
        client.call = lambda *_a, given=given, **_k: given.pop(0)  # type: ignore[method-assign]
        assert client.transfer_leadership(3002) == want
        assert len(answers) - len(given) == calls
        client.close()
