"""Session-consistent stale reads with real controller processes: a client's reads,
at whichever controller, never show older state than the client already saw
(ZooKeeper's session guarantee), because every read carries the highest committed
offset the session has seen (`min_offset`) and a controller answers only once it
has applied that far.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from controller.api.client import AdminClient, ControllerUnreachableError
from controller.api.seam import ReadConsistency
from controller.cli.main import cli
from controller.metadata import CreatableTopic
from tests.support.controller_processes import ControllerCluster
from tests.support.nemesis import Nemesis
from tests.support.polling import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[ControllerCluster, Nemesis]]:
    nemesis = Nemesis(seed=37)
    cluster = ControllerCluster(tmp_path, 3, nemesis=nemesis)
    try:
        cluster.start()
        yield cluster, nemesis
    finally:
        nemesis.close()
        cluster.close()


def stale_client(address: str, session_offset: int, timeout_ms: int = 10_000,
                 elsewhere: tuple[str, ...] = ()) -> AdminClient:
    """A client that reads at `address` (then at `elsewhere` if it keeps refusing),
    continuing a session at `session_offset`."""
    client = AdminClient([address, *elsewhere], timeout_ms=timeout_ms,
                         consistency=ReadConsistency.STALE)
    client.session_offset = session_offset
    return client


def test_a_session_never_reads_back_in_time_across_controllers(
        cluster: tuple[ControllerCluster, Nemesis]) -> None:
    controllers, nemesis = cluster
    leader = wait_until(controllers.active_node, 30, "an active controller")
    controllers.register_brokers([1])
    standby_id = next(i for i in controllers.nodes if i != leader.node_id)
    standby = controllers.addresses[standby_id]
    # One standby hears the leader late: its stale answers lag. (A loaded machine can
    # hold it back past its read wait: the reader then asks another controller, which
    # is what a client should do with BEHIND.)
    for direction in ((leader.node_id, standby_id), (standby_id, leader.node_id)):
        nemesis.delay(controllers.name(direction[0]), controllers.name(direction[1]), 50)
    rng = random.Random(37)
    created: list[str] = []
    seen = 0  # the session's offset: the highest committed end offset it was told
    history: list[tuple[str, int]] = []
    # The writer talks to the leader directly (a redirect would name the leader's
    # address as the answering controller dials it: through the delayed link).
    with AdminClient([leader.address], timeout_ms=20_000) as writer:
        for i in range(12):
            writer.session_offset = seen
            name = f"s{i}"
            assert writer.create_topics([CreatableTopic(name, 1, 1)])[0].error.ok
            created.append(name)
            assert writer.session_offset > seen, "a write names the offset that covers it"
            seen = writer.session_offset
            history.append(("write", seen))
            # Read it back from a controller picked at random, the lagging one often.
            address = standby if rng.random() < 0.6 else \
                rng.choice(list(controllers.addresses.values()))
            others = tuple(a for a in controllers.addresses.values() if a != address)
            with stale_client(address, seen, elsewhere=others) as reader:
                names = {t.name for t in reader.list_topics()}
                assert reader.last_read_offset is not None
                history.append(("read", reader.last_read_offset))
                # Read your writes, at any controller: every topic this session made.
                assert set(created) <= names, (address, sorted(created), sorted(names))
                assert reader.last_read_offset >= seen
                seen = reader.session_offset
    # The history checker: the offsets the session was answered at never go back.
    offsets = [offset for _, offset in history]
    assert offsets == sorted(offsets), history


def test_a_controller_that_cannot_catch_up_says_how_far_behind_it_is(
        cluster: tuple[ControllerCluster, Nemesis]) -> None:
    controllers, nemesis = cluster
    leader = wait_until(controllers.active_node, 30, "an active controller")
    controllers.register_brokers([1])
    standby_id = next(i for i in controllers.nodes if i != leader.node_id)
    # The standby stops hearing the others (clients still reach it).
    nemesis.isolate(controllers.name(standby_id), [controllers.name(i) for i in controllers.nodes])
    with AdminClient([a for i, a in controllers.addresses.items() if i != standby_id],
                     timeout_ms=20_000) as writer:
        assert writer.create_topics([CreatableTopic("fresh", 1, 1)])[0].error.ok
        seen = writer.session_offset
    # A session that saw "fresh" is never answered without it: the cut-off standby
    # waits, then refuses, naming where it is.
    with stale_client(controllers.addresses[standby_id], seen, timeout_ms=4_000) as reader:
        with pytest.raises(ControllerUnreachableError, match="BEHIND: .* short of the "
                           f"requested min_offset {seen}"):
            reader.list_topics()
        # Without the session (a fresh client) it answers at once, from its old state.
        reader.session_offset = 0
        assert "fresh" not in {t.name for t in reader.list_topics()}
        assert reader.last_read_offset is not None and reader.last_read_offset < seen
    # The CLI: --min-offset, the same refusal (exit 3, the reason on stderr).
    cli_args = ["topics", "list", "--bootstrap", controllers.addresses[standby_id],
                "--consistency", "stale", "--min-offset", str(seen), "--timeout-ms", "3000"]
    refused = CliRunner().invoke(cli, cli_args)
    assert refused.exit_code == 3 and "BEHIND" in refused.stderr, refused.output
    nemesis.heal()
    with stale_client(controllers.addresses[standby_id], seen) as reader:
        assert "fresh" in {t.name for t in reader.list_topics()}
        assert reader.last_read_offset is not None and reader.last_read_offset >= seen
        assert reader.last_high_watermark is not None
        assert reader.last_high_watermark >= reader.last_read_offset - 1
    listed = CliRunner().invoke(cli, cli_args)
    assert listed.exit_code == 0 and "fresh" in listed.stdout, listed.output
    assert "(stale read at committed offset" in listed.stderr
    assert "behind the high watermark it knew" in listed.stderr
