"""Exact consumer-group migration between two clusters: extract, transform, load.

Extract (driver + data source): discover the selected source groups, their states and
committed offsets; read every source range and destination window the groups need exactly
once, as DataFrames of (topic, partition, segment, offset, timestamp_ms, sha256).
Transform (`ferry.matching`, pure): anchors, candidates, context scores, statuses.
Load (driver): commit each fully resolved group in one request, verify it, and append every
planned partition to the ledger; optionally export kafka-consumer-groups CSV files.

How far to read: a source partition is read from `2 × (context + 1)` offsets before each
committed offset C to `context + 1` after it; when that holds fewer than `context + 1`
records before C (compaction gaps, transaction markers) the missing stretch before it is read
too, four times further back each round, until there are enough records or the log start is
reached. Destination windows come from the anchors' timestamps widened by
`window_before_ms`/`window_after_ms`; their offsets come from `offsets_for_timestamps`, which
treats the broker's answer as a lower bound and verifies it by reading.
"""

from __future__ import annotations

import csv
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

from ferry import kafka_admin, matching
from ferry.config import FerryConfig
from ferry.kafka_admin import Cluster, TopicPartitionKey
from ferry.kafka_source import OffsetRange, read_ranges

RECORD_COLUMNS = ["topic", "partition", "segment", "offset", "timestamp_ms", "sha256"]
MAX_LOOKBACK_ROUNDS = 8

# Partition statuses added outside matching (refusals and missing destinations).
STATUS_REFUSED = "REFUSED"
STATUS_NO_DESTINATION = "NO_DESTINATION"

COMMITTED_SCHEMA = StructType(
    [
        StructField("group", StringType(), False),
        StructField("src_topic", StringType(), False),
        StructField("src_partition", IntegerType(), False),
        StructField("committed_offset", LongType(), False),
        StructField("dst_topic", StringType(), False),
        StructField("dst_partition", IntegerType(), False),
        StructField("src_log_start_offset", LongType(), False),
        StructField("src_log_end_offset", LongType(), False),
    ]
)
DST_BOUNDS_SCHEMA = StructType(
    [
        StructField("dst_topic", StringType(), False),
        StructField("dst_partition", IntegerType(), False),
        StructField("dst_log_start_offset", LongType(), False),
        StructField("dst_log_end_offset", LongType(), False),
        StructField("dst_last_timestamp_ms", LongType(), True),
    ]
)


@dataclass
class Discovery:
    """What the clusters said about the selected groups, before any record is read."""

    groups: list[str]
    source_states: dict[str, str]
    destination_states: dict[str, str]
    committed: dict[str, dict[TopicPartitionKey, int]]
    previous: dict[str, dict[TopicPartitionKey, int]]
    refusals: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    # (group, source tp) -> reason, for partitions that cannot land on the destination
    missing: dict[tuple[str, TopicPartitionKey], str] = field(default_factory=dict)
    source_bounds: dict[TopicPartitionKey, tuple[int, int]] = field(default_factory=dict)
    destination_bounds: dict[TopicPartitionKey, tuple[int, int]] = field(default_factory=dict)


# ---------------------------------------------------------------------------------- extract


