"""The table of known dynamic config keys: type, default, allowed values, resources.

A value is validated and normalised here (``normalize``) before any ConfigRecord is
generated, so the log only ever holds canonical values ("true", "5",
"compact,delete"). Key names follow Kafka's topic-level names; broker-level keys that
also apply to topics use the same name (a simplification of Kafka's ``log.``-prefixed
broker names) so a topic falls back to the cluster-wide broker default of the same key.
"""

from __future__ import annotations

import enum
import re

import attrs

from controller.records import metadata_pb2 as pb

INT_MAX = 2**31 - 1
LONG_MAX = 2**63 - 1
_INTEGER = re.compile(r"-?[0-9]+")


class ResourceType(enum.IntEnum):
    """Config resource kinds (values = ConfigResourceType wire values)."""

    TOPIC = pb.CONFIG_RESOURCE_TYPE_TOPIC
    BROKER = pb.CONFIG_RESOURCE_TYPE_BROKER
    CLUSTER = pb.CONFIG_RESOURCE_TYPE_CLUSTER


class ConfigType(enum.StrEnum):
    BOOLEAN = "BOOLEAN"
    INT = "INT"
    LONG = "LONG"
    STRING = "STRING"
    LIST = "LIST"


TOPIC = frozenset({ResourceType.TOPIC})
TOPIC_AND_BROKER = frozenset({ResourceType.TOPIC, ResourceType.BROKER})
BROKER = frozenset({ResourceType.BROKER})
BROKER_AND_CLUSTER = frozenset({ResourceType.BROKER, ResourceType.CLUSTER})


@attrs.frozen
class ConfigKey:
    name: str
    type: ConfigType
    default: str
    applies_to: frozenset[ResourceType]
    doc: str
    # Inclusive bounds for INT/LONG.
    minimum: int | None = None
    maximum: int | None = None
    # Allowed values for STRING, allowed items for LIST; None = anything.
    choices: frozenset[str] | None = None
    # Written by metakraft itself (`storage restore`), never by AlterConfigs.
    read_only: bool = False

    def allowed(self) -> str:
        """What values are allowed, for error messages."""
        if self.type is ConfigType.BOOLEAN:
            return "true or false"
        if self.type in (ConfigType.INT, ConfigType.LONG):
            low = "-inf" if self.minimum is None else str(self.minimum)
            high = INT_MAX if self.type is ConfigType.INT else LONG_MAX
            high = high if self.maximum is None else self.maximum
            return f"an integer in [{low}, {high}]"
        if self.type is ConfigType.LIST:
            items = "any" if self.choices is None else ", ".join(sorted(self.choices))
            return f"a non-empty comma-separated list of: {items}"
        return "any string" if self.choices is None else "one of " + ", ".join(sorted(self.choices))

    def normalize(self, value: str) -> str | None:
        """The canonical form of ``value``, or None if it is not allowed."""
        text = value.strip()
        if self.type is ConfigType.BOOLEAN:
            lowered = text.lower()
            return lowered if lowered in ("true", "false") else None
        if self.type in (ConfigType.INT, ConfigType.LONG):
            # ASCII digits only: `int` also takes "1_000" and other scripts' digits.
            if not _INTEGER.fullmatch(text):
                return None
            # Out of range past 19 significant digits; and CPython's int() refuses
            # strings of more than 4,300 digits with a ValueError of its own.
            digits = text.lstrip("+-").lstrip("0") or "0"
            if len(digits) > len(str(LONG_MAX)):
                return None
            number = int(("-" if text.startswith("-") else "") + digits, 10)
            high = INT_MAX if self.type is ConfigType.INT else LONG_MAX
            if self.maximum is not None:
                high = min(high, self.maximum)
            low = -high - 1 if self.minimum is None else self.minimum
            return str(number) if low <= number <= high else None
        if self.type is ConfigType.LIST:
            items = split_list(text)
            if not items or (self.choices is not None and not set(items) <= self.choices):
                return None
            return join_list(items)
        if self.choices is not None and text not in self.choices:
            return None
        return text


def split_list(value: str) -> list[str]:
    """Items of a comma-separated list, stripped, empty items dropped, first kept."""
    items: list[str] = []
    for part in value.split(","):
        item = part.strip()
        if item and item not in items:
            items.append(item)
    return items


def join_list(items: list[str]) -> str:
    return ",".join(items)


