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

The span's tail. Positions after the last record of their span (a gap at its end) all share one
answer, the first record at or after the span's end. The driver read simply reads on until it
sees that record or the partition's end; the Spark read stops at the span's end, so it probes
once per such span (`read_forward`), never when the span ends at the log end (nothing follows:
time lag 0, as for a caught-up group).

Where the reading happens. Spans of at most `DEFAULT_DRIVER_LIMIT` (250,000) offsets in total
are read on the driver by one consumer assigned to every partition's span at once (a partition
with several spans takes one per round), so each fetch request serves every partition, no
Spark job is started, and the job's Spark session can start meanwhile (`start_session`). A
Python data source read costs over a second to plan before reading anything, and its tasks read
their ranges one partition after the other: on the local test broker, which answers a fetch
with one batch per partition, 256 spans of 200 records took 8 s through the data source and 2 s
on the driver. The driver keeps only the positions, not the records; 250,000 offsets of ~1 KiB
are a few seconds of one consumer. Larger reads go through the `ferry-kafka` data source on the
executors and are resolved there (`with_next_records`); one row per position comes back. Both
give the same answer as a read per position.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

from ferry import kafka
from ferry.config import ReaderConfig
from ferry.kafka.admin import TopicPartitionKey
from ferry.kafka.cluster import Cluster, ClusterError
from ferry.kafka.source import OffsetRange, read_ranges
from ferry.session import local_df

DEFAULT_MAX_GAP = 1_000
DEFAULT_DRIVER_LIMIT = 250_000