def discover(src: Cluster, dst: Cluster, cfg: FerryConfig, allow_active_source: bool) -> Discovery:
    """Select groups, check both sides' states, and fetch offsets and watermarks in bulk."""
    kafka_admin.check_reachable(src)
    kafka_admin.check_reachable(dst)
    groups = [g for g in kafka_admin.list_groups(src) if cfg.groups.matches(g)]
    source_info = kafka_admin.describe_groups(src, groups)
    destination_info = kafka_admin.describe_groups(dst, groups)
    committed_all = kafka_admin.committed_offsets(src, groups)
    src_topics = kafka_admin.list_topics(src)
    dst_topics = kafka_admin.list_topics(dst)
    disc = Discovery(
        groups=groups,
        source_states={g: source_info[g].state for g in groups},
        destination_states={g: destination_info[g].state for g in groups},
        committed={},
        previous={},
    )
    for group in groups:
        disc.committed[group] = {
            tp: off
            for tp, off in committed_all[group].items()
            if not tp[0].startswith("__") and cfg.topics.matches(tp[0]) and tp[0] in src_topics
        }
        if not source_info[group].is_inactive:
            if allow_active_source:
                disc.warnings.append(
                    f"source group {group} is {source_info[group].state}: its offsets may still "
                    "move after this run"
                )
            else:
                disc.refusals[group] = (
                    f"source group is {source_info[group].state}, not Empty; stop its consumers "
                    "or pass --allow-active-source"
                )
        if not destination_info[group].is_inactive:
            disc.refusals[group] = (
                f"destination group is {destination_info[group].state}, not Empty; never moved"
            )
        for topic, partition in disc.committed[group]:
            dst_topic = cfg.topics.destination_topic(topic)
            if dst_topic not in dst_topics:
                disc.missing[(group, (topic, partition))] = f"topic {dst_topic} not on destination"
            elif partition >= dst_topics[dst_topic]:
                disc.missing[(group, (topic, partition))] = (
                    f"{dst_topic} has {dst_topics[dst_topic]} partitions on destination"
                )
    active = [g for g in groups if g not in disc.refusals]
    disc.previous = kafka_admin.committed_offsets(dst, active) if active else {}
    needed = {tp for g in active for tp in disc.committed[g]}
    disc.source_bounds = kafka_admin.watermarks(src, needed)
    dst_needed = {
        (cfg.topics.destination_topic(t), p)
        for g in active
        for (t, p) in disc.committed[g]
        if (g, (t, p)) not in disc.missing
    }
    disc.destination_bounds = kafka_admin.watermarks(dst, dst_needed)
    return disc


def committed_rows(disc: Discovery, cfg: FerryConfig) -> list[dict]:
    """One row per group × source partition that matching should resolve."""
    rows = []
    for group in disc.groups:
        if group in disc.refusals:
            continue
        for (topic, partition), offset in sorted(disc.committed[group].items()):
            if (group, (topic, partition)) in disc.missing:
                continue
            start, end = disc.source_bounds[(topic, partition)]
            rows.append(
                {
                    "group": group,
                    "src_topic": topic,
                    "src_partition": partition,
                    "committed_offset": offset,
                    "dst_topic": cfg.topics.destination_topic(topic),
                    "dst_partition": partition,
                    "src_log_start_offset": start,
                    "src_log_end_offset": end,
                }
            )
    return rows


def merge_intervals(intervals: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """Sorted, non-overlapping, non-adjacent intervals covering the input ([start, end))."""
    merged: list[list[int]] = []
    for start, end in sorted(i for i in intervals if i[1] > i[0]):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(s, e) for s, e in merged]


def subtract_intervals(
    wanted: tuple[int, int], have: Sequence[tuple[int, int]]
) -> list[tuple[int, int]]:
    """Parts of `wanted` not covered by the (merged) intervals in `have`."""
    parts = [wanted]
    for hs, he in have:
        parts = [
            piece
            for s, e in parts
            for piece in ((s, min(e, hs)), (max(s, he), e))
            if piece[1] > piece[0]
        ]
    return parts


def source_needs(
    committed: Iterable[tuple[TopicPartitionKey, int]],
    bounds: Mapping[TopicPartitionKey, tuple[int, int]],
    context: int,
    lookback: int,
) -> dict[TopicPartitionKey, list[tuple[int, int]]]:
    """Per source partition, the offset intervals holding each C's anchor and context."""
    needs: dict[TopicPartitionKey, list[tuple[int, int]]] = defaultdict(list)
    for tp, c in committed:
        log_start, log_end = bounds[tp]
        start = max(log_start, c - lookback)
        end = min(log_end, max(c, log_start) + context + 1)
        needs[tp].append((start, max(start, end)))
    return needs


