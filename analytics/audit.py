"""Audit functions: pure DataFrame -> DataFrame over the `metakraft` rows.

Every function takes the DataFrame of the data source (or of `analytics.load`) and
returns a new one; nothing is collected, cached or written, so they compose and run
at any scale. Functions that describe history read log rows only (`source =
'segment'`); the state-at-offset functions (`analytics.state`) also use snapshots.

Partition state is the subtle part: a PartitionChangeRecord carries only the changed
fields and no epochs, so `partition_states` rebuilds the full state after every
partition record with window functions (last non-null value per field, per
partition, in offset order) and derives the epochs the way replay does: partition
epoch +1 on every change, leader epoch +1 when a change states a leader
(`PartitionRegistration.merge`).
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

PARTITION_JSON = (
    "fields STRUCT<partition_id INT, topic_id STRING, replicas ARRAY<INT>, isr ARRAY<INT>,"
    " removing_replicas ARRAY<INT>, adding_replicas ARRAY<INT>, leader INT,"
    " leader_recovery_state STRING, leader_epoch INT, partition_epoch INT,"
    " eligible_leader_replicas ARRAY<INT>>"
)
CHANGE_JSON = (
    "fields STRUCT<isr STRUCT<ids ARRAY<INT>>, leader INT, replicas STRUCT<ids ARRAY<INT>>,"
    " removing_replicas STRUCT<ids ARRAY<INT>>, adding_replicas STRUCT<ids ARRAY<INT>>,"
    " leader_recovery_state STRING, eligible_leader_replicas STRUCT<ids ARRAY<INT>>>"
)
LEADER_CHANGE_JSON = "fields STRUCT<leader_id INT, epoch INT, voters ARRAY<INT>>"
VOTERS_JSON = ("fields STRUCT<voters ARRAY<STRUCT<node_id INT, directory_id STRING,"
               " endpoint STRING>>>")
ACL_JSON = ("fields STRUCT<id STRING, resource_type STRING, resource_name STRING,"
            " pattern_type STRING, principal STRING, host STRING, operation STRING,"
            " permission_type STRING>")

WHO = ["principal", "client_address", "request_id"]
RECOVERING = "LEADER_RECOVERY_STATE_RECOVERING"


# A window audit's seed (`report.report_rows(start_offset=...)`): the snapshot the
# window starts from, its rows as one batch just before the window.
SEED = "seed"


def log_rows(df: DataFrame) -> DataFrame:
    """Rows of the log itself, and a window's seed (snapshot rows otherwise restate
    state; they are not history)."""
    return df.where(F.col("source").isin("segment", SEED))


# Set on the `topic_name` column by `resolve_topic_names`, so resolving twice (e.g.
# `analytics.load` and then an audit function) joins once.
NAMES_RESOLVED = "metakraft.topic_names_resolved"


def topic_names(df: DataFrame) -> DataFrame:
    """The (`_tid`, `_tname`, `_toff`) table of the Topic records: small (one row per
    topic; `_toff` the offset of its first Topic record)."""
    return (df.where(F.col("record_type") == "topic")
            .groupBy(F.col("topic_id").alias("_tid"))
            .agg(F.first("topic_name").alias("_tname"), F.min("offset").alias("_toff")))


def resolve_topic_names(df: DataFrame, names: DataFrame | None = None) -> DataFrame:
    """Fill `topic_name` from the Topic records for rows that carry only the topic id.

    A join, not a reader-side lookup: a segment file does not hold the Topic records
    of every topic it mentions, and a first pass over the whole log on the driver
    would serialise the scan. Topic ids are unique for ever (a re-created topic gets
    a new id), so the join is on the id alone; the Topic table is small (broadcast).
    `names` is `topic_names(df)` computed beforehand (e.g. cached); a DataFrame this
    function returned is returned as it is.
    """
    if df.schema["topic_name"].metadata.get(NAMES_RESOLVED):
        return df
    if names is None:
        names = topic_names(df)
    joined = df.join(F.broadcast(names), df["topic_id"] == names["_tid"], "left")
    return joined.select(
        *[F.coalesce(F.col("topic_name"), F.col("_tname")).alias(
            "topic_name", metadata={NAMES_RESOLVED: True})
          if c == "topic_name" else F.col(c) for c in df.columns])


def with_fields(df: DataFrame, ddl: str) -> DataFrame:
    """`df` plus `_f`: the record's `fields` parsed with `ddl` (see `FIELDS`).

    A column of its own, then referenced: Spark does not merge a projection into the
    next one when that would repeat an expensive expression, so each record's JSON
    is parsed once however many fields are taken from it (written inline, every
    `from_json(...)[name]` would parse the JSON again).
    """
    return df.withColumn("_f", F.from_json(F.col("record_json"), ddl)["fields"])


def fields() -> Column:
    """The `_f` column `with_fields` adds."""
    return F.col("_f")


# ------------------------------------------------------------------------ topics


def topic_lifecycle(df: DataFrame) -> DataFrame:
    """One row per topic event: created, partitions_added, deleted.

    Columns: topic_name, topic_id, event, partitions (count the event created),
    offset, append_time, epoch (Raft epoch: which controller term), principal,
    client_address, request_id. Partitions created with the topic (same batch) count
    toward `created`; those in later batches are a `partitions_added` event.
    """
    # One pass over the log and one shuffle (by topic): the Topic, Partition and
    # RemoveTopic records are few, and per topic and batch they say it all. Every
    # event row carries its batch's columns (time, epoch, origin).
    kind = F.col("record_type")
    batch = ["batch_base_offset", "append_time", "epoch", *WHO]
    rows = log_rows(df).where(kind.isin("topic", "partition", "remove_topic")).select(
        "record_type", "topic_id", "topic_name", "offset", *batch)
    # Names from the topic's own Topic record (the others carry only the id).
    rows = rows.withColumn("topic_name", F.coalesce(
        "topic_name", F.max("topic_name").over(Window.partitionBy("topic_id"))))

    def first_offset(record_type: str) -> Column:
        return F.min(F.when(kind == record_type, F.col("offset")))

    per_batch = rows.groupBy("topic_id", "topic_name", *batch).agg(
        first_offset("topic").alias("_created"), first_offset("partition").alias("_added"),
        first_offset("remove_topic").alias("_deleted"),
        F.count(F.when(kind == "partition", 1)).alias("_partitions"))
    # Partitions in the Topic record's batch count toward `created`; in a later batch
    # they are a `partitions_added` event.
    event = F.struct(F.lit("created").alias("event"), F.col("_partitions").alias("partitions"),
                     F.col("_created").alias("offset"))
    events = F.array(
        F.when(F.col("_created").isNotNull(), event),
        F.when(F.col("_created").isNull() & F.col("_added").isNotNull(), event.withField(
            "event", F.lit("partitions_added")).withField("offset", F.col("_added"))),
        F.when(F.col("_deleted").isNotNull(), event.withField("event", F.lit("deleted"))
               .withField("partitions", F.lit(0).cast("long"))
               .withField("offset", F.col("_deleted"))))
    out = per_batch.select("*", F.explode(F.filter(events, lambda e: e.isNotNull())).alias("_e"))
    return out.select("topic_name", "topic_id", "_e.event", "_e.partitions", "_e.offset",
                      "append_time", "epoch", *WHO).orderBy("offset")


# -------------------------------------------------------------------- partitions


# The leading columns of `indexed_partition_states`: the record's batch fields, the
# record type as a flag, the topic as an index (or its id when it has no index).
_INDEXED_KEYS = ("offset", "append_time", "epoch", "principal", "_part", "_tix",
                 "_other_tid", "partition_id")
# What a partition's state is, of those columns (`indexed_partition_states`'
# `last_states`).
CHECKPOINT_COLUMNS = (*_INDEXED_KEYS, "replicas", "isr", "elr", "adding_replicas",
                      "removing_replicas", "leader", "recovery_state", "leader_epoch",
                      "partition_epoch")
# What identifies a partition in those columns.
PARTITION_KEY = ("_tix", "_other_tid", "partition_id")


def partition_states(df: DataFrame, names: DataFrame | None = None) -> DataFrame:
    """The full state of a partition after each of its Partition/PartitionChange records.

    Columns: offset, append_time, epoch, principal, record_type, topic_id,
    topic_name, partition_id, replicas, isr, elr (eligible leader replicas, KIP-966),
    adding_replicas, removing_replicas, leader, recovery_state, leader_epoch,
    partition_epoch, reassigning (adding or removing replicas non-empty), prev_leader,
    prev_isr, prev_elr, prev_replicas (only on a
    change record that sets the replicas), leader_changed (a change record that
    moved the leader; the first Partition record is not a change),
    prev_leader_epoch, prev_partition_epoch, prev_reassigning. A `prev_*` column is
    that field of the partition's state before this record (null on its first
    record), so the audits that compare a state with the one before need no window
    of their own (each would be another shuffle and sort of every partition record).
    The previous state's adding/removing lists are not carried, only whether it was
    reassigning: two array columns on every row made the persisted states a third
    more expensive to build, and only the start and end of a reassignment need them.

    One shuffle and one sort (by partition, then offset); every window below uses
    that same order, so Spark adds no further exchange or sort. The records' fields
    come from the data source's typed partition columns (no JSON parsing), and only
    what the windows need goes through the shuffle: a topic is an integer index there,
    the record type a flag, and topic ids and names are joined to the result
    afterwards (a broadcast of the Topic records), not carried through the sort.
    The result is large and the other partition audits all start from it: compute
    it once and pass it as `states=` (the report persists it). `names` is
    `topic_names(df)` computed beforehand; with it, `df` is best the source rows
    without the name join (`topic_name` is not read here: a resolved `df` makes
    every partition record go through the join before the shuffle for nothing).
    """
    return name_partition_states(*indexed_partition_states(df, names))


def indexed_partition_states(df: DataFrame, names: DataFrame | None = None,
                             last_states: DataFrame | None = None
                             ) -> tuple[DataFrame, DataFrame]:
    """`partition_states` before the topic ids and names are joined back: (states
    with the topic as `_tix`/`_other_tid` and the record type as the flag `_part`,
    the topic index to name them with `name_partition_states`). What the report
    persists: without the two strings per row the cache is cheaper to build, and
    the name join of each audit runs after its filters.

    `last_states`: the last state of every partition before `df`'s first record
    (`CHECKPOINT_COLUMNS`, from an earlier audit of the log's beginning, see
    `analytics.states_cache`): each enters as a Partition record restating that
    state, so the states of `df`'s records come out as they would from the whole
    log. Its own rows are in the result too (the caller drops them)."""
    if names is None:
        names = topic_names(df)
    # Through the shuffle and the sort a topic is a small integer, its rank among the
    # Topic records in offset order, not its 36-character id: fewer bytes to move and
    # cheaper comparisons. The rank is deterministic (ids are unique), so the join here
    # and the one back at the end agree however often `index` is computed; and a log
    # that grows only adds ranks after the existing ones, so states kept from an
    # earlier audit of its beginning (`analytics.states_cache`) keep their meaning. An
    # id with no Topic record in `df` (an offset-range read) travels as it is, in
    # `_other_tid`.
    index = names.select("_tid", "_tname", F.row_number().over(
        Window.orderBy("_toff", "_tid")).alias("_tix"))
    rows = log_rows(df).where(F.col("record_type").isin("partition", "partition_change"))
    rows = rows.join(F.broadcast(index.select(F.col("_tid").alias("_id"), "_tix")),
                     rows["topic_id"] == F.col("_id"), "left")
    keep = list(_INDEXED_KEYS)
    rows = rows.select(
        "offset", "append_time", "epoch", "principal",
        (F.col("record_type") == "partition").alias("_part"), "_tix",
        F.when(F.col("_tix").isNull(), F.col("topic_id")).alias("_other_tid"), "partition_id",
        F.col("replicas").alias("_replicas"), F.col("isr").alias("_isr"),
        F.col("adding_replicas").alias("_adding"),
        F.col("removing_replicas").alias("_removing"), F.col("leader").alias("_leader"),
        F.col("leader_recovery_state").alias("_recovery"),
        F.col("eligible_leader_replicas").alias("_elr"),
        # Change records carry no epochs (null): replay derives them.
        F.col("leader_epoch").alias("_base_le"), F.col("partition_epoch").alias("_base_pe"))
    if last_states is not None:
        # A restated state is a lineage start, like the Partition record it stands for:
        # the epochs count on from it, and the `prev_*` of the next record are its
        # fields, as they are the last values set before that record.
        rows = rows.unionByName(last_states.select(
            "offset", "append_time", "epoch", "principal", F.lit(True).alias("_part"),
            "_tix", "_other_tid", "partition_id", F.col("replicas").alias("_replicas"),
            F.col("isr").alias("_isr"), F.col("adding_replicas").alias("_adding"),
            F.col("removing_replicas").alias("_removing"), F.col("leader").alias("_leader"),
            F.col("recovery_state").alias("_recovery"), F.col("elr").alias("_elr"),
            F.col("leader_epoch").alias("_base_le"),
            F.col("partition_epoch").alias("_base_pe")))
    is_part = F.col("_part")
    by_partition = Window.partitionBy(*PARTITION_KEY).orderBy("offset")
    w = by_partition.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    # The rows before this one: the previous state's leader and ISR are the last
    # values set before it (what `lag` of the state would give, one window earlier).
    before = by_partition.rowsBetween(Window.unboundedPreceding, -1)

    def since_lineage_start(counted: str) -> Column:
        # Counted rows since the latest Partition record (the lineage start): the
        # running count minus its value at that record (which is not itself counted).
        return F.col(counted) - F.last(F.when(is_part, F.col(counted)), ignorenulls=True).over(w)

    # Four window passes over the one sort: (1) the state, the previous leader, ISR
    # and reassignment, the running change count; (2) leader epoch bumps; (3) their count
    # at the lineage start; (4) the previous epochs.
    state = rows.select(
        *keep,
        *[F.last(F.col("_" + n), ignorenulls=True).over(w).alias(n)
          for n in ("replicas", "isr", "adding", "removing", "leader", "recovery",
                    "base_le", "base_pe", "elr")],
        F.last("_leader", ignorenulls=True).over(before).alias("prev_leader"),
        F.last("_isr", ignorenulls=True).over(before).alias("prev_isr"),
        F.last("_elr", ignorenulls=True).over(before).alias("prev_elr"),
        # The replicas before a change record that sets them (null on every other row,
        # so the column costs little in the persisted states): a move whose target is
        # already in the ISR is that one record, with no adding/removing phase.
        F.when(~is_part & F.col("_replicas").isNotNull(),
               F.last("_replicas", ignorenulls=True).over(before)).alias("prev_replicas"),
        F.col("_leader").isNotNull().alias("_sets_leader"),
        F.sum((~is_part).cast("int")).over(w).alias("_changes"),
    )
    state = state.withColumn(
        "leader_changed",
        ~is_part & F.col("_sets_leader") & (F.col("leader") != F.col("prev_leader")))
    # Replay bumps the leader epoch whenever a change states a leader (the same one
    # too: a replica removed at metadata.version 7), not only when it moves.
    state = state.select(
        "*", since_lineage_start("_changes").alias("_pe_delta"),
        F.sum(F.when(~is_part & F.col("_sets_leader"), 1).otherwise(0)).over(w)
        .alias("_moves"))
    state = state.select(
        *keep, "replicas", "isr",
        F.coalesce("elr", F.array().cast("array<int>")).alias("elr"),
        F.col("adding").alias("adding_replicas"), F.col("removing").alias("removing_replicas"),
        "leader", F.coalesce("recovery", F.lit("LEADER_RECOVERY_STATE_RECOVERED"))
        .alias("recovery_state"),
        (F.col("base_le") + since_lineage_start("_moves")).cast("int").alias("leader_epoch"),
        (F.col("base_pe") + F.col("_pe_delta")).cast("int").alias("partition_epoch"),
        _reassigning("adding", "removing").alias("reassigning"),
        "prev_leader", "prev_isr",
        F.coalesce("prev_elr", F.array().cast("array<int>")).alias("prev_elr"),
        "prev_replicas", "leader_changed")
    # (4) the previous row's epochs and reassigning: the same order again, so no
    # further sort.
    state = state.select(
        "*", *[F.lag(e).over(by_partition).alias("prev_" + e)
               for e in ("leader_epoch", "partition_epoch", "reassigning")])
    return state, index


def _reassigning(adding: str, removing: str) -> Column:
    # A reassignment is in progress while adding or removing replicas is non-empty.
    return (F.size(F.coalesce(adding, F.array())) > 0) | (
        F.size(F.coalesce(removing, F.array())) > 0)


def name_partition_states(state: DataFrame, index: DataFrame) -> DataFrame:
    """The `partition_states` columns from `indexed_partition_states`' pair."""
    named = state.join(F.broadcast(index), "_tix", "left")
    return named.select(
        "offset", "append_time", "epoch", "principal",
        F.when(F.col("_part"), "partition").otherwise("partition_change").alias("record_type"),
        F.coalesce("_other_tid", "_tid").alias("topic_id"), F.col("_tname").alias("topic_name"),
        "partition_id", *state.columns[len(_INDEXED_KEYS):])


