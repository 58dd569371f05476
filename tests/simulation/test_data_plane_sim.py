"""The data-plane simulation (data_plane.py): seeds that must pass, and planted bugs
that must fail one.

    DATA_SIM_SEEDS=2000 .venv/bin/python -m pytest tests/simulation/test_data_plane_sim.py -q
    DATA_SIM_SEED=17 .venv/bin/python -m pytest tests/simulation/test_data_plane_sim.py -q
"""

from __future__ import annotations

import os

import pytest

from tests.simulation.data_plane import Stats, run
from tests.simulation.invariants import InvariantViolation

pytestmark = pytest.mark.simulation

DEFAULT_SEEDS = 200
CHUNK = 50


def _chunks() -> list[range]:
    if "DATA_SIM_SEED" in os.environ:
        seed = int(os.environ["DATA_SIM_SEED"])
        return [range(seed, seed + 1)]
    count = int(os.environ.get("DATA_SIM_SEEDS", DEFAULT_SEEDS))
    return [range(s, min(s + CHUNK, count)) for s in range(0, count, CHUNK)]


@pytest.mark.parametrize("seeds", _chunks(), ids=lambda r: f"{r.start}-{r.stop - 1}")
def test_no_acknowledged_record_is_lost_and_logs_never_diverge(seeds: range) -> None:
    total = Stats()
    for seed in seeds:
        try:
            stats = run(seed)
        except InvariantViolation as exc:
            pytest.fail(f"{exc}\nreplay: DATA_SIM_SEED={seed} .venv/bin/python -m pytest "
                        "tests/simulation/test_data_plane_sim.py -q")
        total.acked += stats.acked
        total.leader_changes += stats.leader_changes
        total.truncations += stats.truncations
        total.isr_reports += stats.isr_reports
    # The faults happened: records were acknowledged, leaders changed, tails were cut,
    # leaders reported ISR changes.
    assert total.acked > 0 and total.leader_changes > 0, total
    if len(seeds) >= 20:
        assert total.truncations > 0 and total.isr_reports > 0, total


@pytest.mark.parametrize("bug", ["apply-isr-early", "skip-truncation"])
def test_a_planted_bug_fails_a_seed(bug: str) -> None:
    for seed in range(300):
        try:
            run(seed, bugs=[bug])
        except InvariantViolation:
            return
    pytest.fail(f"no seed of 300 caught the planted bug {bug!r}")
