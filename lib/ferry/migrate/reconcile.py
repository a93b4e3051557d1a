"""Plan the topics whose records sit in other partitions on the destination (another partition
count, or `matching.partitioning: reconcile`): one plan row per group × destination partition
with its reconciled offset, duplicates and unplaced records (`ferry.migrate.placement`).

Reads, every group of a topic sharing them:
1. the source records just before and at every committed offset: each group's frontier, from
   its earliest first-unconsumed record (lo) to its latest last-consumed one (hi);
2. the frontier band of every source and destination partition: [min(lo, hi) −
   window_before_ms, max(lo, hi) + window_after_ms], bands of several groups merged, offsets
   found by verified timestamp lookups, plus the first record past the band.
A group whose consumed and unconsumed records interleave over more than `matching.max_band_ms`
(hi − lo: a group that stopped hours apart on different partitions) is not planned: its rows
say how wide the band is and where; raising the bound reads that much more of every partition.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

from ferry import kafka
from ferry.config import FerryConfig
from ferry.kafka.admin import TopicPartitionKey
from ferry.kafka.cluster import Cluster
from ferry.migrate import placement
from ferry.migrate.discover import Discovery
from ferry.migrate.extract import read_records, union_records, window_offsets
from ferry.migrate.matching import plan_row
from ferry.migrate.ranges import RangeBook, merge_intervals
from ferry.session import local_df
from ferry.status import PartitionStatus

STATUS_RECONCILED = PartitionStatus.RECONCILED.value
STATUS_PENDING = PartitionStatus.PENDING.value
STATUS_NO_POSITION = PartitionStatus.NO_POSITION.value
STATUS_BAND_TOO_WIDE = PartitionStatus.BAND_TOO_WIDE.value
EDGE = 2  # records read either side of a committed offset to find its frontier

POSITIONS_SCHEMA = StructType(
    [
        StructField("group", StringType(), False),
        StructField("topic", StringType(), False),
        StructField("partition", IntegerType(), False),
        StructField("committed_offset", LongType(), False),
        StructField("log_end_offset", LongType(), False),
    ]
)
BANDS_SCHEMA = StructType(
    [
        StructField("group", StringType(), False),
        StructField("topic", StringType(), False),
        StructField("dst_topic", StringType(), False),
        StructField("band_lo_ms", LongType(), False),
        StructField("band_hi_ms", LongType(), False),
    ]
)
DST_PARTITIONS_SCHEMA = StructType(
    [
        StructField("group", StringType(), False),
        StructField("dst_topic", StringType(), False),
        StructField("dst_partition", IntegerType(), False),
        StructField("dst_log_end_offset", LongType(), False),
    ]
)


@dataclass(frozen=True)
class Band:
    group: str
    topic: str
    dst_topic: str
    lo_ms: int
    hi_ms: int


def plan_reconciled(
    spark: SparkSession,
    src: Cluster,
    dst: Cluster,
    disc: Discovery,
    cfg: FerryConfig,
    progress: Callable[[str], None],
) -> list[dict]:
    """Plan rows for every selected group on every reconciled topic it has offsets on."""
    positions, problems = _positions(disc)
    if not positions and not problems:
        return []
    positions_df = local_df(spark, positions, POSITIONS_SCHEMA)
    bands, more_problems = _bands(spark, src, disc, cfg, positions, positions_df, progress)
    problems.update(more_problems)
    reconciled, missing = _reconcile(spark, src, dst, disc, cfg, positions_df, bands, progress)
    rows = []
    topics = {(g, t) for g, t, *_ in positions} | set(problems)
    for group, topic in sorted(topics):
        dst_topic = cfg.topics.destination_topic(topic)
        for q in range(disc.reconcile_topics[topic][1]):
            row = _row(group, topic, dst_topic, q)
            if (group, topic) in problems:
                row["status"], row["note"] = problems[(group, topic)]
            elif (group, topic) not in bands:  # nothing on the source to reconcile against
                row.update(destination_offset=disc.destination_bounds[(dst_topic, q)][1])
                row.update(status=STATUS_RECONCILED, is_resolved=True, duplicates=0, unplaced=0)
            else:
                row.update(reconciled[(group, dst_topic, q)])
                short = missing.get((group, dst_topic), 0)
                row["status"] = STATUS_PENDING if short else STATUS_RECONCILED
                row["is_resolved"] = not short
                if short:
                    row["note"] = f"{short} consumed records of the band not on the destination yet"
                elif row["duplicates"] or row["unplaced"]:
                    row["note"] = f"{row['duplicates']} duplicates, {row['unplaced']} unplaced"
            rows.append(row)
    return rows


def _positions(disc: Discovery):  # noqa: ANN202 - (positions, problems)
    """(group, topic, partition, committed offset, log end) for every source partition of every
    reconciled topic a group has offsets on; a group without an offset on a partition that
    holds records cannot be placed (its position there is unknown)."""
    positions: list[tuple[str, str, int, int, int]] = []
    problems: dict[tuple[str, str], tuple[str, str]] = {}
    for group in disc.groups:
        if group in disc.refusals:
            continue
        committed = disc.committed[group]
        for topic in sorted({t for t, _ in committed if disc.is_reconciled(t)}):
            rows, unknown = [], []
            for p in range(disc.reconcile_topics[topic][0]):
                start, end = disc.source_bounds[(topic, p)]
                c = committed.get((topic, p))
                if c is None and start < end:
                    unknown.append(p)
                    continue
                c = end if c is None else min(max(c, start), end)
                rows.append((group, topic, p, c, end))
            if unknown:
                problems[(group, topic)] = (
                    STATUS_NO_POSITION,
                    f"no committed offset on {topic}{unknown}, which hold records: reconcile "
                    "needs the group's position on every source partition",
                )
            else:
                positions.extend(rows)
    return positions, problems


def _bands(spark, src, disc, cfg, positions, positions_df, progress):  # noqa: ANN001, ANN202
    """Each group's frontier band per topic, from the records around its committed offsets."""
    needs: dict[TopicPartitionKey, list[tuple[int, int]]] = defaultdict(list)
    for _, topic, p, c, end in positions:
        start = disc.source_bounds[(topic, p)][0]
        needs[(topic, p)].append((max(start, c - EDGE), min(end, c + EDGE)))
    ranges = RangeBook().new_ranges(needs)
    progress(f"reconcile: reading the source around {len(positions)} committed offsets")
    edges_df = read_records(spark, src, ranges, cfg) if ranges else union_records(spark, [])
    frontier = placement.with_frontier(positions_df, edges_df).collect()
    bands: dict[tuple[str, str], Band] = {}
    problems: dict[tuple[str, str], tuple[str, str]] = {}
    m = cfg.matching
    for f in frontier:
        key = (f.group, f.topic)
        if f.unknown_partition is not None:
            problems[key] = (
                STATUS_NO_POSITION,
                f"no record found around the committed offset on {f.topic}[{f.unknown_partition}]",
            )
            continue
        known = [t for t in (f.lo_timestamp_ms, f.hi_timestamp_ms) if t is not None]
        if not known:
            continue  # the source topic holds no record: nothing consumed, nothing to find
        overlap = (f.hi_timestamp_ms or 0) - (f.lo_timestamp_ms or 0) if len(known) == 2 else 0
        if overlap > m.max_band_ms:
            problems[key] = (
                STATUS_BAND_TOO_WIDE,
                f"frontier band is {overlap / 60_000:.0f} min wide: first unconsumed record on "
                f"{f.topic}[{f.lo_partition}] from {_iso(f.lo_timestamp_ms)}, last consumed on "
                f"{f.topic}[{f.hi_partition}] from {_iso(f.hi_timestamp_ms)}; raise "
                f"matching.max_band_ms ({m.max_band_ms}) to read that much of every partition",
            )
            continue
        bands[key] = Band(
            f.group,
            f.topic,
            cfg.topics.destination_topic(f.topic),
            min(known) - m.window_before_ms,
            max(known) + m.window_after_ms,
        )
    return bands, problems