def _states(df: DataFrame, states: DataFrame | None) -> DataFrame:
    return partition_states(df) if states is None else states


def leader_history(df: DataFrame, states: DataFrame | None = None) -> DataFrame:
    """Every leader a partition had: its first leader and each change, in order."""
    return (_states(df, states)
            .where((F.col("record_type") == "partition") | F.col("leader_changed"))
            .select("topic_name", "topic_id", "partition_id", "offset", "append_time", "epoch",
                    "principal", "prev_leader", "leader", "leader_epoch")
            .orderBy("offset"))


def leader_churn_per_partition(df: DataFrame, states: DataFrame | None = None) -> DataFrame:
    """Leader changes per partition (the first leader is not a change), most first."""
    return (_states(df, states).where(F.col("leader_changed"))
            .groupBy("topic_name", "topic_id", "partition_id")
            .agg(F.count("*").alias("leader_changes"),
                 F.sum(F.when(F.col("leader") == -1, 1).otherwise(0)).alias("went_offline"))
            .orderBy(F.desc("leader_changes"), "topic_name", "partition_id"))


def leader_churn_per_broker(df: DataFrame, states: DataFrame | None = None) -> DataFrame:
    """Per broker: leaderships gained and lost through leader changes."""
    # One pass: each change is a gain for the new leader and a loss for the old one
    # (-1, no leader, is neither).
    sides = F.explode(F.array(
        F.struct(F.col("leader").alias("broker_id"), F.lit(1).alias("_gained")),
        F.struct(F.col("prev_leader").alias("broker_id"), F.lit(0).alias("_gained"))))
    return (_states(df, states).where(F.col("leader_changed")).select(sides.alias("_side"))
            .select("_side.*").where(F.col("broker_id") >= 0).groupBy("broker_id")
            .agg(F.sum("_gained").alias("gained"), F.sum(1 - F.col("_gained")).alias("lost"))
            .withColumn("leader_changes", F.col("gained") + F.col("lost"))
            .orderBy("broker_id"))