CLUSTER = frozenset({ResourceType.CLUSTER})
# The link a restored cluster keeps to the one it was restored from (`metakraft
# storage restore` puts them in the restored snapshot).
RESTORED_FROM_CLUSTER_ID = "restored.from.cluster.id"
RESTORED_FROM_OFFSET = "restored.from.offset"
_KEYS = (
    ConfigKey(
        "cleanup.policy",
        ConfigType.LIST,
        "delete",
        TOPIC,
        "How old log segments are discarded: by time/size (delete) or by key (compact).",
        choices=frozenset({"delete", "compact"}),
    ),
    ConfigKey(
        "compression.type",
        ConfigType.STRING,
        "producer",
        TOPIC_AND_BROKER,
        "Final compression of the topic's data; producer keeps the producer's codec.",
        choices=frozenset({"uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"}),
    ),
    ConfigKey(
        "retention.ms",
        ConfigType.LONG,
        "604800000",
        TOPIC_AND_BROKER,
        "How long data is kept before deletion; -1 keeps it forever.",
        minimum=-1,
    ),
    ConfigKey(
        "retention.bytes",
        ConfigType.LONG,
        "-1",
        TOPIC_AND_BROKER,
        "Maximum size of a partition's log before old segments go; -1 = unlimited.",
        minimum=-1,
    ),
    ConfigKey(
        "segment.bytes",
        ConfigType.INT,
        "1073741824",
        TOPIC_AND_BROKER,
        "Size of one log segment file.",
        minimum=14,
    ),
    ConfigKey(
        "segment.ms",
        ConfigType.LONG,
        "604800000",
        TOPIC_AND_BROKER,
        "Time after which a segment is rolled even if not full.",
        minimum=1,
    ),
    ConfigKey(
        "min.insync.replicas",
        ConfigType.INT,
        "1",
        TOPIC_AND_BROKER,
        "Minimum in-sync replicas for an acks=all write to succeed.",
        minimum=1,
    ),
    ConfigKey(
        "unclean.leader.election.enable",
        ConfigType.BOOLEAN,
        "false",
        TOPIC_AND_BROKER,
        "Whether a replica outside the ISR may become leader (risks data loss).",
    ),
    ConfigKey(
        "max.message.bytes",
        ConfigType.INT,
        "1048588",
        TOPIC_AND_BROKER,
        "Largest record batch size accepted.",
        minimum=0,
    ),
    ConfigKey(
        "delete.retention.ms",
        ConfigType.LONG,
        "86400000",
        TOPIC_AND_BROKER,
        "How long delete tombstones are kept in compacted topics.",
        minimum=0,
    ),
    ConfigKey(
        "message.timestamp.type",
        ConfigType.STRING,
        "CreateTime",
        TOPIC_AND_BROKER,
        "Whether record timestamps are the producer's or the append time.",
        choices=frozenset({"CreateTime", "LogAppendTime"}),
    ),
    ConfigKey(
        "num.partitions",
        ConfigType.INT,
        "1",
        BROKER_AND_CLUSTER,
        "Partitions of a new topic whose request leaves the count to the default.",
        minimum=1,
    ),
    ConfigKey(
        "default.replication.factor",
        ConfigType.INT,
        "1",
        BROKER_AND_CLUSTER,
        "Replication factor of a new topic whose request leaves it to the default.",
        minimum=1,
        maximum=32767,
    ),
    ConfigKey(
        "background.threads",
        ConfigType.INT,
        "10",
        BROKER,
        "Threads a broker uses for background work.",
        minimum=1,
    ),
    ConfigKey(RESTORED_FROM_CLUSTER_ID, ConfigType.STRING, "", CLUSTER,
              "The cluster id this cluster was restored from by `metakraft storage "
              "restore` (empty: never restored). Read-only.", read_only=True),
    ConfigKey(RESTORED_FROM_OFFSET, ConfigType.LONG, "-1", CLUSTER,
              "The end offset of the history it was restored from (its state holds "
              "that cluster's offsets below this; its own log continues from here). "
              "Read-only.", minimum=-1, read_only=True),
)

CONFIG_KEYS: dict[str, ConfigKey] = {key.name: key for key in _KEYS}
assert len(CONFIG_KEYS) == len(_KEYS), "config key names are unique"
for _key in _KEYS:
    assert _key.normalize(_key.default) == _key.default, f"default of {_key.name} is canonical"