_SPAN_POSITIONS_SCHEMA = StructType(
    [
        StructField("topic", StringType(), False),
        StructField("partition", IntegerType(), False),
        StructField("position", LongType(), False),
        StructField("span_end", LongType(), False),
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


def resolve_in_span(
    positions: Sequence[int], records: Sequence[NextRecord]
) -> dict[int, NextRecord]:
    """Sorted merge of one span: each position → the first record at or after it, for the
    positions that have one among `records` (sorted by offset); the rest are left out."""
    out: dict[int, NextRecord] = {}
    i = 0
    for position in sorted(positions):
        while i < len(records) and records[i][0] < position:
            i += 1
        if i == len(records):
            break
        out[position] = records[i]
    return out


def with_next_records(positions_df: DataFrame, records_df: DataFrame) -> DataFrame:
    """Positions (topic, partition, position, span_end) with `next_offset` and
    `next_timestamp_ms`: the first of `records_df` (topic, partition, offset, timestamp_ms) at
    or after the position and before `span_end`; null when the span holds none.

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
        "span_end",
        F.lit(None).cast("struct<offset:bigint,ts:bigint>").alias("_record"),
    ).unionByName(
        records_df.select(
            "topic",
            "partition",
            F.col("offset").alias("_at"),
            F.lit(True).alias("_is_record"),
            F.lit(None).cast("bigint").alias("position"),
            F.lit(None).cast("bigint").alias("span_end"),
            F.struct(F.col("offset"), F.col("timestamp_ms").alias("ts")).alias("_record"),
        )
    )
    newest_first = (
        Window.partitionBy("topic", "partition")
        .orderBy(F.col("_at").desc(), is_record.desc())
        .rowsBetween(Window.unboundedPreceding, Window.currentRow)
    )
    nearest = F.last("_record", ignorenulls=True).over(newest_first)
    in_span = F.col("_next.offset") < F.col("span_end")
    return (
        merged_df.withColumn("_next", nearest)
        .filter(~is_record)
        .select(
            "topic",
            "partition",
            "position",
            "span_end",
            F.when(in_span, F.col("_next.offset")).alias("next_offset"),
            F.when(in_span, F.col("_next.ts")).alias("next_timestamp_ms"),
        )
    )


def next_records(
    spark: SparkSession | Callable[[], SparkSession],
    cluster: Cluster,
    positions: Iterable[Position],
    bounds: Mapping[TopicPartitionKey, tuple[int, int]],
    reader: ReaderConfig,
    *,
    max_gap: int = DEFAULT_MAX_GAP,
    driver_limit: int = DEFAULT_DRIVER_LIMIT,
    progress: Callable[[str], None] | None = None,
) -> dict[Position, NextRecord | None]:
    """Each position's next record (offset, timestamp ms), None when the partition has none
    at or after it. Positions must lie inside [log start, log end) of `bounds`. `spark` may
    be a callable giving the session (see `start_session`): only a read with Spark asks."""
    spans = plan_spans(positions, max_gap)
    if not spans:
        return {}
    offsets = sum(s.end - s.start for s in spans)
    on_driver = offsets <= driver_limit
    if progress is not None:
        progress(
            f"reading the next record of {sum(len(p) for p in spans.values())} positions: "
            f"{len(spans)} spans over {len({(s.topic, s.partition) for s in spans})} "
            f"partitions, {offsets} offsets, {'on the driver' if on_driver else 'with Spark'}"
        )
    if on_driver:
        return read_spans(cluster, spans, reader)
    session = spark() if callable(spark) else spark
    found = _read_spans_with_spark(session, cluster, spans, reader)
    # Positions in a span's trailing gap: one probe at the span's end answers them all.
    tails = {
        span: [p for p in offs if (span.topic, span.partition, p) not in found]
        for span, offs in spans.items()
    }
    tails = {span: offs for span, offs in tails.items() if offs}
    probes = {
        (s.topic, s.partition, s.end) for s in tails if s.end < bounds[(s.topic, s.partition)][1]
    }
    if progress is not None and probes:
        progress(f"reading forward past {len(probes)} spans that end in a gap")
    forward = read_forward(cluster, probes, reader.isolation_level)
    out: dict[Position, NextRecord | None] = dict(found)
    for span, offs in tails.items():
        answer = forward.get((span.topic, span.partition, span.end))
        for p in offs:
            out[(span.topic, span.partition, p)] = answer
    return out


def read_spans(
    cluster: Cluster, spans: Mapping[OffsetRange, Sequence[int]], reader: ReaderConfig
) -> dict[Position, NextRecord | None]:
    """Driver read: every partition's next span at once per round (one consumer), each span
    from its start until a record at or past its last position, or the partition's end; each
    position resolved by a sorted merge. Reading on past a span whose tail is a gap finds the
    first record after it, so no position needs a probe of its own."""
    pending: dict[TopicPartitionKey, list[OffsetRange]] = {}
    for span in sorted(spans, key=lambda s: (s.topic, s.partition, s.start)):
        pending.setdefault((span.topic, span.partition), []).append(span)
    out: dict[Position, NextRecord | None] = {}
    consumer = _consumer(cluster, reader.isolation_level)
    try:
        while pending:
            round_ = {tp: queue.pop(0) for tp, queue in pending.items()}
            for span, records in _read_round(cluster, consumer, round_, reader).items():
                found = resolve_in_span(spans[span], records)
                for p in spans[span]:
                    out[(span.topic, span.partition, p)] = found.get(p)
            pending = {tp: queue for tp, queue in pending.items() if queue}
    finally:
        consumer.close()
    return out


def _read_round(
    cluster: Cluster,
    consumer,  # noqa: ANN001 - confluent_kafka.Consumer
    spans: Mapping[TopicPartitionKey, OffsetRange],
    reader: ReaderConfig,
) -> dict[OffsetRange, list[NextRecord]]:
    """One span per partition, all partitions assigned at once: the span's records plus the
    first record after it when the span's last offset is missing."""
    from confluent_kafka import KafkaError, TopicPartition

    records: dict[OffsetRange, list[NextRecord]] = {s: [] for s in spans.values()}
    open_ = dict(spans)
    consumer.assign([TopicPartition(t, p, s.start) for (t, p), s in spans.items()])
    try:
        last_progress = time.monotonic()
        while open_:
            messages = consumer.consume(num_messages=10_000, timeout=0.05)
            if messages:
                last_progress = time.monotonic()
            elif (time.monotonic() - last_progress) * 1000 > reader.timeout_ms:
                where = ", ".join(f"{t}[{p}]" for t, p in sorted(open_)[:3])
                raise ClusterError(
                    f"{cluster.name}: timed out after {reader.timeout_ms} ms reading {where}"
                )
            done = []
            for msg in messages:
                key = (msg.topic(), msg.partition())
                span = open_.get(key)
                if span is None:
                    continue
                err = msg.error()
                if err is not None:
                    if err.code() != KafkaError._PARTITION_EOF:
                        raise ClusterError(f"{cluster.name}: reading {key[0]}[{key[1]}]: {err}")
                    done.append(open_.pop(key))  # nothing more to see in this partition
                    continue
                if msg.offset() < span.start:
                    continue
                records[span].append((msg.offset(), msg.timestamp()[1]))
                if msg.offset() >= span.end - 1:
                    done.append(open_.pop(key))
            if done:
                consumer.pause([TopicPartition(s.topic, s.partition) for s in done])
    finally:
        # Paused flags outlive an assignment in librdkafka; clear them for the next round.
        consumer.resume([TopicPartition(t, p) for t, p in spans])
        consumer.unassign()
    return records


def _read_spans_with_spark(
    spark: SparkSession,
    cluster: Cluster,
    spans: Mapping[OffsetRange, Sequence[int]],
    reader: ReaderConfig,
) -> dict[Position, NextRecord]:
    """Executor read through the data source, resolved in Spark; positions whose span holds
    no record at or after them are left out."""
    records_df = read_ranges(
        spark,
        cluster.conf,
        sorted(spans, key=lambda s: (s.topic, s.partition, s.start)),
        cluster=cluster.name,
        columns=("topic", "partition", "offset", "timestamp"),
        max_records_per_partition=reader.max_records_per_task,
        timeout_ms=reader.timeout_ms,
        isolation_level=reader.isolation_level,
    ).select("topic", "partition", "offset", F.unix_millis("timestamp").alias("timestamp_ms"))
    positions_df = local_df(
        spark,
        [(s.topic, s.partition, p, s.end) for s, offs in spans.items() for p in offs],
        _SPAN_POSITIONS_SCHEMA,
    )
    resolved_df = with_next_records(positions_df, records_df).filter(
        F.col("next_offset").isNotNull()
    )
    return {
        (r.topic, r.partition, r.position): (r.next_offset, r.next_timestamp_ms)
        for r in resolved_df.collect()
    }


def read_forward(
    cluster: Cluster, positions: Iterable[Position], isolation_level: str = "read_committed"
) -> dict[Position, NextRecord | None]:
    """First record at or after each position, in rounds of one position per partition."""
    by_partition: dict[TopicPartitionKey, list[int]] = {}
    for t, p, o in sorted(positions):
        by_partition.setdefault((t, p), []).append(o)
    out: dict[Position, NextRecord | None] = {}
    if not by_partition:
        return out
    consumer = _consumer(cluster, isolation_level)
    try:
        while by_partition:
            round_ = {tp: offsets.pop(0) for tp, offsets in by_partition.items()}
            seen = kafka.first_records_at(cluster, round_, consumer)
            for tp, o in round_.items():
                out[(tp[0], tp[1], o)] = seen.get(tp)
            by_partition = {tp: offs for tp, offs in by_partition.items() if offs}
    finally:
        consumer.close()
    return out


def _consumer(cluster: Cluster, isolation_level: str):  # noqa: ANN202 - confluent_kafka type
    """A reader that sees what the data source would: the reader's isolation level unless the
    cluster's properties set one."""
    return cluster.consumer({"isolation.level": isolation_level})


def start_session(app_name: str) -> Callable[[], SparkSession]:
    """Start building the Spark session in the background; the returned callable waits for
    it. Starting a SparkContext takes seconds that reading Kafka on the driver does not need,
    so a job can do both at once."""
    from ferry.session import build_session

    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ferry-session")
    future = pool.submit(build_session, app_name)
    pool.shutdown(wait=False)
    return future.result