def isr_changes(df: DataFrame, states: DataFrame | None = None) -> DataFrame:
    """ISR shrinks and expansions: kind ('shrink', 'expand', 'both'), the replicas,
    added, removed."""
    return _isr_changes(df, states).orderBy("offset")


def _isr_changes(df: DataFrame, states: DataFrame | None) -> DataFrame:
    # Unordered: what builds on it sorts its own way (a global sort of every ISR
    # change under an explode is not removed by Spark's optimizer).
    s = _states(df, states).where((F.col("record_type") == "partition_change")
                                   & ~F.equal_null(F.col("isr"), F.col("prev_isr")))
    added = F.array_except("isr", "prev_isr")
    removed = F.array_except("prev_isr", "isr")
    kind = (F.when((F.size(added) > 0) & (F.size(removed) > 0), "both")
            .when(F.size(added) > 0, "expand").otherwise("shrink"))
    return s.select("topic_name", "topic_id", "partition_id", "offset", "append_time", "epoch",
                    "principal", kind.alias("kind"), "prev_isr", "isr", "replicas",
                    added.alias("added"), removed.alias("removed"))


def isr_incidents(df: DataFrame, states: DataFrame | None = None) -> DataFrame:
    """ISR changes grouped into incidents, one row per broker per episode: from the
    first partition whose ISR it left until it is back in every one it left (its
    partitions' outages overlap in time). A replica dropped by a reassignment did not
    leave an ISR, and a new replica joining one did not come back: neither counts.
    Columns: broker_id, start_offset, start_time, end_offset, end_time (null: still
    out when the log ends), duration_s, partitions_left, partitions_rejoined, outcome
    ('recovered'; 'stopped': still out at the end because the broker stopped cleanly,
    controlled shutdown or unregistered; 'open': an outage in progress). A fenced broker drops out of hundreds of ISRs at once:
    this is the table to read; `isr_changes` has every row."""
    changes = _isr_changes(df, states).select(
        "topic_id", "partition_id", "offset", "append_time",
        # Left: out of the ISR but still a replica.
        F.array_intersect("removed", "replicas").alias("_left"), "added")
    events = changes.select("topic_id", "partition_id", "offset", "append_time", F.explode(
        F.array(F.struct(F.lit(True).alias("out"), F.col("_left").alias("brokers")),
                F.struct(F.lit(False).alias("out"), F.col("added").alias("brokers")))
    ).alias("e")).select("topic_id", "partition_id", "offset", "append_time",
                         F.col("e.out").alias("out"), F.explode("e.brokers").alias("broker_id"))
    per_replica = Window.partitionBy("broker_id", "topic_id", "partition_id").orderBy("offset")
    outages = events.select(
        "*", F.lead("out").over(per_replica).alias("_next_out"),
        F.lead("offset").over(per_replica).alias("_next_offset"),
        F.lead("append_time").over(per_replica).alias("_next_time"),
    ).where(F.col("out")).select(
        "broker_id", F.col("offset").alias("start_offset"),
        F.col("append_time").alias("start_time"),
        F.when(~F.col("_next_out"), F.col("_next_offset")).alias("end_offset"),
        F.when(~F.col("_next_out"), F.col("_next_time")).alias("end_time"))
    # Overlapping outages of one broker are one incident: a new one starts past the
    # latest end so far (an open outage never ends).
    per_broker = Window.partitionBy("broker_id").orderBy("start_offset")
    latest_end = F.max(F.coalesce("end_offset", F.lit(2**62))).over(
        per_broker.rowsBetween(Window.unboundedPreceding, -1))
    outages = outages.select("*", F.sum(F.when(latest_end.isNull()
                                               | (F.col("start_offset") > latest_end), 1)
                                        .otherwise(0)).over(per_broker).alias("_incident"))
    grouped = outages.groupBy("broker_id", "_incident").agg(
        F.min("start_offset").alias("start_offset"), F.min("start_time").alias("start_time"),
        F.max("end_offset").alias("end_offset"), F.max("end_time").alias("end_time"),
        F.count("*").alias("partitions_left"),
        F.count("end_offset").alias("partitions_rejoined"))
    is_open = F.col("partitions_rejoined") < F.col("partitions_left")
    duration = (F.unix_micros("end_time") - F.unix_micros("start_time")) / 1e6
    # A broker still out when the log ends because it was stopped cleanly is not an
    # outage in progress: 'stopped'.
    stopped = _stopped_brokers(df).withColumn("_stopped", F.lit(True))
    grouped = grouped.join(F.broadcast(stopped), "broker_id", "left")
    last_incident = F.col("_incident") == F.max("_incident").over(
        Window.partitionBy("broker_id"))
    return grouped.select(
        "broker_id", "start_offset", "start_time",
        F.when(~is_open, F.col("end_offset")).alias("end_offset"),
        F.when(~is_open, F.col("end_time")).alias("end_time"),
        F.when(~is_open, duration).alias("duration_s"), "partitions_left",
        "partitions_rejoined",
        F.when(is_open & F.coalesce("_stopped", F.lit(False)) & last_incident, "stopped")
        .when(is_open, "open").otherwise("recovered").alias("outcome"),
    ).orderBy("start_offset")


