"""Invariant checks: each returns the rows that violate it (empty = the invariant holds).

`INVARIANTS` maps a check's name to its function; `metakraft audit` runs them all
and exits 1 if any returns a row. Every check reads log rows (snapshot rows restate
state and are not history). `first_divergence` compares several controllers' logs.

All checks are joins and windows that Spark distributes; none needs a global sort
of the whole log (the Raft-epoch check works on per-epoch offset ranges, a table
with one row per epoch, instead of a window over every record).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from analytics.audit import _states, log_rows, resolve_topic_names, topic_names


def leader_in_isr_subset_replicas(df: DataFrame, states: DataFrame | None = None) -> DataFrame:
    """Partition states where the leader (if any) is not in the ISR, or the ISR is not a
    subset of the replicas, or the ISR is empty, or an eligible leader replica is not
    a replica or is also in the ISR (KIP-966: the ELR is replicas out of the ISR)."""
    s = _states(df, states)
    bad_leader = (F.col("leader") != -1) & ~F.array_contains("isr", F.col("leader"))
    bad_isr = F.size(F.array_except("isr", "replicas")) > 0
    empty = F.size("isr") == 0
    bad_elr = (F.size(F.array_except("elr", "replicas")) > 0) | \
        (F.size(F.array_intersect("elr", "isr")) > 0)
    reason = (F.when(bad_leader, "leader not in ISR").when(bad_isr, "ISR not within replicas")
              .when(empty, "empty ISR").otherwise("ELR not within replicas outside the ISR"))
    return (s.where(bad_leader | bad_isr | empty | bad_elr)
            .select("topic_name", "topic_id", "partition_id", "offset", "leader", "isr",
                    "elr", "replicas", reason.alias("violation")))


def registration_intervals(df: DataFrame) -> DataFrame:
    """Per broker, the offset ranges [registered_offset, until) it was registered."""
    rows = log_rows(df).where(F.col("record_type").isin("register_broker",
                                                        "unregister_broker"))
    w = Window.partitionBy("broker_id").orderBy("offset")
    rows = rows.withColumn("_next", F.lead("offset").over(w))
    return rows.where(F.col("record_type") == "register_broker").select(
        "broker_id", F.col("offset").alias("registered_offset"),
        F.coalesce(F.when(F.lead("record_type").over(w) == "unregister_broker", F.col("_next")),
                   F.lit(2**63 - 1)).alias("until"))


def replicas_registered(df: DataFrame, states: DataFrame | None = None) -> DataFrame:
    """Partition records naming a replica that is not a registered broker at that offset."""
    s = _states(df, states).select("topic_name", "topic_id", "partition_id", "offset",
                                   F.explode("replicas").alias("replica"))
    # One anti join against the (small, broadcast) registration intervals: the rows
    # with no interval covering them. No shuffle of the exploded states.
    regs = F.broadcast(registration_intervals(df))
    return (s.join(regs, (s["replica"] == regs["broker_id"])
                   # <=: a log holds one record per offset, so only a window's seed
                   # (one offset for the whole state) has both at one offset.
                   & (regs["registered_offset"] <= s["offset"]) & (s["offset"] < regs["until"]),
                   "left_anti")
            .withColumn("violation", F.lit("replica is not a registered broker")))


def epochs_increase(df: DataFrame, states: DataFrame | None = None) -> DataFrame:
    """A Partition record restating a partition must not move its leader epoch back or
    its partition epoch back (change records cannot: replay derives their epochs)."""
    s = _states(df, states)
    back = (F.col("record_type") == "partition") & F.col("prev_leader_epoch").isNotNull() & (
        (F.col("leader_epoch") < F.col("prev_leader_epoch"))
        | (F.col("partition_epoch") < F.col("prev_partition_epoch")))
    return s.where(back).select("topic_name", "topic_id", "partition_id", "offset",
                                "prev_leader_epoch", "leader_epoch", "prev_partition_epoch",
                                "partition_epoch",
                                F.lit("epoch went back").alias("violation"))


def no_reference_after_removal(df: DataFrame) -> DataFrame:
    """Records naming a topic id at an offset after that topic's RemoveTopic record."""
    log = log_rows(df)
    removed = log.where(F.col("record_type") == "remove_topic").select(
        F.col("topic_id").alias("_rid"), F.col("offset").alias("removed_offset"))
    # Names are joined to the violations only, not to every record before the
    # (broadcast, small) join with the removals.
    bad = (log.join(F.broadcast(removed), log["topic_id"] == removed["_rid"])
           .where(F.col("offset") > F.col("removed_offset")).drop("_rid"))
    return resolve_topic_names(bad, topic_names(df)).select(
        "topic_name", "topic_id", "offset", "record_type", "partition_id", "removed_offset",
        F.lit("refers to a removed topic").alias("violation"))


