"""Reconcile: every destination record read, identified among the source records read — once
for all groups — by its identity (SHA-256, timestamp): a **copy** of one source record
(p, offset) — a unique identity, or identical records all on one source and one destination
partition, matched in offset order (a replicator keeps a partition's order); **special** —
identical records over several partitions, or more copies than sources (a replicator's
re-sends); or **not found** on the source. Also which source milliseconds must be read to
identify the destination records read (`with_needed_times`).

Assumes the replicator keeps record timestamps (CreateTime) and each source partition's order.
"""

from __future__ import annotations

from collections.abc import Mapping

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.types import IntegerType, MapType, StringType

COPY = "copy"
SPECIAL = "special"
NOT_FOUND = "not_found"

IDENTITY = ["sha256", "timestamp_ms"]

COPIES_COLUMNS = [
    "dst_topic",
    "dst_partition",
    "offset",
    "timestamp_ms",
    "kind",
    "src_partition",
    "src_offset",
    "source_partitions",
    "source_offsets",
]


def with_copies(
    dst_records_df: DataFrame, src_records_df: DataFrame, destination_topics: Mapping[str, str]
) -> DataFrame:
    """Every destination record read, identified among the source records read (see the
    module docstring): `kind` copy / special / not_found; a copy's `src_partition` and
    `src_offset`; a special record's sources (`source_partitions`, `source_offsets`).

    Records of both sides: topic, partition, offset, timestamp_ms, sha256.
    `destination_topics`: source topic → destination topic."""
    pairs = [F.lit(x) for kv in sorted(destination_topics.items()) for x in kv]
    no_topics = F.create_map().cast(MapType(StringType(), StringType()))
    to_destination = F.create_map(*pairs) if pairs else no_topics
    per_identity = (
        src_records_df.select(
            to_destination[F.col("topic")].alias("dst_topic"), "partition", "offset", *IDENTITY
        )
        .groupBy("dst_topic", *IDENTITY)
        .agg(
            F.count("*").alias("n"),
            (F.min("partition") == F.max("partition")).alias("is_one_source_partition"),
            F.array_sort(F.collect_list(F.struct("offset", "partition"))).alias("sources"),
        )
    )
    identity = Window.partitionBy("topic", *IDENTITY)
    counted = dst_records_df.select(
        F.col("topic").alias("dst_topic"),
        F.col("partition").alias("dst_partition"),
        "offset",
        *IDENTITY,
        F.count("*").over(identity).alias("m"),
        (F.min("partition").over(identity) == F.max("partition").over(identity)).alias(
            "is_one_destination_partition"
        ),
        F.row_number().over(identity.orderBy("partition", "offset")).alias("occurrence"),
    )
    joined = counted.join(per_identity, ["dst_topic", *IDENTITY], "left")
    # Identical records are told apart by order only when every source record and every copy
    # of them was read: as many copies as sources, one partition each side.
    is_copy = (
        F.col("is_one_source_partition")
        & F.col("is_one_destination_partition")
        & (F.col("m") == F.col("n"))
    )
    kind = (
        F.when(F.col("n").isNull(), F.lit(NOT_FOUND))
        .when(is_copy, F.lit(COPY))
        .otherwise(F.lit(SPECIAL))
    )
    source = F.element_at("sources", F.col("occurrence").cast(IntegerType()))
    is_special = F.col("n").isNotNull() & ~is_copy
    return joined.select(
        "dst_topic",
        "dst_partition",
        "offset",
        "timestamp_ms",
        kind.alias("kind"),
        F.when(is_copy, source["partition"]).alias("src_partition"),
        F.when(is_copy, source["offset"]).alias("src_offset"),
        F.when(is_special, F.transform("sources", lambda s: s["partition"])).alias(
            "source_partitions"
        ),
        F.when(is_special, F.transform("sources", lambda s: s["offset"])).alias("source_offsets"),
    )


def with_needed_times(dst_records_df: DataFrame, slices_df: DataFrame) -> DataFrame:
    """Per frontier: the earliest and latest timestamp of the destination records read in its
    slices and inside its band — what the source must be read for to identify them.

    slices_df: frontier (int), dst_topic, dst_partition, slice_start, slice_end, band_lo_ms,
    band_hi_ms."""
    r, s = dst_records_df, F.broadcast(slices_df)
    joined = r.join(
        s,
        (r["topic"] == s["dst_topic"])
        & (r["partition"] == s["dst_partition"])
        & (r["offset"] >= s["slice_start"])
        & (r["offset"] < s["slice_end"]),
    ).filter(r["timestamp_ms"].between(s["band_lo_ms"], s["band_hi_ms"]))
    return joined.groupBy("frontier").agg(
        F.min(r["timestamp_ms"]).alias("earliest_ms"), F.max(r["timestamp_ms"]).alias("latest_ms")
    )