def eligible_leader_replicas(df: DataFrame, states: DataFrame | None = None) -> DataFrame:
    """Changes of the eligible leader replicas (KIP-966, metadata.version 7): replicas
    that left an ISR below min.insync.replicas and so still hold every committed
    record. Columns: topic_name, topic_id, partition_id, offset, append_time, epoch,
    principal, isr, prev_elr, elr, joined, left, leader, elected_from_elr (the change
    made a former ELR member the leader: a clean election the ISR alone could not
    have made)."""
    s = _states(df, states).where((F.col("record_type") == "partition_change")
                                   & ~F.equal_null(F.col("elr"), F.col("prev_elr")))
    elected = F.col("leader_changed") & F.array_contains("prev_elr", F.col("leader"))
    return s.select("topic_name", "topic_id", "partition_id", "offset", "append_time", "epoch",
                    "principal", "isr", "prev_elr", "elr",
                    F.array_except("elr", "prev_elr").alias("joined"),
                    F.array_except("prev_elr", "elr").alias("left"), "leader",
                    elected.alias("elected_from_elr")).orderBy("offset")


def _unclean() -> Column:
    # A change record electing a leader from outside the ISR sets RECOVERING. (A
    # function: a Column needs the running Spark session, which import time has not.)
    return (F.col("record_type") == "partition_change") & (
        F.col("leader_recovery_state") == RECOVERING)


