"""Extract: read the source around every committed offset and the destination around every
anchor's timestamp, each range once, to the driver: each record's offset, timestamp,
fingerprint and SHA-256 (`read_hashed`). The driver picks the anchors and their possible
candidates there and locates them (`ferry.migrate.context`); Spark gets only those rows and
their partitions' fingerprints, not every record read.

How far to read: a source partition is read from `2 × (context + 1)` offsets before each
committed offset C to `context + 1` after it; when that holds fewer than `context + 1`
records before C (compaction gaps, transaction markers) the missing stretch before it is read
too, four times further back each round, until there are enough records or the log start is
reached. With `matching.search: full`, destination windows come from the anchors' timestamps
widened by `window_before_ms`/`window_after_ms`; their offsets come from
`offsets_for_timestamps`, which treats the broker's answer as a lower bound and verifies it by
reading (the default narrow search is `ferry.migrate.search`)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from ferry import hashing, kafka
from ferry.config import FerryConfig
from ferry.kafka.cluster import Cluster
from ferry.kafka.reader import OffsetRange
from ferry.keys import TopicPartitionKey
from ferry.migrate import anchors, context, matching
from ferry.migrate.discover import Discovery
from ferry.migrate.model import offsets_by_partition
from ferry.migrate.ranges import RangeBook, merge_intervals, source_needs
from ferry.session import SparkOrLater, arrow_df

READ_COLUMNS = ["topic", "partition", "offset", "timestamp"]  # what matching reads, and sha256
MAX_LOOKBACK_ROUNDS = 8

DST_BOUNDS_SCHEMA = StructType(
    [
        StructField("dst_topic", StringType(), False),
        StructField("dst_partition", IntegerType(), False),
        StructField("dst_log_start_offset", LongType(), False),
        StructField("dst_log_end_offset", LongType(), False),
        StructField("dst_last_timestamp_ms", LongType(), True),
    ]
)


# What `read_records` returns (and `union_records` of nothing).
RECORDS_SCHEMA = StructType(
    [
        StructField("topic", StringType(), True),
        StructField("partition", IntegerType(), True),
        StructField("offset", LongType(), True),
        StructField("timestamp_ms", LongType(), True),
        StructField("sha256", BinaryType(), True),
    ]
)


def read_records(
    spark: SparkSession, cluster: Cluster, ranges: Sequence[OffsetRange], cfg: FerryConfig
) -> DataFrame:
    """Read ranges now, once: every later stage reuses these rows. Small reads run on the
    driver, large ones through Spark (`ferry.kafka.read`); the cluster carries the reader
    settings."""
    return as_records(kafka.read(spark, cluster, ranges, **_read_options(cfg), keep=True))


def _read_options(cfg: FerryConfig) -> dict:
    """What matching reads of a record: `READ_COLUMNS` and the hash of the configured fields."""
    return {
        "columns": READ_COLUMNS,
        "hash_fields": cfg.matching.hash,
        "ignore_headers": cfg.matching.ignore_headers,
    }


def _millis(table):  # noqa: ANN001, ANN202 - pyarrow
    """A read table's timestamps as epoch milliseconds."""
    import pyarrow as pa
    import pyarrow.compute as pc

    return pc.divide(pc.cast(table.column("timestamp"), pa.int64()), 1000)


def as_records(read_df: DataFrame) -> DataFrame:
    """A read's rows (`READ_COLUMNS` and sha256) as records (`RECORDS_SCHEMA`)."""
    return read_df.select(
        "topic",
        "partition",
        "offset",
        F.unix_millis("timestamp").alias("timestamp_ms"),
        "sha256",
    )