def _reconcile(spark, src, dst, disc, cfg, positions_df, bands, progress):  # noqa: ANN001, ANN202
    """Read every band once per side and place the destination's records."""
    if not bands:
        return {}, {}
    src_windows: dict[TopicPartitionKey, list[tuple[int, int]]] = defaultdict(list)
    dst_windows: dict[TopicPartitionKey, list[tuple[int, int]]] = defaultdict(list)
    for b in bands.values():
        n_src, n_dst = disc.reconcile_topics[b.topic]
        for p in range(n_src):
            src_windows[(b.topic, p)].append((b.lo_ms, b.hi_ms + 1))
        for q in range(n_dst):
            dst_windows[(b.dst_topic, q)].append((b.lo_ms, b.hi_ms + 1))
    # The destination first, then the source up to its log end as it is now: every record
    # the replicator had copied when the destination was read has its source record read too
    # (on a live source a record produced after discovery is otherwise unplaced).
    dst_df = _read_band(
        spark, dst, dst_windows, disc.destination_bounds, cfg, "destination", progress
    )
    dst_df.count()
    now = kafka.watermarks(src, src_windows)
    src_bounds = {tp: (disc.source_bounds[tp][0], end) for tp, (_, end) in now.items()}
    src_df = _read_band(spark, src, src_windows, src_bounds, cfg, "source", progress)
    bands_df = local_df(
        spark,
        [(b.group, b.topic, b.dst_topic, b.lo_ms, b.hi_ms) for b in bands.values()],
        BANDS_SCHEMA,
    )
    partitions_df = local_df(
        spark,
        [
            (b.group, b.dst_topic, q, disc.destination_bounds[(b.dst_topic, q)][1])
            for b in bands.values()
            for q in range(disc.reconcile_topics[b.topic][1])
        ],
        DST_PARTITIONS_SCHEMA,
    )
    classes_df = placement.with_source_classes(src_df, positions_df, bands_df).persist()
    counted_df = placement.with_destination_counts(dst_df).persist()
    placed_df = placement.with_placement(counted_df, bands_df, classes_df)
    progress(f"reconcile: placing destination records for {len(bands)} group topics")
    reconciled = {
        (r.group, r.dst_topic, r.dst_partition): {
            "destination_offset": r.destination_offset,
            "duplicates": r.duplicates,
            "unplaced": r.unplaced,
        }
        for r in placement.reconciled_offsets(placed_df, partitions_df).collect()
    }
    missing = {
        (r.group, r.dst_topic): r.missing
        for r in placement.missing_consumed(classes_df, counted_df).collect()
    }
    return reconciled, missing


def _read_band(
    spark: SparkSession,
    cluster: Cluster,
    windows: Mapping[TopicPartitionKey, list[tuple[int, int]]],
    bounds: Mapping[TopicPartitionKey, tuple[int, int]],
    cfg: FerryConfig,
    side: str,
    progress: Callable[[str], None],
) -> DataFrame:
    merged = {tp: merge_intervals(ws) for tp, ws in windows.items()}
    intervals = window_offsets(cluster, merged, bounds, 0)
    ranges = RangeBook().new_ranges(intervals)
    n = sum(r.end - r.start for r in ranges)
    progress(
        f"reconcile: {side}: reading {n} offsets of the frontier bands on {len(merged)} partitions"
    )
    if not ranges:
        return union_records(spark, [])
    return read_records(spark, cluster, ranges, cfg)  # kept: two transforms use it


def _row(group: str, topic: str, dst_topic: str, q: int) -> dict:
    return plan_row(
        group=group, src_topic=topic, dst_topic=dst_topic, dst_partition=q, anchor_kind="reconcile"
    )


def _iso(ms: int | None) -> str:
    return "?" if ms is None else datetime.fromtimestamp(ms / 1000, tz=timezone.utc).isoformat()