def unclean_elections(df: DataFrame) -> DataFrame:
    """Leader elections outside the ISR: the record sets recovery state RECOVERING."""
    # The record's own fields (the typed columns): null = not set by the change.
    rows = resolve_topic_names(log_rows(df)).where(_unclean())
    return rows.select("topic_name", "topic_id", "partition_id", "offset", "append_time", "epoch",
                       *WHO, "leader", "isr").orderBy("offset")


def reassignments(df: DataFrame, states: DataFrame | None = None) -> DataFrame:
    """Reassignments: start, end, duration, target and outcome per partition.

    Two shapes in the log. A reassignment that must copy data starts when adding or
    removing replicas become non-empty and ends when both are empty again:
    `completed` if the replicas are then the target, `cancelled` if they are the
    original ones again, `replaced` if another reassignment took its place before it
    ended, `ongoing` (end null) if the log ends first. A move whose target replicas
    are all in the ISR already (a reorder, or dropping a replica) is one record that
    sets the replicas directly: `completed` at once (start = end, duration 0).
    """
    s = _states(df, states).select(
        "*", F.col("reassigning").alias("_moving"),
        F.coalesce("prev_reassigning", F.lit(False)).alias("_was"))
    # The transitions alternate per partition (a start, then its end, ...): the row
    # after a start is its end. One pass over the states, then a window over the few
    # transition rows.
    phased = s.where(F.col("_moving") != F.col("_was"))
    after = Window.partitionBy("topic_id", "partition_id").orderBy("offset")
    pairs = phased.select(
        "topic_name", "topic_id", "partition_id", "_moving", "_was",
        F.col("offset").alias("start_offset"), F.col("append_time").alias("start_time"),
        F.col("principal").alias("started_by"),
        F.array_except("replicas", "removing_replicas").alias("target"),
        # The start record set the replicas: the ones before it, in their order.
        F.coalesce("prev_replicas", F.array_except("replicas", "adding_replicas"))
        .alias("original"),
        F.lead("offset").over(after).alias("end_offset"),
        F.lead("append_time").over(after).alias("end_time"),
        F.lead("replicas").over(after).alias("final_replicas"),
    ).where(F.col("_moving") & ~F.col("_was"))
    outcome = (F.when(F.col("end_offset").isNull(), "ongoing")
               .when(F.col("final_replicas") == F.col("target"), "completed")
               .when(F.sort_array("final_replicas") == F.sort_array("original"), "cancelled")
               .otherwise("replaced"))
    duration = (F.unix_micros("end_time") - F.unix_micros("start_time")) / 1e6
    columns = ("topic_name", "topic_id", "partition_id", "start_offset", "start_time",
               "started_by", "original", "target", "end_offset", "end_time", "duration_s",
               "outcome")
    phases = pairs.select(*columns[:8], "end_offset", "end_time", duration.alias("duration_s"),
                          outcome.alias("outcome"))
    direct = s.where(F.col("prev_replicas").isNotNull() & ~F.col("_moving") & ~F.col("_was")
                     & (F.col("prev_replicas") != F.col("replicas"))).select(
        "topic_name", "topic_id", "partition_id", F.col("offset").alias("start_offset"),
        F.col("append_time").alias("start_time"), F.col("principal").alias("started_by"),
        F.col("prev_replicas").alias("original"), F.col("replicas").alias("target"),
        F.col("offset").alias("end_offset"), F.col("append_time").alias("end_time"),
        F.lit(0.0).alias("duration_s"), F.lit("completed").alias("outcome"))
    return phases.unionByName(direct).orderBy("start_offset")