@dataclass
class RangeBook:
    """Which offset intervals of which partitions have been read; nothing is read twice."""

    read: dict[TopicPartitionKey, list[tuple[int, int]]] = field(default_factory=dict)

    def new_ranges(
        self, needs: Mapping[TopicPartitionKey, list[tuple[int, int]]]
    ) -> list[OffsetRange]:
        out = []
        for tp, intervals in needs.items():
            have = self.read.get(tp, [])
            for s, e in merge_intervals(intervals):
                for ps, pe in subtract_intervals((s, e), have):
                    out.append(OffsetRange(tp[0], tp[1], ps, pe))
        for r in out:
            key = (r.topic, r.partition)
            self.read[key] = merge_intervals(self.read.get(key, []) + [(r.start, r.end)])
        return out

    def segments_df(self, spark: SparkSession) -> DataFrame:
        rows = [(t, p, s, e) for (t, p), ivs in self.read.items() for s, e in ivs]
        schema = "topic string, partition int, seg_start long, seg_end long"
        return spark.createDataFrame(rows, schema)


def read_records(
    spark: SparkSession, cluster: Cluster, ranges: Sequence[OffsetRange], cfg: FerryConfig
) -> DataFrame:
    """Read ranges once and keep them: every later stage reuses these rows."""
    df = read_ranges(
        spark,
        cluster.conf,
        ranges,
        cluster=cluster.name,
        hash_fields=cfg.matching.hash,
        ignore_headers=cfg.matching.ignore_headers,
        columns=["topic", "partition", "offset", "timestamp", "sha256"],
        max_records_per_partition=cfg.reader.max_records_per_task,
        timeout_ms=cfg.reader.timeout_ms,
        isolation_level=cfg.reader.isolation_level,
    ).select(
        "topic",
        "partition",
        "offset",
        F.unix_millis("timestamp").alias("timestamp_ms"),
        "sha256",
    )
    return df.persist(StorageLevel.MEMORY_AND_DISK)


def with_segments(records_df: DataFrame, segments_df: DataFrame) -> DataFrame:
    """Tag each record with the start of the contiguous interval it was read in."""
    r, s = records_df, F.broadcast(segments_df)
    joined = r.join(
        s,
        on=[
            r["topic"] == s["topic"],
            r["partition"] == s["partition"],
            r["offset"] >= s["seg_start"],
            r["offset"] < s["seg_end"],
        ],
    )
    return joined.select(
        r["topic"],
        r["partition"],
        s["seg_start"].alias("segment"),
        r["offset"],
        r["timestamp_ms"],
        r["sha256"],
    )


def extract_source_records(
    spark: SparkSession,
    src: Cluster,
    rows: Sequence[Mapping],
    disc: Discovery,
    cfg: FerryConfig,
    progress: Callable[[str], None],
) -> DataFrame:
    """Read the source around every committed offset, looking further back where needed."""
    k = cfg.matching.context
    book = RangeBook()
    pending = {((r["src_topic"], r["src_partition"]), r["committed_offset"]) for r in rows}
    lookback = 2 * (k + 1)
    parts: list[DataFrame] = []
    for round_no in range(MAX_LOOKBACK_ROUNDS):
        ranges = book.new_ranges(source_needs(pending, disc.source_bounds, k, lookback))
        if ranges:
            n = sum(r.end - r.start for r in ranges)
            progress(f"source: reading {len(ranges)} ranges ({n} offsets), round {round_no + 1}")
            part = read_records(spark, src, ranges, cfg)
            part.count()  # materialize the cache now; the coverage check below reuses it
            parts.append(part)
        all_df = _union(spark, parts)
        short = _short_of_context(spark, all_df, pending, disc.source_bounds, k, lookback)
        if not short:
            break
        pending = short
        lookback *= 4
    return with_segments(_union(spark, parts), book.segments_df(spark))


def _union(spark: SparkSession, parts: Sequence[DataFrame]) -> DataFrame:
    if not parts:
        schema = "topic string, partition int, offset long, timestamp_ms long, sha256 binary"
        return spark.createDataFrame([], schema)
    out = parts[0]
    for p in parts[1:]:
        out = out.unionByName(p)
    return out


