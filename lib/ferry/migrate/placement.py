"""Reconcile: where a group resumes on a destination topic whose records do not sit in the
same partitions as on the source (another partition count, re-partitioned by the replicator).

A group's consumed set S is every source record before its committed offset, on every source
partition. For each destination partition q the reconciled offset D_q is the first record on q
that is not in S (q's log end when every record read is in S); the duplicates of q are the
records at or after D_q that are in S — what its consumers will receive a second time.

Pure DataFrame transforms, one Spark job for every group of a topic:

1. `with_frontier`: from the records around each committed offset, the group's frontier per
   topic: the earliest first-unconsumed and the latest last-consumed timestamp.
2. `with_source_classes`: source records inside a group's band, grouped by identity
   (SHA-256, timestamp): how many there are (n), how many the group consumed (c), and whether
   they all sit on one source partition.
3. `with_placement`: every destination record read is `consumed`, `unconsumed` or `unplaced`:
   older than the band: consumed; newer: unconsumed; inside it by identity — all of its
   identity consumed, or none; identical records by occurrence order when all of them sit on
   one source and one destination partition (a replicator keeps a partition's order); any
   other destination record is unplaced and counts as not consumed (no loss, maybe a
   duplicate more).
4. `reconciled_offsets`: D_q, duplicates and unplaced records per group × destination
   partition; `missing_consumed`: consumed records of the band not on the destination yet
   (the group is PENDING until there are none).

Assumes the replicator keeps record timestamps (CreateTime) and that timestamps on each
partition are out of order by less than the matching windows, which widen the band.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

CONSUMED = "consumed"
UNCONSUMED = "unconsumed"
UNPLACED = "unplaced"

IDENTITY = ["sha256", "timestamp_ms"]


def with_frontier(positions_df: DataFrame, edges_df: DataFrame) -> DataFrame:
    """Per group × source topic: the earliest first-unconsumed timestamp (`lo_*`) and the
    latest last-consumed one (`hi_*`), with the partitions they are on.

    positions_df: group, topic, partition, committed_offset, log_end_offset.
    edges_df: topic, partition, offset, timestamp_ms — at least the records just before and
    at each committed offset. A partition with unconsumed records whose first one was not
    read (a gap) stands in with its last consumed record's timestamp, an earlier bound; with
    neither it is named in `unknown_partition`.
    """
    p, e = positions_df.alias("p"), edges_df.alias("e")
    joined = p.join(
        e,
        (F.col("p.topic") == F.col("e.topic")) & (F.col("p.partition") == F.col("e.partition")),
        "left",
    )
    is_before = F.col("e.offset") < F.col("p.committed_offset")
    per_partition = joined.groupBy(
        "p.group", "p.topic", "p.partition", "p.committed_offset", "p.log_end_offset"
    ).agg(
        F.max_by(F.col("e.timestamp_ms"), F.when(is_before, F.col("e.offset"))).alias("last_ts"),
        F.min_by(F.col("e.timestamp_ms"), F.when(~is_before, F.col("e.offset"))).alias("next_ts"),
    )
    has_unconsumed = F.col("committed_offset") < F.col("log_end_offset")
    first_unconsumed_ts = F.when(has_unconsumed, F.coalesce("next_ts", "last_ts"))
    unknown = has_unconsumed & F.col("next_ts").isNull() & F.col("last_ts").isNull()
    return (
        per_partition.groupBy("group", "topic")
        .agg(
            F.min_by(
                F.struct(first_unconsumed_ts.alias("ts"), F.col("partition")), first_unconsumed_ts
            ).alias("lo"),
            F.max_by(F.struct(F.col("last_ts").alias("ts"), F.col("partition")), "last_ts").alias(
                "hi"
            ),
            F.min(F.when(unknown, F.col("partition"))).alias("unknown_partition"),
        )
        .select(
            "group",
            "topic",
            F.col("lo.ts").alias("lo_timestamp_ms"),
            F.col("lo.partition").alias("lo_partition"),
            F.col("hi.ts").alias("hi_timestamp_ms"),
            F.col("hi.partition").alias("hi_partition"),
            "unknown_partition",
        )
    )


def _in_band(ts: Column) -> Column:
    return ts.between(F.col("band_lo_ms"), F.col("band_hi_ms"))


def with_source_classes(
    src_records_df: DataFrame, positions_df: DataFrame, bands_df: DataFrame
) -> DataFrame:
    """Per group and identity (SHA-256, timestamp) inside the group's band: n source records,
    c of them consumed, and whether they all sit on one source partition.

    src_records_df: topic, partition, offset, timestamp_ms, sha256.
    positions_df: group, topic, partition, committed_offset.
    bands_df: group, topic, dst_topic, band_lo_ms, band_hi_ms.
    """
    banded = (
        src_records_df.join(
            positions_df.select("group", "topic", "partition", "committed_offset"),
            ["topic", "partition"],
        )
        .join(
            bands_df.select("group", "topic", "dst_topic", "band_lo_ms", "band_hi_ms"),
            ["group", "topic"],
        )
        .filter(_in_band(F.col("timestamp_ms")))
    )
    return (
        banded.groupBy("group", "dst_topic", *IDENTITY)
        .agg(
            F.count("*").alias("n"),
            F.count(F.when(F.col("offset") < F.col("committed_offset"), 1)).alias("c"),
            (F.min("partition") == F.max("partition")).alias("is_one_source_partition"),
        )
        .select("group", "dst_topic", *IDENTITY, "n", "c", "is_one_source_partition")
    )


def with_destination_counts(dst_records_df: DataFrame) -> DataFrame:
    """Per destination identity: how many records carry it (m), in how many partitions, and
    each record's occurrence rank (offset order) when they all sit on one partition."""
    identity = Window.partitionBy("topic", *IDENTITY)
    return dst_records_df.select(
        "topic",
        "partition",
        "offset",
        *IDENTITY,
        F.count("*").over(identity).alias("m"),
        (F.min("partition").over(identity) == F.max("partition").over(identity)).alias(
            "is_one_destination_partition"
        ),
        F.row_number().over(identity.orderBy("partition", "offset")).alias("occurrence"),
    )


