"""Difference: how many records lie between two offsets of a destination partition — what an
`audit` row's `difference` and `migrate`'s dry-run column of the same name count.

Offsets are not records: compaction leaves gaps, every transaction leaves a marker offset, and
a read_committed reader skips aborted records, so `committed - exact` overstates how many
records consumers would receive again or miss. The records are read — their offsets only —
from the destination with the reader's isolation level (what a consumer would see) through
`ferry.kafka.read` (small reads on the driver, large ones in Spark), each partition's spans
merged first so an offset is read once however many groups share it. A read held on the
driver is counted there by binary search; a larger one in one Spark job: the spans' ends are
placed among their partition's records, and a running count gives each end the number of
records before it (linear in records + ends, where joining every span to every record would
multiply them). Both give the same counts (the unit tests check them on the same data).

What it costs: every offset between the two, once per partition, clamped to the log (offsets
before the log start or past its end hold nothing to count). A span of more than
`audit.max_count_offsets` offsets is not read (a live group far ahead, a translation off by
millions): its difference is the clamped offset span, an upper bound on the records, reported
as not counted.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterable, Mapping

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

from ferry import kafka
from ferry.config import FerryConfig
from ferry.kafka.cluster import Cluster
from ferry.keys import TopicPartitionKey
from ferry.migrate.ranges import merge_intervals
from ferry.migrate.spans import Count, Span
from ferry.session import local_df

SPANS_SCHEMA = StructType(
    [
        StructField("topic", StringType(), False),
        StructField("partition", IntegerType(), False),
        StructField("lo", LongType(), False),
        StructField("hi", LongType(), False),
    ]
)


def plan_counts(
    spans: Iterable[Span],
    bounds: Mapping[TopicPartitionKey, tuple[int, int]],
    max_offsets: int,
) -> tuple[dict[Span, Span], dict[Span, Count]]:
    """Split spans into those to read — span → the span clamped to [log start, log end) — and
    those answered without reading: empty once clamped (0 records), or wider than
    `max_offsets` (the clamped offset span, not counted)."""
    to_read: dict[Span, Span] = {}
    answered: dict[Span, Count] = {}
    for span in set(spans):
        topic, partition, lo, hi = span
        start, end = bounds[(topic, partition)]
        lo_c, hi_c = max(lo, start), min(hi, end)
        if hi_c <= lo_c:
            answered[span] = (0, True)
        elif hi_c - lo_c > max_offsets:
            answered[span] = (hi_c - lo_c, False)
        else:
            to_read[span] = (topic, partition, lo_c, hi_c)
    return to_read, answered


def read_ranges_of(spans: Iterable[Span]) -> list[kafka.OffsetRange]:
    """Each partition's spans merged into the fewest ranges (an offset read once)."""
    by_partition: dict[TopicPartitionKey, list[tuple[int, int]]] = {}
    for topic, partition, lo, hi in spans:
        by_partition.setdefault((topic, partition), []).append((lo, hi))
    return [
        kafka.OffsetRange(topic, partition, lo, hi)
        for (topic, partition), intervals in sorted(by_partition.items())
        for lo, hi in merge_intervals(intervals)
    ]


def with_record_counts(spans_df: DataFrame, records_df: DataFrame) -> DataFrame:
    """Spans (topic, partition, lo, hi) with `records`: how many of `records_df` (topic,
    partition, offset) lie in [lo, hi). Every offset of a span must have been read.

    Span ends and records in one offset order per partition; an end sorts before a record at
    the same offset, so a running count of records gives each end the records before it, and
    a span holds before(hi) - before(lo)."""
    ends_df = (
        spans_df.select("topic", "partition", F.col("lo").alias("offset"))
        .union(spans_df.select("topic", "partition", F.col("hi").alias("offset")))
        .distinct()
        .withColumn("_is_record", F.lit(0))
    )
    marked_df = ends_df.unionByName(
        records_df.select("topic", "partition", "offset", F.lit(1).alias("_is_record"))
    )
    ordered = (
        Window.partitionBy("topic", "partition")
        .orderBy("offset", "_is_record")
        .rowsBetween(Window.unboundedPreceding, Window.currentRow)
    )
    before_df = (
        marked_df.withColumn("_before", F.sum("_is_record").over(ordered))
        .filter(F.col("_is_record") == 0)
        .select("topic", "partition", F.col("offset").alias("_at"), "_before")
    )
    lo_df = before_df.withColumnRenamed("_at", "lo").withColumnRenamed("_before", "_lo_before")
    hi_df = before_df.withColumnRenamed("_at", "hi").withColumnRenamed("_before", "_hi_before")
    return (
        spans_df.join(lo_df, ["topic", "partition", "lo"])
        .join(hi_df, ["topic", "partition", "hi"])
        .select(
            "topic",
            "partition",
            "lo",
            "hi",
            (F.col("_hi_before") - F.col("_lo_before")).cast(LongType()).alias("records"),
        )
    )


def count_records(
    spark: SparkSession,
    dst: Cluster,
    spans: Iterable[Span],
    bounds: Mapping[TopicPartitionKey, tuple[int, int]],
    cfg: FerryConfig,
    progress: Callable[[str], None],
) -> dict[Span, Count]:
    """Records in each span of the destination (see the module docstring). `bounds` (log
    start, log end) may leave partitions out: their watermarks are fetched."""
    spans = set(spans)
    if not spans:
        return {}
    missing = {(t, p) for t, p, _, _ in spans} - set(bounds)
    if missing:
        bounds = {**bounds, **kafka.watermarks(dst, missing)}
    to_read, counts = plan_counts(spans, bounds, cfg.audit.max_count_offsets)
    if not to_read:
        return counts
    ranges = read_ranges_of(to_read.values())
    offsets = sum(r.end - r.start for r in ranges)
    progress(
        f"counting records between committed and exact offsets: {len(to_read)} spans, "
        f"{offsets} offsets over {len({(r.topic, r.partition) for r in ranges})} partitions"
        + (f" ({len(counts)} spans not read)" if counts else "")
    )
    # on the driver or through Spark, by size (reader.driver_max_offsets)
    records_df = kafka.read(spark, dst, ranges, columns=("topic", "partition", "offset"))
    clamped = sorted(set(to_read.values()))
    if dst.reads_on_driver(offsets):
        # the records are on the driver already: a sorted merge there, no Spark job
        found = count_sorted(clamped, records_df.select("topic", "partition", "offset").collect())
    else:
        spans_df = local_df(spark, clamped, SPANS_SCHEMA)
        found = {
            (r.topic, r.partition, r.lo, r.hi): r.records
            for r in with_record_counts(spans_df, records_df).collect()
        }
    for span, read in to_read.items():
        counts[span] = (found[read], True)
    return counts


def count_sorted(spans: Iterable[Span], records: Iterable[tuple[str, int, int]]) -> dict[Span, int]:
    """`with_record_counts` for a read small enough to hold on the driver: records (topic,
    partition, offset) in each span, by binary search in each partition's sorted offsets."""
    offsets: dict[TopicPartitionKey, list[int]] = {}
    for topic, partition, offset in records:
        offsets.setdefault((topic, partition), []).append(offset)
    for found in offsets.values():
        found.sort()
    return {
        (t, p, lo, hi): bisect_left(offsets.get((t, p), []), hi)
        - bisect_left(offsets.get((t, p), []), lo)
        for t, p, lo, hi in spans
    }
