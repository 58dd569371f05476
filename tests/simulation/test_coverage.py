"""The coverage gate itself (coverage.py): it judges merged counts, names what fell
short, and leaves small runs alone."""

from __future__ import annotations

from collections import Counter

from tests.simulation import coverage


def test_a_path_never_exercised_is_named() -> None:
    counts = {"raft": Counter(seeds=300, epochs=10_000)}
    lines, problems = coverage.judge(counts)
    assert lines == [f"raft simulation: 300 seeds, {len(problems)} paths short"]
    assert "raft simulation: truncations = 0, want more than 75 (divergent tails get cut)" \
        in problems
    assert not any("epochs" in p for p in problems)


def test_counts_from_workers_add_up() -> None:
    merged: dict[str, Counter[str]] = {}
    coverage.merge(merged, {"system": {"seeds": 150, "fenced": 40}})
    coverage.merge(merged, {"system": {"seeds": 150, "fenced": 40}})
    assert merged["system"]["seeds"] == 300 and merged["system"]["fenced"] == 80
    _, problems = coverage.judge(merged)
    assert not any(p.startswith("system simulation: fenced") for p in problems)  # 80 > 75
    merged["system"]["fenced"] = 75
    _, problems = coverage.judge(merged)
    assert any(p.startswith("system simulation: fenced = 75") for p in problems)


def test_runs_of_a_few_seeds_are_not_judged() -> None:
    assert coverage.judge({"raft": Counter(seeds=coverage.MIN_SEEDS - 1)}) == ([], [])
