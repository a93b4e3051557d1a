"""Each position's next record, read one span of positions at a time instead of one seek each.

Time lag needs, for every distinct (topic, partition, position), the *next record*: the first
record a reader sees at or after the position. Records may be missing at any offset (compaction
gaps, transaction markers, aborted records under read_committed), so "the record at the
position" is not enough.

Clustering rule. A partition's distinct positions, sorted, are cut into spans wherever two
neighbours are more than `max_gap` offsets apart (default `DEFAULT_MAX_GAP` = 1,000); a span
`[first, last + 1)` is read once and each of its positions takes the first record read at or
after it. Why 1,000: a seek costs a fetch round trip, and the broker answers any fetch with up
to max.partition.fetch.bytes (1 MiB) of record batches, so reading through a gap of 1,000
records of ~1 KiB costs about what the seek would; farther apart, seeking is cheaper. Positions
crowd: 2,000 groups over 256 partitions of 200 records are 256 spans, where one read per
position made ~51,000.

The span's tail. Each span is read on to the first record at or after its last position
(`to_next_record` of `ferry.kafka.read`), so positions in a gap at the span's end find the
record after the gap, or the partition's end (no next record: time lag 0, as for a caught-up
group) — no position needs a read of its own.

Where the reading happens is `ferry.kafka.read`'s choice, by size (`reader.driver_max_offsets`):
small reads on the driver, every partition's spans by one consumer at once, while the job's
Spark session starts (`ferry.session.start_session`); large ones through the `ferry-kafka` data
source on the executors. Either way each position is resolved in Spark against the records read
(`with_next_records`) and one row per position comes back. Both give the same answer as a read
per position.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

from ferry import kafka
from ferry.kafka.cluster import Cluster
from ferry.kafka.reader import OffsetRange
from ferry.keys import TopicPartitionKey
from ferry.session import local_df

DEFAULT_MAX_GAP = 1_000
# A record's offset and timestamp, as the position rows carry it (a type object: a type
# string would start Spark's SQL parser, half a second on a cold JVM).
RECORD_TYPE = StructType(
    [StructField("offset", LongType(), True), StructField("ts", LongType(), True)]
)

POSITIONS_SCHEMA = StructType(
    [
        StructField("topic", StringType(), False),
        StructField("partition", IntegerType(), False),
        StructField("position", LongType(), False),
    ]
)

Position = tuple[str, int, int]  # topic, partition, offset
NextRecord = tuple[int, int]  # offset, timestamp ms


def plan_spans(
    positions: Iterable[Position], max_gap: int = DEFAULT_MAX_GAP
) -> dict[OffsetRange, list[int]]:
    """Spans covering the positions, each with its positions (sorted): per partition,
    neighbours at most `max_gap` apart share a span `[first, last + 1)`."""
    if max_gap < 0:
        raise ValueError(f"max_gap must be >= 0, got {max_gap}")
    by_partition: dict[TopicPartitionKey, list[int]] = {}
    for topic, partition, offset in sorted(set(positions)):
        by_partition.setdefault((topic, partition), []).append(offset)
    spans: dict[OffsetRange, list[int]] = {}
    for (topic, partition), offsets in by_partition.items():
        members = [offsets[0]]
        for offset in offsets[1:]:
            if offset - members[-1] > max_gap:
                spans[OffsetRange(topic, partition, members[0], members[-1] + 1)] = members
                members = []
            members.append(offset)
        spans[OffsetRange(topic, partition, members[0], members[-1] + 1)] = members
    return spans


def with_next_records(positions_df: DataFrame, records_df: DataFrame) -> DataFrame:
    """Positions (topic, partition, position) with `next_offset` and `next_timestamp_ms`: the
    first of `records_df` (topic, partition, offset, timestamp_ms) at or after the position;
    null when none was read. Exact when the records are every record from each position on to
    the first one after it, as reading each span on to its next record gives.

    Positions and records in one offset order per partition, newest first, so a running `last`
    (linear, where a frame to the end would be quadratic) carries the nearest record at or
    after each position; at an equal offset the record sorts first, so it counts as "at".
    """
    is_record = F.col("_is_record")
    merged_df = positions_df.select(
        "topic",
        "partition",
        F.col("position").alias("_at"),
        F.lit(False).alias("_is_record"),
        "position",
        F.lit(None).cast(RECORD_TYPE).alias("_record"),
    ).unionByName(
        records_df.select(
            "topic",
            "partition",
            F.col("offset").alias("_at"),
            F.lit(True).alias("_is_record"),
            F.lit(None).cast(LongType()).alias("position"),
            F.struct(F.col("offset"), F.col("timestamp_ms").alias("ts")).alias("_record"),
        )
    )
    newest_first = (
        Window.partitionBy("topic", "partition")
        .orderBy(F.col("_at").desc(), is_record.desc())
        .rowsBetween(Window.unboundedPreceding, Window.currentRow)
    )
    return (
        merged_df.withColumn("_next", F.last("_record", ignorenulls=True).over(newest_first))
        .filter(~is_record)
        .select(
            "topic",
            "partition",
            "position",
            F.col("_next.offset").alias("next_offset"),
            F.col("_next.ts").alias("next_timestamp_ms"),
        )
    )


def next_records(
    spark: SparkSession | Callable[[], SparkSession],
    cluster: Cluster,
    positions: Iterable[Position],
    *,
    max_gap: int = DEFAULT_MAX_GAP,
    progress: Callable[[str], None] | None = None,
) -> dict[Position, NextRecord | None]:
    """Each position's next record (offset, timestamp ms), None when the partition has none
    at or after it. `spark` may be a callable giving the session (see
    `ferry.session.start_session`): a read on the driver asks for it only once Kafka has been
    read."""
    spans = plan_spans(positions, max_gap)
    if not spans:
        return {}
    offsets = sum(s.end - s.start for s in spans)
    if progress is not None:
        where = "on the driver" if cluster.reads_on_driver(offsets) else "with Spark"
        progress(
            f"reading the next record of {sum(len(p) for p in spans.values())} positions: "
            f"{len(spans)} spans over {len({(s.topic, s.partition) for s in spans})} "
            f"partitions, {offsets} offsets, {where}"
        )
    records_df = kafka.read(
        spark,
        cluster,
        sorted(spans, key=lambda s: (s.topic, s.partition, s.start)),
        columns=("topic", "partition", "offset", "timestamp"),
        to_next_record=True,
    ).select("topic", "partition", "offset", F.unix_millis("timestamp").alias("timestamp_ms"))
    session = spark() if callable(spark) else spark
    positions_df = local_df(
        session,
        [(s.topic, s.partition, p) for s, members in spans.items() for p in members],
        POSITIONS_SCHEMA,
    )
    return {
        (r.topic, r.partition, r.position): (
            (r.next_offset, r.next_timestamp_ms) if r.next_offset is not None else None
        )
        for r in with_next_records(positions_df, records_df).collect()
    }