def raft_epochs_monotonic(df: DataFrame) -> DataFrame:
    """Records whose Raft epoch is lower than that of an earlier record.

    Per epoch the offset range [first, last] is one small row; epochs never decrease
    iff no higher epoch starts before a lower one ends. The rows returned are the
    records of the higher epoch that come before the lower epoch's last record.
    """
    log = log_rows(df)
    ranges = log.groupBy("epoch").agg(F.min("offset").alias("first"),
                                      F.max("offset").alias("last"))
    lo, hi = ranges.alias("lo"), ranges.alias("hi")
    clash = lo.join(hi, (F.col("hi.epoch") > F.col("lo.epoch"))
                    & (F.col("hi.first") < F.col("lo.last"))).select(
        F.col("hi.epoch").alias("_hi"), F.col("lo.epoch").alias("later_lower_epoch"),
        F.col("lo.last").alias("_lo_last"))
    return (log.join(F.broadcast(clash), (log["epoch"] == clash["_hi"])
                     & (log["offset"] < clash["_lo_last"]))
            .select("offset", "epoch", "later_lower_epoch", "record_type", "file")
            .withColumn("violation", F.lit("Raft epoch decreases later in the log"))
            .dropDuplicates(["offset"]))


def broker_epoch_is_registration_offset(df: DataFrame) -> DataFrame:
    """RegisterBroker records whose broker_epoch is not their own offset (a window's
    seed restates registrations at its offset: not checked)."""
    rows = df.where((F.col("source") == "segment")
                    & (F.col("record_type") == "register_broker"))
    return (rows.select("broker_id", "offset", "broker_epoch")
            .where(F.col("broker_epoch") != F.col("offset"))
            .withColumn("violation", F.lit("broker epoch is not the registration offset")))


# Checks that start from `audit.partition_states` and accept it precomputed (`states=`).
USES_STATES = frozenset({"leader_in_isr_subset_replicas", "replicas_registered",
                         "epochs_increase"})

INVARIANTS: dict[str, Callable[..., DataFrame]] = {
    "leader_in_isr_subset_replicas": leader_in_isr_subset_replicas,
    "replicas_registered": replicas_registered,
    "epochs_increase": epochs_increase,
    "no_reference_after_removal": no_reference_after_removal,
    "raft_epochs_monotonic": raft_epochs_monotonic,
    "broker_epoch_is_registration_offset": broker_epoch_is_registration_offset,
}


def first_divergence(spark: SparkSession, log_dirs: Sequence[str],
                     committed_offset: int | None = None) -> DataFrame:
    """The first offset at or below `committed_offset` where the controllers' logs differ.

    Returns one row per log at that offset (replica = index in `log_dirs`, epoch,
    record_type, record_json; nulls where a log lacks the offset), or no rows if they
    agree. Records are compared by epoch, control flag and content. Without
    `committed_offset`, the shortest log's last offset is used (what every replica
    must hold); pass the quorum's high watermark - 1 to check exactly the committed part.
    """
    from analytics import register

    register(spark)
    frames = [spark.read.format("metakraft").load(d).select(
        "offset", F.lit(i).alias("replica"), "epoch", "is_control", "record_type",
        "record_json") for i, d in enumerate(log_dirs)]
    rows = frames[0]
    for frame in frames[1:]:
        rows = rows.unionByName(frame)
    if committed_offset is None:
        ends = rows.groupBy("replica").agg(F.max("offset").alias("end"))
        limit = ends.agg(F.min("end")).first()
        committed_offset = -1 if limit is None or limit[0] is None else int(limit[0])
    rows = rows.where(F.col("offset") <= committed_offset)
    digest = F.xxhash64("epoch", "is_control", "record_json")
    per = rows.groupBy("offset").agg(F.count_distinct(digest).alias("_kinds"),
                                     F.count("*").alias("_n"))
    bad = per.where((F.col("_kinds") > 1) | (F.col("_n") < len(log_dirs)))
    first = bad.agg(F.min("offset").alias("offset")).first()
    if first is None or first["offset"] is None:
        return rows.limit(0)
    at = int(first["offset"])
    replicas = spark.createDataFrame([(i, d) for i, d in enumerate(log_dirs)],
                                     "replica INT, log_dir STRING")
    return (replicas.join(rows.where(F.col("offset") == at), "replica", "left")
            .select(F.lit(at).cast("long").alias("offset"), "replica", "log_dir", "epoch",
                    "is_control", "record_type", "record_json").orderBy("replica"))
