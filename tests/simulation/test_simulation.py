"""Seeded deterministic simulation of the Raft core (see cluster.py).

    .venv/bin/python -m pytest tests/simulation -q             # DEFAULT_SEEDS seeds
    SIM_SEEDS=20000 .venv/bin/python -m pytest tests/simulation -q
    SIM_SEED=1234 .venv/bin/python -m pytest tests/simulation -q   # replay one seed

A failure names the seed and the command that replays it.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from controller.raft.reads import ReadBarriers, ReadState
from controller.raft.state import NodeState
from controller.raft.voters import VoterSet
from tests.raft.harness import ScriptError, run_script
from tests.simulation.cluster import run_seed
from tests.simulation.coverage import COUNTS
from tests.simulation.invariants import InvariantViolation

# The default run's share of the suite's time (2 workers, CI's 30-minute limit): a
# chunk of 100 seeds is 11-25 s of one core; longer sweeps with SIM_SEEDS. The Raft core
# also runs under these faults in every seed of the whole-system simulation
# (test_system.py), so this one runs 1,200 by default, not more.
DEFAULT_SEEDS = 1200
CHUNK = 100

pytestmark = pytest.mark.simulation


def _seed_ranges() -> list[range]:
    if "SIM_SEED" in os.environ:
        seed = int(os.environ["SIM_SEED"])
        return [range(seed, seed + 1)]
    count = int(os.environ.get("SIM_SEEDS", DEFAULT_SEEDS))
    start = int(os.environ.get("SIM_START", 0))
    return [range(s, min(s + CHUNK, start + count)) for s in range(start, start + count, CHUNK)]


# Judged once per session over every chunk that ran (coverage.py).
_coverage = COUNTS["raft"]


@pytest.mark.parametrize("seeds", _seed_ranges(), ids=lambda r: f"seeds{r.start}-{r.stop - 1}")
def test_seeds(seeds: range) -> None:
    for seed in seeds:
        cluster = run_seed(seed)  # raises with the replay command on any violation
        _coverage["seeds"] += 1
        _coverage["epochs"] += len(cluster.history.leaders)
        _coverage["committed_offsets"] += cluster.history.committed_end
        _coverage["snapshot_loads"] += sum(n.snapshots_loaded for n in cluster.nodes.values())
        _coverage["restarts"] += sum(max(0, n.incarnation - 1) for n in cluster.nodes.values())
        _coverage["truncations"] += cluster.truncations
        _coverage["zombie_resumes"] += cluster.zombie_resumes
        _coverage["reads_confirmed"] += cluster.reads_confirmed
        _coverage["dynamic_seeds"] += cluster.dynamic
        _coverage["voter_changes"] += cluster.voter_changes
        _coverage["wiped_disks"] += cluster.wipes
        _coverage["leader_self_removals"] += cluster.leader_self_removals
        _coverage["transfers"] += len(cluster.transfers)
        _coverage["transfers_completed"] += cluster.transfers_completed
        _coverage["damaged_disks"] += cluster.damages
        _coverage["repairs"] += cluster.repairs


def _first_failure(seeds: range) -> str | None:
    for seed in seeds:
        try:
            run_seed(seed)
        except InvariantViolation as exc:
            return str(exc)
    return None


def test_counting_a_wiped_disks_replica_as_the_voter_is_caught(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Directory ids are what keep a reformatted disk from standing in for the voter
    it replaced. A core that matched voters by node id alone lets the empty replica
    vote, and the two-fault script loses its acknowledged write."""
    monkeypatch.setattr(VoterSet, "is_voter",
                        lambda self, node_id, directory_id: self.get(node_id) is not None)
    monkeypatch.setattr(VoterSet, "directory_id_of", lambda self, node_id: "")
    script = Path(__file__).parent.parent / "raft" / "testdata" / "membership_lost_disk.txt"
    with pytest.raises(ScriptError, match="expect role 3 prospective"):
        run_script(script.read_text())


def test_two_voter_changes_at_once_are_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """A leader that appended a change while the previous one is uncommitted (the
    rule single-server changes rest on, thesis §4.1) is flagged."""
    monkeypatch.setattr(NodeState, "voter_change_pending", property(lambda self: False))
    failure = _first_failure(range(300))
    assert failure is not None and "uncommitted voter changes" in failure, failure


def test_a_leader_serving_reads_without_confirmation_is_caught(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A leader that confirmed reads at once, on its own word (what serving reads from
    committed state without ReadIndex amounts to), would answer stale reads when it is
    cut off and a newer leader commits: some seed must show it."""
    def at_once(self: ReadBarriers) -> list[ReadState]:
        out = [ReadState(read_id, index) for _, read_id, index in self.pending]
        self.pending.clear()
        return out

    monkeypatch.setattr(ReadBarriers, "confirmed", at_once)
    failure = None
    for seed in range(300):
        try:
            run_seed(seed)
        except InvariantViolation as exc:
            failure = str(exc)
            break
    assert failure is not None and "stale read" in failure, failure