# ----------------------------------------------------------------------- brokers


def broker_timeline(df: DataFrame) -> DataFrame:
    """Registrations, fencing, unfencing, controlled shutdown, unregistrations over time."""
    return _broker_events(df).orderBy("offset")


def _broker_events(df: DataFrame) -> DataFrame:
    # `broker_timeline` unordered: a global sort is a job of its own (range sampling),
    # wasted under a window that sorts by broker anyway.
    rows = log_rows(df).where(F.col("record_type").isin(
        "register_broker", "unregister_broker", "broker_registration_change"))
    kind = F.col("record_type")
    # The typed broker columns: on a change, `fenced` is what it sets (null: unchanged).
    event = (F.when(kind == "register_broker", "registered")
             .when(kind == "unregister_broker", "unregistered")
             .when(F.col("fenced"), "fenced")
             .when(~F.col("fenced"), "unfenced")
             .when(F.col("in_controlled_shutdown"), "controlled_shutdown")
             .otherwise("changed"))
    return rows.select("broker_id", "offset", "append_time", "epoch", event.alias("event"),
                       "broker_epoch", "incarnation_id", "in_controlled_shutdown", *WHO)


def _fencing_events(df: DataFrame) -> DataFrame:
    """The broker events that start or end a fenced period, and controlled shutdowns,
    with `cause`: the event, except that a fence of a broker that entered controlled
    shutdown since it last registered is 'controlled_shutdown' (it asked to stop), not
    'fenced' (its session expired)."""
    events = _broker_events(df).where(F.col("event").isin(
        "registered", "fenced", "unfenced", "unregistered", "controlled_shutdown"))
    upto = Window.partitionBy("broker_id").orderBy("offset").rowsBetween(
        Window.unboundedPreceding, Window.currentRow)
    last_registered = F.max(F.when(F.col("event") == "registered", F.col("offset"))).over(upto)
    last_shutdown = F.max(F.when((F.col("event") == "controlled_shutdown")
                                 | F.coalesce(F.col("in_controlled_shutdown"), F.lit(False)),
                                 F.col("offset"))).over(upto)
    stopping = last_shutdown.isNotNull() & (last_registered.isNull()
                                            | (last_shutdown > last_registered))
    return events.withColumn("cause", F.when((F.col("event") == "fenced") & stopping,
                                             "controlled_shutdown").otherwise(F.col("event")))


