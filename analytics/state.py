"""State at offset X (time travel): topics, partitions, brokers, configs.

`*_at(df, x)` is the metadata image after replaying every record at offsets <= x,
which is what `MetadataState` holds after replaying the same records (the tests
compare the two at several offsets). If `df` holds snapshot rows (`option
("snapshots", "true")`), the newest snapshot at or below x is the starting point and
only log records after it are applied, so time travel works on a log whose head was
deleted; without snapshots the whole log up to x is used.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from analytics.audit import partition_states, resolve_topic_names


def as_of(df: DataFrame, offset: int) -> DataFrame:
    """The rows that make up the state at `offset`, all marked `source = 'segment'`.

    Snapshot rows carry the snapshot's last contained offset; the newest snapshot at
    or below `offset` replaces every log row up to its offset.
    """
    snaps = df.where((F.col("source") == "snapshot") & (F.col("offset") <= offset))
    newest = snaps.agg(F.max("offset").alias("_s"))
    base = F.coalesce(F.col("_s"), F.lit(-1))
    rows = df.crossJoin(F.broadcast(newest)).where(
        ((F.col("source") == "snapshot") & (F.col("offset") == base))
        | ((F.col("source") == "segment") & (F.col("offset") > base)
           & (F.col("offset") <= offset)))
    # Marked as log rows so the history functions (which skip snapshot rows) use them;
    # a snapshot holds one record per entity, so sharing one offset orders nothing wrong.
    return rows.drop("_s").withColumn("source", F.lit("segment"))


def topics_at(df: DataFrame, offset: int) -> DataFrame:
    """Live topics at `offset`: topic_name, topic_id, created_offset."""
    rows = as_of(df, offset)
    removed = rows.where(F.col("record_type") == "remove_topic").select("topic_id")
    return (rows.where(F.col("record_type") == "topic")
            .select("topic_name", "topic_id", F.col("offset").alias("created_offset"))
            .join(removed, "topic_id", "left_anti").orderBy("topic_name"))


def partitions_at(df: DataFrame, offset: int) -> DataFrame:
    """Partitions of live topics at `offset` with their full registration."""
    rows = resolve_topic_names(as_of(df, offset))
    live = topics_at(df, offset).select("topic_id")
    last = Window.partitionBy("topic_id", "partition_id").orderBy(F.desc("offset"))
    return (partition_states(rows).join(live, "topic_id", "left_semi")
            .withColumn("_n", F.row_number().over(last)).where("_n = 1")
            .select("topic_name", "topic_id", "partition_id", "replicas", "isr", "elr",
                    "adding_replicas", "removing_replicas", "leader", "recovery_state",
                    "leader_epoch", "partition_epoch")
            .orderBy("topic_name", "partition_id"))


def brokers_at(df: DataFrame, offset: int) -> DataFrame:
    """Registered brokers at `offset`: broker_id, broker_epoch, incarnation_id, fenced,
    in_controlled_shutdown. Changes naming an older broker epoch are ignored, as replay
    ignores them."""
    rows = as_of(df, offset).where(F.col("record_type").isin(
        "register_broker", "unregister_broker", "broker_registration_change")).select(
        "offset", "record_type", "broker_id", "broker_epoch", "incarnation_id", "fenced",
        F.col("in_controlled_shutdown").alias("shutdown"))
    last_reg = Window.partitionBy("broker_id").orderBy(F.desc("offset"))
    regs = (rows.where(F.col("record_type").isin("register_broker", "unregister_broker"))
            .withColumn("_n", F.row_number().over(last_reg)).where("_n = 1")
            .where(F.col("record_type") == "register_broker")
            .select("broker_id", "broker_epoch", "incarnation_id", "offset",
                    F.col("fenced").alias("reg_fenced"), F.col("shutdown").alias("reg_shutdown")))
    changes = rows.where(F.col("record_type") == "broker_registration_change").alias("c")
    r = regs.alias("r")
    joined = r.join(changes, (F.col("c.broker_id") == F.col("r.broker_id"))
                    & (F.col("c.broker_epoch") == F.col("r.broker_epoch"))
                    & (F.col("c.offset") > F.col("r.offset")), "left")
    # On a change, `fenced` is what it sets it to (null: left as it is).
    fence_events = F.when(F.col("c.fenced"), F.col("c.offset"))
    unfence_events = F.when(~F.col("c.fenced"), F.col("c.offset"))
    shutdown = F.when(F.col("c.shutdown"), 1)
    agg = joined.groupBy("r.broker_id", "r.broker_epoch", "r.incarnation_id", "r.reg_fenced",
                         "r.reg_shutdown").agg(
        F.max(fence_events).alias("_f"), F.max(unfence_events).alias("_u"),
        F.max(shutdown).alias("_s"))
    fenced = (F.when(F.col("_f").isNull() & F.col("_u").isNull(), F.col("reg_fenced"))
              .otherwise(F.coalesce(F.col("_f"), F.lit(-1)) > F.coalesce(F.col("_u"),
                                                                          F.lit(-1))))
    return agg.select("broker_id", "broker_epoch", "incarnation_id", fenced.alias("fenced"),
                      (F.col("reg_shutdown") | F.col("_s").isNotNull())
                      .alias("in_controlled_shutdown")).orderBy("broker_id")


def configs_at(df: DataFrame, offset: int) -> DataFrame:
    """Dynamic configs set at `offset`: resource_type, resource_name, key, value.

    Deleting a topic drops its configs (as replay does): a topic config set before
    a RemoveTopic of a topic with that name is gone.
    """
    rows = resolve_topic_names(as_of(df, offset))
    cfg = rows.where(F.col("record_type") == "config").select(
        "offset", "resource_type", "resource_name", F.col("config_key").alias("key"),
        F.col("config_value").alias("value"))
    last = Window.partitionBy("resource_type", "resource_name", "key").orderBy(F.desc("offset"))
    current = cfg.withColumn("_n", F.row_number().over(last)).where("_n = 1").where(
        F.col("value").isNotNull())
    removals = rows.where(F.col("record_type") == "remove_topic").select(
        F.col("topic_name").alias("_name"), F.col("offset").alias("_removed"))
    gone = current.join(removals, (F.col("resource_type") == "topic")
                        & (F.col("resource_name") == F.col("_name"))
                        & (F.col("_removed") > F.col("offset")), "left_semi")
    return (current.join(gone.select("resource_type", "resource_name", "key"),
                         ["resource_type", "resource_name", "key"], "left_anti")
            .select("resource_type", "resource_name", "key", "value")
            .orderBy("resource_type", "resource_name", "key"))
