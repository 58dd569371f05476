"""What each metadata.version level lets the cluster write: one table.

The rule operators rely on (Kafka's): software at an old level writes only what the
software of that level reads. So every record type and every behaviour that appends
records belongs to the level that introduced it, and each writer asks this table
before writing: the request-result table (machine.py), the tier copier's records
(metadata/tier.py), idle no-ops (machine.py). A level is raised with
`metakraft features upgrade` once every controller and broker supports it
(features.py checks the ranges they report).

Raft's own control records (leader changes, snapshot header and footer) are below
metadata.version; `VotersRecord` belongs to kraft.version, chosen when the data
directories are formatted (`--initial-controllers`).
"""

from __future__ import annotations

import enum

import attrs

from controller.records import RECORD_TYPES


class Feature(enum.Enum):
    """A behaviour a level turns on: (level, what it is, for messages and docs)."""

    REQUEST_RESULTS = (4, "exactly-once writes (the table of recent request ids)")
    REMOTE_TIER = (5, "the remote tier (copying log segments and snapshots)")
    IDLE_NO_OPS = (6, "idle no-op records (the log moves on an idle cluster)")
    REPLICA_REPORTED_ISR = (7, "replica-reported ISR (AlterPartition): partition leaders "
                            "report their in-sync replicas; a returning broker rejoins an "
                            "ISR only once its leader reports it caught up; eligible leader "
                            "replicas (KIP-966); a change removing a replica moves the "
                            "leader epoch")
    MOD_OFFSETS = (8, "mod offsets and conditional writes: every topic and config resource "
                   "names the offset of its last change, the same on every controller "
                   "(snapshots carry it); writes may be conditional on it")
    TIER_HASH_CHAIN = (9, "a tamper-evident tier: every tier object's manifest holds the "
                       "SHA-256 of its data, each log object's manifest the SHA-256 of the "
                       "previous one's (a hash chain), and the log records each manifest's "
                       "SHA-256 before its upload")

    @property
    def level(self) -> int:
        return self.value[0]

    @property
    def description(self) -> str:
        return self.value[1]


@attrs.frozen
class Level:
    level: int
    # The first release that writes at this level.
    release: str
    adds: str
    record_types: frozenset[str] = frozenset()


LEVELS: tuple[Level, ...] = (
    Level(1, "0.1.0", "brokers, topics, partitions, configs, features, ACLs, no-op records",
          frozenset({"register_broker", "unregister_broker", "broker_registration_change",
                     "topic", "partition", "partition_change", "remove_topic", "config",
                     "feature_level", "access_control_entry", "remove_access_control_entry",
                     "no_op"})),
    Level(2, "0.1.0", "nothing new (reserved by the first release)"),
    Level(3, "0.1.0", "nothing new (what releases before 0.3.0 bootstrap at)"),
    Level(4, "0.3.0", Feature.REQUEST_RESULTS.description, frozenset({"request_result"})),
    Level(5, "0.3.0", Feature.REMOTE_TIER.description,
          frozenset({"remote_log_segment", "remote_log_segment_state_change"})),
    Level(6, "0.3.0", Feature.IDLE_NO_OPS.description),
    Level(7, "0.4.0", Feature.REPLICA_REPORTED_ISR.description),
    Level(8, "0.4.0", Feature.MOD_OFFSETS.description),
    Level(9, "0.4.0", Feature.TIER_HASH_CHAIN.description),
)

MINIMUM_METADATA_VERSION = LEVELS[0].level
LATEST_METADATA_VERSION = LEVELS[-1].level

# Not metadata.version's: Raft's control records, and the voter set (kraft.version).
RAFT_RECORD_TYPES = frozenset({"leader_change", "snapshot_header", "snapshot_footer", "voters"})

_MIN_LEVEL: dict[str, int] = {name: level.level for level in LEVELS
                              for name in level.record_types}


def min_level(record_type: str) -> int:
    """The level that introduced `record_type` (a metadata record type name)."""
    return _MIN_LEVEL[record_type]


def enabled(feature: Feature, finalized_level: int) -> bool:
    return finalized_level >= feature.level


def needs_level(feature: Feature, finalized_level: int) -> str:
    """The message for a write the finalized level does not allow yet."""
    return (f"{feature.description} needs metadata.version {feature.level}; the cluster is "
            f"at {finalized_level}: run `metakraft features upgrade --metadata-version "
            f"{feature.level}` once every controller and broker runs a release that "
            "supports it")


def check_table() -> None:
    """Every record type the codec knows has exactly one home (a test calls this)."""
    placed = [name for level in LEVELS for name in level.record_types]
    assert len(placed) == len(set(placed)), "a record type is in two levels"
    missing = set(RECORD_TYPES) - set(placed) - RAFT_RECORD_TYPES
    assert not missing, f"record types without a metadata.version level: {sorted(missing)}"
    unknown = (set(placed) | RAFT_RECORD_TYPES) - set(RECORD_TYPES)
    assert not unknown, f"levels name unknown record types: {sorted(unknown)}"
    assert [level.level for level in LEVELS] == list(range(1, len(LEVELS) + 1))