def fencing_intervals(df: DataFrame) -> DataFrame:
    """Per broker, each period it was fenced: from (offset/time) until unfenced (or
    null), and why: 'registered' (a broker starts fenced), 'fenced' (its session
    expired: the controller fenced it), 'controlled_shutdown' (it stopped cleanly)."""
    t = _fencing_events(df).where(F.col("event") != "controlled_shutdown")
    w = Window.partitionBy("broker_id").orderBy("offset")
    t = (t.withColumn("_next_offset", F.lead("offset").over(w))
         .withColumn("_next_time", F.lead("append_time").over(w))
         .withColumn("_next_event", F.lead("event").over(w)))
    # A registration starts fenced; a fence record starts a fenced period.
    return t.where(F.col("event").isin("registered", "fenced")).select(
        "broker_id", F.col("offset").alias("fenced_offset"),
        F.col("append_time").alias("fenced_time"), "cause",
        F.col("_next_offset").alias("unfenced_offset"),
        F.col("_next_time").alias("unfenced_time"),
        F.col("_next_event").alias("ended_by")).orderBy("fenced_offset")


def _stopped_brokers(df: DataFrame) -> DataFrame:
    """`broker_id` of the brokers whose last event in the log is a clean stop: fenced
    after a controlled shutdown, or unregistered."""
    t = _fencing_events(df)
    last = Window.partitionBy("broker_id").orderBy(F.desc("offset"))
    return (t.withColumn("_n", F.row_number().over(last)).where(F.col("_n") == 1)
            .where(F.col("cause").isin("controlled_shutdown", "unregistered"))
            .select("broker_id"))


# ------------------------------------------------------------- configs, epochs, types


def config_history(df: DataFrame) -> DataFrame:
    """Every config change per resource and key, old value -> new value (null = deleted)."""
    rows = log_rows(df).where(F.col("record_type") == "config").select(
        "offset", "append_time", "epoch", *WHO, "resource_type", "resource_name",
        F.col("config_key").alias("key"), F.col("config_value").alias("new_value"))
    w = Window.partitionBy("resource_type", "resource_name", "key").orderBy("offset")
    return (rows.withColumn("old_value", F.lag("new_value").over(w))
            .withColumn("op", F.when(F.col("new_value").isNull(), "delete").otherwise("set"))
            .select("resource_type", "resource_name", "key", "old_value", "new_value", "op",
                    "offset", "append_time", "epoch", *WHO).orderBy("offset"))


def elections_per_epoch(df: DataFrame, states: DataFrame | None = None) -> DataFrame:
    """Per Raft epoch (from 1): the controller that led it, when it started, and the
    partition leader changes (`partition_leader_changes`, unclean ones apart) its
    controller made."""
    log = log_rows(df)
    lc = with_fields(log.where(F.col("record_type") == "leader_change"), LEADER_CHANGE_JSON)
    f = fields()
    terms = lc.select("epoch", f["leader_id"].alias("controller_id"),
                      F.col("offset").alias("start_offset"),
                      F.col("append_time").alias("start_time"))
    moves = (_states(df, states).where(F.col("leader_changed")).groupBy("epoch")
             .agg(F.count("*").alias("partition_leader_changes")))
    # Records and unclean elections (as `unclean_elections` finds them) in one pass.
    records = log.groupBy("epoch").agg(F.count("*").alias("records"),
                                       F.count(F.when(_unclean(), 1)).alias("unclean_elections"))
    # Epoch 0 holds only what `storage format` wrote (a dynamic quorum's first voter
    # set), before any controller led: no row of its own.
    return (terms.join(records, "epoch", "full").join(moves, "epoch", "left")
            .where(F.col("epoch") > 0)
            .fillna(0, ["partition_leader_changes", "unclean_elections", "records"])
            .orderBy("epoch"))


# ------------------------------------------------------------------------ quorum