def with_placement(
    dst_counted_df: DataFrame, bands_df: DataFrame, classes_df: DataFrame
) -> DataFrame:
    """Every destination record read, per group of its topic: consumed, unconsumed or
    unplaced (see the module docstring)."""
    d = dst_counted_df.withColumnRenamed("topic", "dst_topic")
    per_group = d.join(
        bands_df.select("group", "dst_topic", "band_lo_ms", "band_hi_ms"), ["dst_topic"]
    ).join(classes_df, ["group", "dst_topic", *IDENTITY], "left")
    is_ranked = (
        F.col("is_one_source_partition")
        & F.col("is_one_destination_partition")
        & (F.col("m") <= F.col("n"))
    )
    placement = (
        F.when(F.col("timestamp_ms") < F.col("band_lo_ms"), F.lit(CONSUMED))
        .when(F.col("timestamp_ms") > F.col("band_hi_ms"), F.lit(UNCONSUMED))
        .when(F.col("n").isNull(), F.lit(UNPLACED))
        .when(F.col("c") == F.col("n"), F.lit(CONSUMED))
        .when(F.col("c") == 0, F.lit(UNCONSUMED))
        .when(is_ranked & (F.col("occurrence") <= F.col("c")), F.lit(CONSUMED))
        .when(is_ranked, F.lit(UNCONSUMED))
        .otherwise(F.lit(UNPLACED))
    )
    return per_group.select(
        "group",
        "dst_topic",
        F.col("partition").alias("dst_partition"),
        "offset",
        placement.alias("placement"),
    )


def reconciled_offsets(placed_df: DataFrame, partitions_df: DataFrame) -> DataFrame:
    """D_q, duplicates and unplaced records per group × destination partition.

    partitions_df: group, dst_topic, dst_partition, dst_log_end_offset — every destination
    partition of every group's topic, read or not (a partition with nothing read resumes at
    its log end: all of it is older than the band).
    """
    keys = ["group", "dst_topic", "dst_partition"]
    is_consumed = F.col("placement") == CONSUMED
    first_not_consumed = F.min(F.when(~is_consumed, F.col("offset"))).over(
        Window.partitionBy(*keys)
    )
    # One pass: every record beside its partition's first not-consumed offset (none: D_q is
    # the log end, and nothing read lies at or past it).
    is_past = F.col("offset") >= F.col("first_not_consumed")
    per_partition = (
        placed_df.withColumn("first_not_consumed", first_not_consumed)
        .groupBy(*keys)
        .agg(
            F.first("first_not_consumed").alias("first_not_consumed"),
            F.count(F.when(is_past & is_consumed, 1)).alias("duplicates"),
            F.count(F.when(is_past & (F.col("placement") == UNPLACED), 1)).alias("unplaced"),
            F.count("*").alias("records_read"),
        )
    )
    return partitions_df.join(per_partition, keys, "left").select(
        *keys,
        F.coalesce("first_not_consumed", "dst_log_end_offset").alias("destination_offset"),
        F.coalesce("duplicates", F.lit(0)).alias("duplicates"),
        F.coalesce("unplaced", F.lit(0)).alias("unplaced"),
        F.coalesce("records_read", F.lit(0)).alias("records_read"),
    )


def missing_consumed(classes_df: DataFrame, dst_counted_df: DataFrame) -> DataFrame:
    """Per group and destination topic: consumed band records with no copy on the destination
    yet. Where identical records can be told apart by order, the first c copies must be there;
    otherwise all n."""
    # m and the one-partition flag are per identity already: one row of each identity
    m = dst_counted_df.select(
        F.col("topic").alias("dst_topic"), *IDENTITY, "m", "is_one_destination_partition"
    ).distinct()
    joined = classes_df.filter(F.col("c") > 0).join(m, ["dst_topic", *IDENTITY], "left")
    is_ordered = F.col("is_one_source_partition") & F.coalesce(
        F.col("is_one_destination_partition"), F.lit(True)
    )
    need = F.when(is_ordered, F.col("c")).otherwise(F.col("n"))
    short = F.greatest(need - F.coalesce(F.col("m"), F.lit(0)), F.lit(0))
    return (
        joined.groupBy("group", "dst_topic")
        .agg(F.sum(short).alias("missing"))
        .select("group", "dst_topic", "missing")
    )
