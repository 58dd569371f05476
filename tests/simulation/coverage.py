"""Did the simulations exercise what they exist for? A seed that passes proves
little if leaders never changed, disks were never damaged, sessions never expired.

Each simulation's seed chunks add their counts to `COUNTS[suite]`; the checks run
once per test session over every chunk that ran, wherever it ran: under
pytest-xdist each worker hands its counts to the controlling process
(`tests/conftest.py`), which merges them and fails the run if a path went
unexercised. Runs of fewer than `MIN_SEEDS` seeds of a suite are not judged.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

MIN_SEEDS = 200

COUNTS: dict[str, Counter[str]] = {"raft": Counter(), "system": Counter()}


def _checks(c: Counter[str], rules: list[tuple[str, int, str]]) -> list[str]:
    return [f"{name} = {c[name]}, want more than {minimum} ({why})"
            for name, minimum, why in rules if not c[name] > minimum]


def raft_problems(c: Counter[str]) -> list[str]:
    seeds = c["seeds"]
    return _checks(c, [
        ("epochs", seeds, "leaders change"),
        ("snapshot_loads", seeds // 4, "the late observer's snapshot path"),
        ("restarts", seeds, "nodes crash and restart"),
        ("truncations", seeds // 4, "divergent tails get cut"),
        ("committed_offsets", 50 * seeds, "records commit"),
        ("zombie_resumes", seeds // 20, "paused leaders came back"),
        ("reads_confirmed", 20 * seeds, "ReadIndex answered"),
        ("damaged_disks", seeds // 2, "disks lost flushed records"),
        ("repairs", c["damaged_disks"] // 2, "damaged logs healed"),
        # Membership: most seeds run a dynamic quorum and change it.
        ("dynamic_seeds", seeds // 2, "dynamic quorums"),
        ("voter_changes", seeds // 2, "voters added and removed"),
        ("wiped_disks", seeds // 10, "replicas replaced with empty disks"),
        ("leader_self_removals", seeds // 50, "a leader removed itself"),
        ("transfers", seeds // 4, "leadership transfers started"),
        ("transfers_completed", c["transfers"] // 4, "transfer targets took over"),
    ])


def system_problems(c: Counter[str]) -> list[str]:
    seeds = c["seeds"]
    return _checks(c, [
        ("answered", 30 * seeds, "requests answered"),
        ("reverts", seeds // 2, "leaders renounced and reverted"),
        ("snapshot_loads", seeds // 2, "snapshots loaded"),
        ("restarts", seeds, "nodes restarted"),
        ("fenced", seeds // 4, "sessions expired: brokers fenced"),
        ("topics", seeds, "topics created"),
        ("reassignments", seeds, "reassignments"),
        ("brokers_reconciled", seeds, "brokers reconciled"),
        ("broker_restarts", seeds // 10, "brokers restarted from their local state"),
        ("unknown_outcomes", seeds // 10, "orphaned writes"),
        ("snapshots_written", 2 * seeds, "snapshots written in chunks"),
        ("snapshots_lost_in_crash", seeds // 10, "crashes mid-snapshot"),
        ("linearizable_reads", 10 * seeds, "linearizable reads"),
        ("stale_reads", 4 * seeds, "stale reads"),
        ("session_reads", seeds, "stale reads with a min_offset"),
        ("retries_sent", 10 * seeds, "retries with the same request id"),
        ("retries_answered_from_table", seeds // 100, "retries answered from the table"),
        ("conditional_writes_applied", seeds, "conditional writes applied"),
        ("conditions_failed", seeds // 2, "conditional writes refused CONDITION_FAILED"),
        ("watched_changes", 20 * seeds, "changes a watcher took"),
        ("watch_resumptions", seeds // 4, "watches resumed at another controller"),
        # Membership through the active controller: removals, re-adds, wiped disks.
        ("voter_changes", seeds // 2, "voter changes"),
        ("wiped_controllers", seeds // 10, "controllers replaced with empty disks"),
        # Disks that lost flushed records, and replicas that repaired them.
        ("damaged_disks", seeds // 2, "disks lost flushed records"),
        ("repaired_logs", seeds // 4, "damaged logs repaired from a leader"),
        # The data plane (system_data.py).
        ("records_acknowledged", 10 * seeds, "acks=all records acknowledged"),
        ("isr_changes_committed", seeds // 2, "AlterPartition committed"),
        ("replica_truncations", seeds // 20, "divergent replica tails cut"),
        ("zombie_fetches_fenced", seeds // 20, "followers refused a zombie leader"),
        ("broker_crashes", seeds // 2, "broker processes crashed"),
        ("broker_pauses", seeds // 2, "broker processes paused"),
    ])


PROBLEMS: dict[str, Callable[[Counter[str]], list[str]]] = {
    "raft": raft_problems, "system": system_problems}


def merge(into: dict[str, Counter[str]], counts: dict[str, dict[str, int]]) -> None:
    for suite, values in counts.items():
        into.setdefault(suite, Counter()).update(values)


def judge(counts: dict[str, Counter[str]]) -> tuple[list[str], list[str]]:
    """(a line per suite judged, the problems found)."""
    lines: list[str] = []
    problems: list[str] = []
    for suite, c in sorted(counts.items()):
        if c["seeds"] < MIN_SEEDS:
            continue
        found = PROBLEMS[suite](c)
        lines.append(f"{suite} simulation: {c['seeds']} seeds, "
                     + ("every path exercised" if not found else f"{len(found)} paths short"))
        problems += [f"{suite} simulation: {p}" for p in found]
    return lines, problems