def extract_source_records(
    spark: SparkOrLater,
    src: Cluster,
    positions: Iterable[tuple[str, int, int]],
    disc: Discovery,
    cfg: FerryConfig,
    progress: Callable[[str], None],
):  # noqa: ANN201 - (records read per partition, intervals read per partition)
    """Read the source around every committed offset (positions: topic, partition, offset),
    looking further back where needed: on the driver, per partition, the offsets, timestamps,
    fingerprints and hashes of the records read (`anchors.records_by_partition`), which
    `ferry.migrate.anchors` and `ferry.migrate.context` pick from; and the intervals read (the
    context's segments). Nothing of it goes to Spark but the anchors and their partitions'
    fingerprints: a read around the committed offsets is as large as the positions are many,
    and handing all of it to Spark for the anchors' hashes took 0.9 s at 250,000 positions."""
    import pyarrow as pa

    k = cfg.matching.context
    book = RangeBook()
    pending = offsets_by_partition(positions)
    lookback = 2 * (k + 1)
    tables = []
    read: dict = {}  # per partition, (offsets, timestamps) of the records read so far
    for round_no in range(MAX_LOOKBACK_ROUNDS):
        ranges = book.new_ranges(source_needs(pending, disc.source_bounds, k, lookback))
        if ranges:
            n = sum(r.end - r.start for r in ranges)
            progress(f"source: reading {len(ranges)} ranges ({n} offsets), round {round_no + 1}")
            tables.append(read_hashed(spark, src, ranges, cfg))
            # On the driver as Arrow: a driver read's own (no Spark job, where counting them
            # against the committed offsets in Spark was the small run's first job), and no
            # Row per record.
            read = anchors.records_by_partition(
                pa.concat_tables(tables, promote_options="permissive")
            )
        offsets_read = {tp: records.offsets for tp, records in read.items()}
        short = short_of_context(offsets_read, pending, disc.source_bounds, k, lookback)
        if not short:
            break
        pending = short
        lookback *= 4
    return read, book.read


def read_hashed(
    spark: SparkOrLater, cluster: Cluster, ranges: Sequence[OffsetRange], cfg: FerryConfig
):  # noqa: ANN201 - pyarrow
    """The records of `ranges` on the driver only (`kafka.read_arrow`): topic, partition,
    offset, timestamp_ms, sha256 and fingerprint. What matching reads of either cluster: the
    driver picks the anchors and the possible candidates from it, and hands Spark only
    those, located (`located_records`), and their partitions' fingerprints."""
    import pyarrow as pa

    table = kafka.read_arrow(spark, cluster, ranges, **_read_options(cfg))
    hashes = table.column("sha256")
    return pa.table(
        {
            "topic": table.column("topic"),
            "partition": table.column("partition"),
            "offset": table.column("offset"),
            "timestamp_ms": _millis(table),
            "sha256": hashes,
            "fingerprint": pa.array(hashing.fingerprints(hashes)),
        }
    )


INDEX_SCHEMA = StructType(
    [
        StructField("topic", StringType(), False),
        StructField("partition", IntegerType(), False),
        StructField("offset", LongType(), False),
        StructField("timestamp_ms", LongType(), False),
        StructField("sha256", BinaryType(), False),
        StructField("at", IntegerType(), False),
        StructField("first", IntegerType(), False),
        StructField("last", IntegerType(), False),
    ]
)
REPEATED_SCHEMA = StructType([f for f in INDEX_SCHEMA.fields if f.name in context.REPEATED_FIELDS])
FINGERPRINTS_SCHEMA = StructType(
    [
        StructField("topic", StringType(), False),
        StructField("partition", IntegerType(), False),
        StructField("fingerprints", ArrayType(LongType(), False), False),
    ]
)


def fingerprints_df(
    spark: SparkSession, records: Mapping, partitions: Iterable[TopicPartitionKey]
) -> DataFrame:
    """The fingerprints of `partitions`' records read, on the driver (`records`:
    `anchors.records_by_partition`), as a DataFrame (`FINGERPRINTS_SCHEMA`)."""
    return arrow_df(spark, context.fingerprint_table(records, partitions), FINGERPRINTS_SCHEMA)


def located_records(
    spark: SparkSession,
    records: Mapping,
    segments: Mapping[TopicPartitionKey, Sequence[tuple[int, int]]],
    wanted: Mapping[TopicPartitionKey, Any],
) -> matching.Located:
    """The `wanted` records (per partition, offsets read), located on the driver
    (`ferry.migrate.context`), for Spark to cut their context where it compares them
    (`matching.with_context`), and the hashes two or more of them share."""
    index = context.index_table(records, segments, wanted)
    repeated = context.repeated_hashes(index)
    return matching.Located(
        arrow_df(spark, index, INDEX_SCHEMA),
        fingerprints_df(spark, records, wanted),
        arrow_df(spark, repeated, REPEATED_SCHEMA) if repeated.num_rows else None,
    )


