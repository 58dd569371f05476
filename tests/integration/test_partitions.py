"""Network partitions between controllers that keep running (tests/support/nemesis.py),
which kills and pauses cannot show: the guarantees a client builds on."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from controller.api.client import AdminClient, ControllerUnreachableError
from controller.api.seam import ReadConsistency
from controller.metadata import CreatableTopic
from tests.support.controller_processes import ControllerCluster
from tests.support.nemesis import Nemesis
from tests.support.polling import wait_until

pytestmark = pytest.mark.integration

# The cut-off leader keeps believing it leads this long (check quorum): the window in
# which, serving reads from its own state, it would answer stale ones.
CHECK_QUORUM_MS = 6_000


@pytest.fixture
def partitioned(tmp_path: Path) -> Iterator[tuple[ControllerCluster, Nemesis]]:
    nemesis = Nemesis(seed=7)
    cluster = ControllerCluster(
        tmp_path, 3, nemesis=nemesis,
        extra_config=f"[raft]\ncheck_quorum_timeout_ms = {CHECK_QUORUM_MS}\n")
    try:
        cluster.start()
        yield cluster, nemesis
    finally:
        nemesis.close()
        cluster.close()


def test_an_isolated_leader_never_answers_a_read_that_misses_a_committed_write(
        partitioned: tuple[ControllerCluster, Nemesis]) -> None:
    cluster, nemesis = partitioned
    old = wait_until(cluster.active_node, 30, "an active controller")
    cluster.register_brokers([1])
    with AdminClient(cluster.bootstrap, timeout_ms=20_000) as admin:
        assert admin.create_topics([CreatableTopic("before", 1, 1)])[0].error.ok
    # Cut the leader off from the other controllers; clients still reach everyone.
    nemesis.isolate(cluster.name(old.node_id), [cluster.name(i) for i in cluster.nodes])
    others = [a for i, a in cluster.addresses.items() if i != old.node_id]
    with AdminClient(others, timeout_ms=20_000) as majority:
        assert majority.create_topics([CreatableTopic("after", 1, 1)])[0].error.ok
        assert {t.name for t in majority.list_topics()} == {"before", "after"}
        after_offset = majority.last_read_offset
    assert after_offset is not None
    assert old.running and "event=leadership_lost" not in old.log_text(), \
        "the old leader must still think it leads for this test to mean anything"
    # A linearizable read at the old leader: it cannot confirm its leadership, so it
    # never answers one that misses "after" (before ReadIndex it answered {"before"}).
    with AdminClient([old.address], timeout_ms=2_000) as cut_off:
        try:
            names = {t.name for t in cut_off.list_topics()}
        except ControllerUnreachableError:
            names = None
        assert names is None or "after" in names, names
        # A stale read is answered at once from its own state, and says how old it is.
        cut_off.consistency = ReadConsistency.STALE
        assert {t.name for t in cut_off.list_topics()} == {"before"}
        assert cut_off.last_read_offset is not None and cut_off.last_read_offset < after_offset
    nemesis.heal()
    with AdminClient([old.address, *others], timeout_ms=20_000) as healed:
        names = wait_until(lambda: {t.name for t in healed.list_topics()} or None, 20,
                           "a read after healing")
        assert names == {"before", "after"}