def _short_of_context(
    spark: SparkSession,
    records_df: DataFrame,
    pending: set[tuple[TopicPartitionKey, int]],
    bounds: Mapping[TopicPartitionKey, tuple[int, int]],
    k: int,
    lookback: int,
) -> set[tuple[TopicPartitionKey, int]]:
    """Committed offsets with fewer than k+1 records read before them whose read window has
    not yet reached the log start."""
    candidates = [
        (t, p, c)
        for (t, p), c in pending
        if max(bounds[(t, p)][0], c - lookback) > bounds[(t, p)][0]
    ]
    if not candidates:
        return set()
    wanted_df = spark.createDataFrame(candidates, "topic string, partition int, c long")
    counts = (
        wanted_df.join(records_df, ["topic", "partition"], "left")
        .groupBy("topic", "partition", "c")
        .agg(F.count(F.when(F.col("offset") < F.col("c"), 1)).alias("n"))
        .filter(F.col("n") < k + 1)
        .collect()
    )
    return {((r.topic, r.partition), r.c) for r in counts}


def destination_windows(
    anchors: Iterable[Mapping], before_ms: int, after_ms: int
) -> dict[TopicPartitionKey, list[tuple[int, int]]]:
    """Merged timestamp windows per destination partition."""
    per_tp: dict[TopicPartitionKey, list[tuple[int, int]]] = defaultdict(list)
    for a in anchors:
        ts = a["anchor_timestamp_ms"]
        per_tp[(a["dst_topic"], a["dst_partition"])].append((ts - before_ms, ts + after_ms + 1))
    return {tp: merge_intervals(ws) for tp, ws in per_tp.items()}


def window_offsets(
    dst: Cluster,
    windows: Mapping[TopicPartitionKey, list[tuple[int, int]]],
    bounds: Mapping[TopicPartitionKey, tuple[int, int]],
    k: int,
) -> dict[TopicPartitionKey, list[tuple[int, int]]]:
    """Offset intervals to read for each window: from k+1 records before its first record to
    k+1 after its last (for context), found by verified timestamp lookups."""
    out: dict[TopicPartitionKey, list[tuple[int, int]]] = defaultdict(list)
    depth = max((len(w) for w in windows.values()), default=0)
    for i in range(depth):
        layer = {tp: ws[i] for tp, ws in windows.items() if i < len(ws)}
        starts = kafka_admin.offsets_for_timestamps(
            dst, {tp: lo for tp, (lo, _) in layer.items()}, bounds
        )
        ends = kafka_admin.offsets_for_timestamps(
            dst, {tp: hi for tp, (_, hi) in layer.items()}, bounds
        )
        for tp in layer:
            log_start, log_end = bounds[tp]
            first = starts[tp] if starts[tp] is not None else log_end
            after = ends[tp] if ends[tp] is not None else log_end
            out[tp].append((max(log_start, first - 2 * (k + 1)), min(log_end, after + k + 1)))
    return {tp: merge_intervals(ivs) for tp, ivs in out.items()}


def destination_last_timestamps(
    dst: Cluster, bounds: Mapping[TopicPartitionKey, tuple[int, int]]
) -> dict[TopicPartitionKey, int | None]:
    """Timestamp of (about) the newest record of each destination partition; None if empty."""
    probes = {tp: max(s, e - 1) for tp, (s, e) in bounds.items() if e > s}
    seen = kafka_admin.first_records_at(dst, probes)
    missing = {tp: max(bounds[tp][0], bounds[tp][1] - 64) for tp, r in seen.items() if r is None}
    seen.update(kafka_admin.first_records_at(dst, missing))
    return {tp: (seen[tp][1] if seen.get(tp) else None) for tp in bounds}


# ---------------------------------------------------------------------------------- plan


@dataclass
class Plan:
    rows: list[dict]  # one per group × source partition, matching's columns + previous_offset
    group_notes: dict[str, str]  # group -> why it is not migrated (refusals etc.)

    def groups(self) -> list[str]:
        return sorted({r["group"] for r in self.rows} | set(self.group_notes))

    def is_group_resolved(self, group: str) -> bool:
        rows = [r for r in self.rows if r["group"] == group]
        return group not in self.group_notes and all(r["is_resolved"] for r in rows)