def voter_changes(df: DataFrame) -> DataFrame:
    """Every voter set the log records (a dynamic quorum's VotersRecords) against the
    one before it: `change` is `initial` (the formatted set), `added`, `removed`, or
    `replaced` when an added voter's id was removed before with another directory (a
    controller whose disk was replaced: removed, reformatted, added back; `replaces`
    names what it replaced); `added` / `removed` list voters as `id/directory`. A
    static quorum (voters in each controller's config) has no rows."""
    voters = with_fields(log_rows(df).where(F.col("record_type") == "voters"), VOTERS_JSON)
    member = F.transform(fields()["voters"],
                         lambda v: F.concat_ws("/", v["node_id"].cast("string"),
                                               v["directory_id"]))
    rows = voters.select("offset", "append_time", "epoch", *WHO, member.alias("voters"))
    # Few rows (one per voter change): one window over the log order is fine.
    w = Window.orderBy("offset")
    empty = F.array().cast("array<string>")
    with_prev = rows.select("*", F.lag("voters").over(w).alias("_prev"))
    added = F.array_except("voters", F.coalesce("_prev", empty))
    removed = F.array_except(F.coalesce("_prev", empty), "voters")
    out = with_prev.select("*", added.alias("added"), removed.alias("removed"))
    # Members removed so far (this record's included) and, for each added member, the
    # earlier removed ones with its id: what it replaces.
    every_removed = F.flatten(F.collect_list("removed").over(
        w.rowsBetween(Window.unboundedPreceding, Window.currentRow)))
    out = out.withColumn("_gone", every_removed)
    replaces = F.flatten(F.transform("added", lambda a: F.filter(
        "_gone", lambda r: (F.split(r, "/")[0] == F.split(a, "/")[0]) & (r != a))))
    out = out.withColumn("replaces", F.array_distinct(replaces))
    # A removal that a later record undoes with a new directory still shows as removed.
    kinds = F.concat_ws("+", F.when(F.size("added") > F.size("replaces"), F.lit("added")),
                        F.when(F.size("removed") > 0, F.lit("removed")),
                        F.when(F.size("replaces") > 0, F.lit("replaced")))
    change = (F.when(F.col("_prev").isNull(), F.lit("initial"))
              .when(kinds == "", F.lit("unchanged")).otherwise(kinds))
    return (out.select("offset", "append_time", "epoch", change.alias("change"), "added",
                       "removed", "replaces", "voters", *WHO)
            .orderBy("offset"))


# ------------------------------------------------------------------------ ACLs


def _acl_name(column: Column, prefix: str) -> Column:
    return F.regexp_replace(column, f"^{prefix}", "")


def acl_changes(df: DataFrame) -> DataFrame:
    """ACL bindings created and deleted, in log order: the binding (for whom, which
    operation allowed or denied, on what resource and pattern, from which host) and
    who changed it (the request's principal), when. A deletion names the binding
    its creation did (`binding_id`); one created before the log's start shows only
    the id."""
    log = log_rows(df)
    f = fields()
    created = with_fields(log.where(F.col("record_type") == "access_control_entry"),
                          ACL_JSON).select(
        "offset", "append_time", "epoch", *WHO, F.lit("created").alias("change"),
        f["id"].alias("binding_id"), f["principal"].alias("for_principal"),
        f["host"].alias("host"),
        _acl_name(f["permission_type"], "ACL_PERMISSION_TYPE_").alias("permission"),
        _acl_name(f["operation"], "ACL_OPERATION_").alias("operation"),
        _acl_name(f["resource_type"], "ACL_RESOURCE_TYPE_").alias("resource_type"),
        F.col("resource_name"),
        _acl_name(f["pattern_type"], "ACL_PATTERN_TYPE_").alias("pattern"))
    binding = created.drop("offset", "append_time", "epoch", *WHO, "change")
    deleted = (with_fields(log.where(F.col("record_type") == "remove_access_control_entry"),
                           "fields STRUCT<id STRING>")
               .select("offset", "append_time", "epoch", *WHO, F.lit("deleted").alias("change"),
                       f["id"].alias("binding_id"))
               .join(binding, "binding_id", "left"))
    return created.unionByName(deleted).orderBy("offset")


def has_real_time() -> Column:
    """Whether a row has a real append time. A dynamic quorum's first voter set is
    batch 0, written by `storage format` on every initial controller alike (so their
    logs match byte for byte), with append time 0: it has no place on a time axis."""
    return F.col("append_time") > F.lit("1970-01-02").cast("timestamp")


def timed(df: DataFrame) -> DataFrame:
    """The rows with a real append time (`has_real_time`)."""
    return df.where(has_real_time())


def records_per_type(df: DataFrame, bucket: str = "1 minute") -> DataFrame:
    """Record counts per type per time bucket (a Spark interval string); records
    without a real append time (`timed`) are left out."""
    return (timed(log_rows(df)).groupBy(F.window("append_time", bucket).alias("w"), "record_type")
            .agg(F.count("*").alias("records"))
            .select(F.col("w.start").alias("bucket_start"), "record_type", "records")
            .orderBy("bucket_start", "record_type"))
