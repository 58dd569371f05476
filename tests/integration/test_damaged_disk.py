"""One damaged controller disk plus one crash loses no acknowledged write.

Three real controllers. Follower Y is stopped; a topic is created (acknowledged:
the leader L and follower X hold it); L is killed -9; X is stopped and its disk
damaged: one byte flipped in the middle of the last batch of its newest segment
(a complete, fsynced batch), or every segment file deleted (its quorum state
stays). X and Y alone would form a majority without the topic. X finds the
damage below its recovery point, takes no part in elections, so no controller
becomes active; once L returns, the topic is there and X repairs its log from
the leader and votes again.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from controller.api.client import AdminClient
from controller.logformat.batch import peek_batch_header
from controller.metadata import CreatableTopic
from controller.records import decode_record
from controller.storage.meta_properties import DataDir
from tests.support.controller_processes import ControllerCluster, ControllerProcess
from tests.support.polling import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

START_S = 20.0
# How long X and Y run together: many election timeouts (400 ms each).
LEADERLESS_WINDOW_S = 4.0


def segments(node: ControllerProcess) -> list[Path]:
    return sorted(DataDir(node.data_dir).log_dir.glob("*.log"))


def flip_byte_in_last_batch(segment: Path) -> bytes:
    """Flip a byte in the middle of the segment's last batch; returns that batch."""
    data = bytearray(segment.read_bytes())
    pos = last = 0
    while pos < len(data):
        last = pos
        pos += peek_batch_header(bytes(data), pos).size_bytes
    assert pos == len(data), "the segment ends at a batch boundary"
    batch = bytes(data[last:])
    data[last + len(batch) // 2] ^= 0xFF
    segment.write_bytes(bytes(data))
    return batch


def topic_names(node: ControllerProcess) -> set[str]:
    names = set()
    for batch in node.read_log():
        for data in batch.records:
            record = decode_record(data)
            if record.WhichOneof("record") == "topic":
                names.add(record.topic.name)
    return names


def active_among(nodes: list[ControllerProcess]) -> list[int]:
    return [n.node_id for n in nodes if "event=controller_active" in n.log_text()]


@pytest.mark.parametrize("damage", ["flipped-byte", "deleted-segments"])
def test_a_damaged_disk_plus_a_crash_loses_no_acknowledged_write(
        cluster: ControllerCluster, damage: str) -> None:
    leader = wait_until(cluster.active_node, START_S, "an active controller")
    x, y = (n for n in cluster.nodes.values() if n is not leader)
    assert y.terminate() == 0
    with AdminClient(cluster.bootstrap) as admin:
        created = admin.create_topics([CreatableTopic("acknowledged", 1, 1)])
    assert created[0].error.ok, created
    leader.kill()
    assert x.terminate() == 0
    assert "acknowledged" in topic_names(x)
    if damage == "flipped-byte":
        damaged = flip_byte_in_last_batch(segments(x)[-1])
        # The batch that would be cut is not a torn write: it is whole, and was fsynced.
        assert peek_batch_header(damaged, 0).size_bytes == len(damaged)
    else:
        for path in segments(x):
            path.unlink()

    # X and Y alone: no controller may become active without the topic.
    for node in (x, y):
        node.start()
    wait_until(lambda: "event=log_repair_pending" in x.log_text(), START_S,
               "X to report the damage")
    assert "log_end_offset=" in x.log_text()
    deadline = time.monotonic() + LEADERLESS_WINDOW_S
    while time.monotonic() < deadline:
        assert x.running and y.running, (x.log_text()[-3000:], y.log_text()[-3000:])
        assert not active_among([x, y]), "a leader was elected without the acknowledged write"
        time.sleep(0.2)

    # The old leader returns: the topic is there, X repairs and votes again.
    leader.start()
    wait_until(cluster.active_node, START_S, "an active controller")
    with AdminClient(cluster.bootstrap) as admin:
        assert [t.name for t in admin.list_topics()] == ["acknowledged"]
    wait_until(lambda: "event=log_repaired" in x.log_text(), START_S, "X to repair its log")
    assert not DataDir(x.data_dir).log_repair.exists()
    for node in cluster.nodes.values():
        assert node.terminate() == 0, node.log_text()[-3000:]
    assert "acknowledged" in topic_names(x)