def build_plan(
    spark: SparkSession,
    src: Cluster,
    dst: Cluster,
    disc: Discovery,
    cfg: FerryConfig,
    progress: Callable[[str], None],
) -> Plan:
    """Extract what matching needs, run it, and gather one plan row per group partition."""
    k = cfg.matching.context
    rows = committed_rows(disc, cfg)
    plan_rows: list[dict] = []
    if rows:
        committed_df = spark.createDataFrame(rows, COMMITTED_SCHEMA)
        src_records_df = extract_source_records(spark, src, rows, disc, cfg, progress)
        src_context_df = matching.with_context(src_records_df, k)
        anchors_df = matching.select_anchors(committed_df, src_context_df).persist()
        anchors = [
            a.asDict()
            for a in anchors_df.filter(F.col("anchor_kind") != "none")
            .select("dst_topic", "dst_partition", "anchor_timestamp_ms")
            .distinct()
            .collect()
        ]
        windows = destination_windows(
            anchors, cfg.matching.window_before_ms, cfg.matching.window_after_ms
        )
        dst_bounds = {tp: disc.destination_bounds[tp] for tp in disc.destination_bounds}
        intervals = window_offsets(dst, windows, dst_bounds, k)
        dst_ranges = RangeBook().new_ranges(intervals)
        progress(
            f"destination: reading {len(dst_ranges)} windows "
            f"({sum(r.end - r.start for r in dst_ranges)} offsets)"
        )
        dst_book = RangeBook(read={tp: ivs for tp, ivs in intervals.items()})
        dst_records_df = with_segments(
            read_records(spark, dst, dst_ranges, cfg), dst_book.segments_df(spark)
        )
        last_ts = destination_last_timestamps(dst, dst_bounds)
        bounds_df = spark.createDataFrame(
            [(t, p, s, e, last_ts.get((t, p))) for (t, p), (s, e) in dst_bounds.items()],
            DST_BOUNDS_SCHEMA,
        )
        dst_context_df = matching.with_context(dst_records_df, k)
        candidates_df = matching.with_candidates(
            anchors_df, dst_context_df, cfg.matching.window_before_ms, cfg.matching.window_after_ms
        )
        plan_df = matching.with_group_outcome(
            matching.resolve(anchors_df, candidates_df, bounds_df, cfg.matching.window_after_ms)
        )
        progress("matching anchors to destination records")
        plan_rows = [r.asDict() for r in plan_df.collect()]
    for r in plan_rows:
        r["previous_offset"] = disc.previous.get(r["group"], {}).get(
            (r["dst_topic"], r["dst_partition"])
        )
        r["note"] = None
    for (group, (topic, partition)), reason in sorted(disc.missing.items()):
        if group not in disc.refusals:
            plan_rows.append(
                _unmatched_row(group, topic, partition, disc, cfg, STATUS_NO_DESTINATION, reason)
            )
    for group, reason in disc.refusals.items():
        for topic, partition in sorted(disc.committed[group]):
            plan_rows.append(
                _unmatched_row(group, topic, partition, disc, cfg, STATUS_REFUSED, reason)
            )
    notes = dict(disc.refusals)
    for group in disc.groups:
        if not disc.committed[group] and group not in notes:
            notes[group] = "no committed offsets on the selected topics: nothing to migrate"
    plan_rows.sort(key=lambda r: (r["group"], r["src_topic"], r["src_partition"]))
    return Plan(plan_rows, notes)


def _unmatched_row(group, topic, partition, disc, cfg, status, reason) -> dict:  # noqa: ANN001
    return {
        "group": group,
        "src_topic": topic,
        "src_partition": partition,
        "committed_offset": disc.committed[group][(topic, partition)],
        "dst_topic": cfg.topics.destination_topic(topic),
        "dst_partition": partition,
        "anchor_kind": None,
        "anchor_offset": None,
        "anchor_timestamp_ms": None,
        "anchor_sha256": None,
        "candidate_count": None,
        "match_before": None,
        "match_after": None,
        "destination_offset": None,
        "status": status,
        "is_resolved": False,
        "previous_offset": None,
        "note": reason,
    }