def union_records(spark: SparkSession, parts: Sequence[DataFrame]) -> DataFrame:
    if not parts:
        return spark.createDataFrame([], RECORDS_SCHEMA)  # no rows: nothing goes through Python
    out = parts[0]
    for p in parts[1:]:
        out = out.unionByName(p)
    return out


def short_of_context(
    read: Mapping[TopicPartitionKey, Sequence[int]],
    pending: Mapping[TopicPartitionKey, Sequence[int]],
    bounds: Mapping[TopicPartitionKey, tuple[int, int]],
    k: int,
    lookback: int,
) -> dict[TopicPartitionKey, np.ndarray]:
    """Per partition, its committed offsets (`pending`) with fewer than k+1 records read
    before them (`read`: the offsets of the records read, per partition) whose read window
    has not yet reached the log start; partitions with none are left out."""
    short = {}
    for tp, offsets in pending.items():
        c = np.asarray(offsets, dtype=np.int64)
        have = np.sort(np.asarray(read.get(tp, ()), dtype=np.int64))
        # more to read before the window, and fewer than k + 1 records read before c
        is_short = (c - lookback > bounds[tp][0]) & (np.searchsorted(have, c) < k + 1)
        if is_short.any():
            short[tp] = c[is_short]
    return short


def destination_windows(
    keys: Iterable[tuple[str, int, int]], before_ms: int, after_ms: int
) -> dict[TopicPartitionKey, list[tuple[int, int]]]:
    """Merged timestamp windows per destination partition, of the anchor positions `keys`
    (dst_topic, dst_partition, anchor_timestamp_ms)."""
    per_tp: dict[TopicPartitionKey, list[tuple[int, int]]] = defaultdict(list)
    for t, p, ts in keys:
        per_tp[(t, p)].append((ts - before_ms, ts + after_ms + 1))
    return {tp: merge_intervals(ws) for tp, ws in per_tp.items()}


def window_offsets(
    dst: Cluster,
    windows: Mapping[TopicPartitionKey, list[tuple[int, int]]],
    bounds: Mapping[TopicPartitionKey, tuple[int, int]],
    k: int,
) -> dict[TopicPartitionKey, list[tuple[int, int]]]:
    """Offset intervals to read for the windows, merged (`window_extents`)."""
    extents = window_extents(dst, windows, bounds, k)
    return {tp: merge_intervals(ivs) for tp, ivs in extents.items()}


def window_extents(
    dst: Cluster,
    windows: Mapping[TopicPartitionKey, Sequence[tuple[int, int]]],
    bounds: Mapping[TopicPartitionKey, tuple[int, int]],
    k: int,
) -> dict[TopicPartitionKey, list[tuple[int, int]]]:
    """The offsets to read for each timestamp window [lo, hi), in the order given: from
    2(k+1) records before its first record to k+1 after its last (for context), found by
    verified timestamp lookups, every window's both ends at once."""
    targets = {tp: {t for w in ws for t in w} for tp, ws in windows.items()}
    found = kafka.offsets_for_many_timestamps(dst, targets, bounds)
    out: dict[TopicPartitionKey, list[tuple[int, int]]] = {}
    for (t, p), ws in windows.items():
        log_start, log_end = bounds[(t, p)]
        out[(t, p)] = []
        for lo, hi in ws:
            first, after = (found[(t, p, x)] for x in (lo, hi))
            first = log_end if first is None else first
            after = log_end if after is None else after
            out[(t, p)].append((max(log_start, first - 2 * (k + 1)), min(log_end, after + k + 1)))
    return out


def destination_last_timestamps(
    dst: Cluster, bounds: Mapping[TopicPartitionKey, tuple[int, int]]
) -> dict[TopicPartitionKey, int | None]:
    """Timestamp of (about) the newest record of each destination partition; None if empty."""
    probes = {tp: max(s, e - 1) for tp, (s, e) in bounds.items() if e > s}
    seen = kafka.first_records_at(dst, probes)
    missing = {tp: max(bounds[tp][0], bounds[tp][1] - 64) for tp, r in seen.items() if r is None}
    seen.update(kafka.first_records_at(dst, missing))
    return {tp: (seen[tp][1] if seen.get(tp) else None) for tp in bounds}
