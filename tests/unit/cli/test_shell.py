"""`metakraft shell`'s interpreter and tree, without processes: an image replayed from
records the controller's own managers generate, browsed with the shell's commands."""

from __future__ import annotations

import json
import random

from controller.cli.shell_cmd import Shell, complete, split_commands
from controller.cli.shell_sources import ImageBuilder
from controller.logformat import EMPTY_ORIGIN, RecordBatch
from controller.metadata import (
    LATEST_METADATA_VERSION,
    METADATA_VERSION,
    BrokerHeartbeatRequest,
    BrokerRegistrationRequest,
    CreatableTopic,
    MetadataState,
)
from controller.raft.control import encode_leader_change
from controller.records import encode_record
from controller.records.domain import FeatureRange, Listener


def batches() -> list[RecordBatch]:
    """A leader change, the feature level, three brokers, then "orders" (12 partitions)
    and "audit" (1): each its own batch, as the controller writes them."""
    state = MetadataState(cluster_id="c", rng=random.Random(1))
    out = [RecordBatch(0, 1, 0, True, EMPTY_ORIGIN,
                       (encode_leader_change(3000, 1, [3000, 3001], [3000]),))]

    def add(records: list[object]) -> None:
        base = out[-1].next_offset
        state.replay_batch(records, base)  # type: ignore[arg-type]
        out.append(RecordBatch(base, 1, 0, False, EMPTY_ORIGIN,
                               tuple(encode_record(r) for r in records)))  # type: ignore[arg-type]

    add(list(state.features.bootstrap_records(LATEST_METADATA_VERSION)))
    for broker in (1, 2, 3):
        reply = state.cluster.register_broker(BrokerRegistrationRequest(
            broker_id=broker, cluster_id="c", incarnation_id=f"i{broker}",
            listeners=(Listener("SSL", "h", 9000 + broker, "SSL"),),
            features=(FeatureRange(METADATA_VERSION, 1, LATEST_METADATA_VERSION),)),
            next_offset=out[-1].next_offset, now_ms=0)
        add(list(reply.records))
        epoch = state.cluster.broker(broker).broker_epoch  # type: ignore[union-attr]
        add(list(state.cluster.process_heartbeat(
            BrokerHeartbeatRequest(broker, epoch, 1 << 40), now_ms=0).records))
    for topic, count in (("orders", 12), ("audit", 1)):
        created = state.replication.create_topics([CreatableTopic(topic, count, 2)],
                                                  validate_only=False)
        add(list(created.records))
    return out


def shell_at(until: int | None = None) -> tuple[Shell, ImageBuilder]:
    builder = ImageBuilder("test records")
    for batch in batches():
        builder.apply(batch) if until is None else builder.apply(batch, until)
    return Shell(lambda: builder.source), builder


def run(shell: Shell, line: str) -> tuple[list[str], list[str]]:
    outcome = shell.run_line(line)
    return outcome.out, outcome.err


def test_browse_the_tree_with_ls_cd_cat_and_globs() -> None:
    shell, builder = shell_at()
    out, err = run(shell, "ls")
    assert err == [] and out == ["acls/", "brokers/", "configs/", "features/", "offset",
                                 "quorum/", "tier/", "topicIds/", "topics/"]
    assert run(shell, "ls /topics") == (["audit/", "orders/"], [])
    # Partitions in numeric order, then the id.
    out, _ = run(shell, "cd /topics/orders; ls")
    assert out == [*map(str, range(12)), "id"]
    assert run(shell, "pwd") == (["/topics/orders"], [])
    part = json.loads(run(shell, "cat 11")[0][0])
    registration = builder.source.state.replication.partitions(
        run(shell, "cat id")[0][0])[11]
    assert part["replicas"] == list(registration.replicas)
    assert part["leader"] == registration.leader
    assert sorted(run(shell, "cat ../../topicIds/*")[0]) == ["audit", "orders"]
    assert len(run(shell, "cat /topics/orders/1*")[0]) == 3  # 1, 10, 11
    broker = json.loads(run(shell, "cat /brokers/2")[0][0])
    assert broker["fenced"] is False and broker["listeners"][0]["security_protocol"] == "SSL"
    assert run(shell, "cat /features/metadata.version")[0] == [str(LATEST_METADATA_VERSION)]
    leader = json.loads(run(shell, "cat /quorum/leader")[0][0])
    assert leader == {"leader_id": 3000, "epoch": 1, "voters": [3000, 3001],
                      "granting_voters": [3000]}
    assert run(shell, "cat /offset")[0] == [f"{builder.source.offset} (test records)"]


def test_find_and_tree() -> None:
    shell, _ = shell_at()
    out, err = run(shell, "find /topics/audit")
    assert err == [] and out == ["/topics/audit/", "/topics/audit/0", "/topics/audit/id"]
    assert run(shell, "find / -name metadata.*")[0] == ["/features/metadata.version"]
    out, _ = run(shell, "tree /brokers")
    assert out == ["/brokers", "  1", "  2", "  3"]


def test_mistakes_are_errors_and_change_nothing() -> None:
    shell, _ = shell_at()
    assert run(shell, "cd /topics")[1] == []
    assert run(shell, "cd nope")[1] == ["cd: /topics/nope: no such file or directory"]
    assert run(shell, "cd /offset")[1] == ["cd: /offset: not a directory"]
    assert run(shell, "pwd")[0] == ["/topics"]  # unchanged
    assert run(shell, "cat /topics")[1] == ["cat: /topics: is a directory"]
    assert run(shell, "cat /topics/orders/99")[1] == [
        "cat: /topics/orders/99: no such file or directory"]
    assert run(shell, "ls /topics/x*")[1] == ["ls: /topics/x*: no match"]
    assert run(shell, "rm -rf /")[1] == ["rm: unknown command (try help)"]
    assert run(shell, 'cat "unclosed')[1][0].startswith("cannot parse")
    outcome = shell.run_line("pwd; exit; pwd")
    assert outcome.leave and outcome.out == ["/topics"]


def test_an_image_at_an_offset_holds_only_what_came_before() -> None:
    every = batches()
    audit_batch = every[-1]
    shell, builder = shell_at(until=audit_batch.base_offset - 1)
    assert builder.source.offset == audit_batch.base_offset - 1
    assert run(shell, "ls /topics")[0] == ["orders/"]
    # Half a batch: the records up to the offset, not the rest.
    shell, builder = shell_at(until=audit_batch.base_offset)
    assert builder.source.offset == audit_batch.base_offset


def test_split_commands_and_completion() -> None:
    assert split_commands("ls /a; cat 'x y';;pwd") == [["ls", "/a"], ["cat", "x y"], ["pwd"]]
    shell, _ = shell_at()
    assert list(complete(shell, "c")) == [("cd", 1), ("cat", 1)]
    assert list(complete(shell, "cat /topics/or")) == [("orders/", 2)]
    assert list(complete(shell, "ls /to")) == [("topicIds/", 2), ("topics/", 2)]
    assert ("11", 1) in list(complete(shell, "cat /topics/orders/1"))
    assert list(complete(shell, "cat /nope/")) == []