# ---------------------------------------------------------------------------------- load


@dataclass
class GroupOutcome:
    group: str
    is_done: bool  # migrated (or, in a dry run, resolved)
    is_committed: bool
    message: str


def apply_plan(
    dst: Cluster, plan: Plan, execute: bool, progress: Callable[[str], None]
) -> dict[str, GroupOutcome]:
    """Commit every fully resolved group (all-or-nothing per group) when executing."""
    outcomes: dict[str, GroupOutcome] = {}
    for group in plan.groups():
        rows = [r for r in plan.rows if r["group"] == group]
        if group in plan.group_notes:
            no_commits = not rows and "nothing to migrate" in plan.group_notes[group]
            outcomes[group] = GroupOutcome(group, no_commits, False, plan.group_notes[group])
            continue
        if not plan.is_group_resolved(group):
            bad = sorted({r["status"] for r in rows if not r["is_resolved"]})
            n = sum(not r["is_resolved"] for r in rows)
            outcomes[group] = GroupOutcome(
                group, False, False, f"{n} of {len(rows)} partitions unresolved ({', '.join(bad)})"
            )
            continue
        offsets = {(r["dst_topic"], r["dst_partition"]): r["destination_offset"] for r in rows}
        if not execute:
            outcomes[group] = GroupOutcome(group, True, False, "resolved (dry run)")
            continue
        try:
            kafka_admin.commit_if_inactive(dst, group, offsets)
            outcomes[group] = GroupOutcome(
                group, True, True, f"committed {len(offsets)} partitions"
            )
            progress(f"committed {group} ({len(offsets)} partitions)")
        except kafka_admin.ClusterError as exc:
            outcomes[group] = GroupOutcome(group, False, False, str(exc))
    return outcomes


def ledger_rows(plan: Plan, outcomes: Mapping[str, GroupOutcome], dst: Cluster) -> list[dict]:
    out = []
    for r in plan.rows:
        outcome = outcomes[r["group"]]
        ts = r["anchor_timestamp_ms"]
        out.append(
            {
                "cluster": dst.conf.get("bootstrap.servers"),
                "group": r["group"],
                "source_group": r["group"],
                "source_topic": r["src_topic"],
                "source_partition": r["src_partition"],
                "source_offset": r["committed_offset"],
                "topic": r["dst_topic"],
                "partition": r["dst_partition"],
                "previous_offset": r["previous_offset"],
                "new_offset": r["destination_offset"],
                "status": r["status"],
                "is_committed": outcome.is_committed,
                "anchor_kind": r["anchor_kind"],
                "anchor_offset": r["anchor_offset"],
                "anchor_timestamp": None if ts is None else _ts(ts),
                "anchor_sha256": r["anchor_sha256"],
                "candidate_count": r["candidate_count"],
                "message": r.get("note") or (None if outcome.is_done else outcome.message),
            }
        )
    return out


def _ts(ms: int):  # noqa: ANN202
    from datetime import datetime, timezone

    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc)


def export_csv(plan: Plan, outcomes: Mapping[str, GroupOutcome], directory: str) -> list[Path]:
    """One `kafka-consumer-groups --reset-offsets --from-file` CSV per resolved group."""
    out_dir = Path(directory)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for group in plan.groups():
        if not plan.is_group_resolved(group):
            continue
        rows = sorted(
            (r["dst_topic"], r["dst_partition"], r["destination_offset"])
            for r in plan.rows
            if r["group"] == group
        )
        if not rows:
            continue
        path = out_dir / f"{_safe_name(group)}.csv"
        with path.open("w", newline="") as fh:
            csv.writer(fh, lineterminator="\n").writerows(rows)
        written.append(path)
    return written


def _safe_name(group: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in group)
