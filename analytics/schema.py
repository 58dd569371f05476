"""The stable row schema of the `metakraft` data source, as Arrow and as a Spark DDL string.

One row per record. Batch-level columns (`batch_base_offset`, `epoch`, `append_time`,
the origin, `is_control`) repeat on every record of the batch, so a record can be
filtered or grouped without a join. Every column is nullable: Spark checks that the
Arrow batches a Python source yields match the declared schema exactly (widths,
nullability, time zone), and declaring all-nullable on both sides keeps the two in
step with one rule.

Columns are only ever added at the end, never renamed or retyped (audits and
notebooks outside this repository select them by name).
"""

from __future__ import annotations

import pyarrow as pa

# (name, Arrow type, Spark SQL type) in column order.
_COLUMNS: tuple[tuple[str, pa.DataType, str], ...] = (
    ("offset", pa.int64(), "BIGINT"),
    ("batch_base_offset", pa.int64(), "BIGINT"),
    ("epoch", pa.int32(), "INT"),
    ("append_time", pa.timestamp("us", tz="UTC"), "TIMESTAMP"),
    ("record_type", pa.string(), "STRING"),
    ("version", pa.int32(), "INT"),
    ("topic_id", pa.string(), "STRING"),
    ("topic_name", pa.string(), "STRING"),
    ("partition_id", pa.int32(), "INT"),
    ("broker_id", pa.int32(), "INT"),
    ("resource_type", pa.string(), "STRING"),
    ("resource_name", pa.string(), "STRING"),
    ("principal", pa.string(), "STRING"),
    ("client_address", pa.string(), "STRING"),
    ("request_id", pa.string(), "STRING"),
    ("is_control", pa.bool_(), "BOOLEAN"),
    # "segment" or "snapshot", and the file's base name: where the row came from.
    ("source", pa.string(), "STRING"),
    ("file", pa.string(), "STRING"),
    ("record_json", pa.string(), "STRING"),
    # Partition and PartitionChange records' fields, typed (null on other records, and
    # on a change record for a field it does not set): partition state without JSON.
    ("leader", pa.int32(), "INT"),
    ("isr", pa.list_(pa.int32()), "ARRAY<INT>"),
    ("replicas", pa.list_(pa.int32()), "ARRAY<INT>"),
    ("adding_replicas", pa.list_(pa.int32()), "ARRAY<INT>"),
    ("removing_replicas", pa.list_(pa.int32()), "ARRAY<INT>"),
    ("leader_recovery_state", pa.string(), "STRING"),
    ("leader_epoch", pa.int32(), "INT"),
    ("partition_epoch", pa.int32(), "INT"),
    # Eligible leader replicas (metadata.version 7): a Partition record's, or the list
    # a change record sets (empty: cleared; null: unchanged).
    ("eligible_leader_replicas", pa.list_(pa.int32()), "ARRAY<INT>"),
    # Broker and config records' fields, typed (null on other records): the broker
    # and config audits read them without parsing JSON. `broker_epoch` is set on
    # RegisterBroker, UnregisterBroker and BrokerRegistrationChange; `incarnation_id`
    # on RegisterBroker. `fenced` and `in_controlled_shutdown` are a registration's
    # flags, or what a change sets them to (null: the change leaves it as it is).
    # `config_key`/`config_value` are a ConfigRecord's name and value (null value:
    # the key is deleted).
    ("broker_epoch", pa.int64(), "BIGINT"),
    ("incarnation_id", pa.string(), "STRING"),
    ("fenced", pa.bool_(), "BOOLEAN"),
    ("in_controlled_shutdown", pa.bool_(), "BOOLEAN"),
    ("config_key", pa.string(), "STRING"),
    ("config_value", pa.string(), "STRING"),
)
# The typed partition columns, in the order of `analytics.rows.PartitionFields`.
PARTITION_FIELD_COLUMNS: tuple[str, ...] = (
    "leader", "isr", "replicas", "adding_replicas", "removing_replicas",
    "leader_recovery_state", "leader_epoch", "partition_epoch", "eligible_leader_replicas")

# The typed broker and config columns, in the order of `analytics.rows.EventFields`.
EVENT_FIELD_COLUMNS: tuple[str, ...] = (
    "broker_epoch", "incarnation_id", "fenced", "in_controlled_shutdown", "config_key",
    "config_value")

CORRUPT_COLUMN = "_corrupt"

COLUMN_NAMES: tuple[str, ...] = tuple(name for name, _, _ in _COLUMNS)


def arrow_schema(permissive: bool = False) -> pa.Schema:
    """The Arrow schema the reader yields (with `_corrupt` last in permissive mode)."""
    fields = [pa.field(name, typ, nullable=True) for name, typ, _ in _COLUMNS]
    if permissive:
        fields.append(pa.field(CORRUPT_COLUMN, pa.string(), nullable=True))
    return pa.schema(fields)


def ddl_schema(permissive: bool = False) -> str:
    """The same schema as a Spark DDL string (what `DataSource.schema` returns)."""
    cols = [f"`{name}` {sql}" for name, _, sql in _COLUMNS]
    if permissive:
        cols.append(f"`{CORRUPT_COLUMN}` STRING")
    return ", ".join(cols)
