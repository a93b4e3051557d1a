"""Plan: run matching over what was extracted and gather one plan row per group × source
partition, with the destination group's current offsets beside each."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

from ferry.config import FerryConfig
from ferry.kafka.cluster import Cluster
from ferry.migrate import matching, search
from ferry.migrate.discover import Discovery, committed_rows
from ferry.migrate.extract import (
    DST_BOUNDS_SCHEMA,
    destination_last_timestamps,
    destination_windows,
    extract_source_records,
    read_records,
    window_offsets,
    with_segments,
)
from ferry.migrate.ranges import RangeBook
from ferry.migrate.reconcile import plan_reconciled
from ferry.session import local_df
from ferry.status import GroupStatus, PartitionStatus

# Partition statuses added outside matching (refusals and missing destinations).
STATUS_REFUSED = PartitionStatus.REFUSED.value
STATUS_NO_DESTINATION = PartitionStatus.NO_DESTINATION.value

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


@dataclass
class Plan:
    rows: list[dict]  # one per group × source partition, matching's columns + previous_offset
    # group -> (status, why) for groups decided before matching (refused, nothing to migrate)
    group_notes: dict[str, tuple[GroupStatus, str]]

    def groups(self) -> list[str]:
        return sorted(set(self.by_group()) | set(self.group_notes))

    def by_group(self) -> dict[str, list[dict]]:
        out: dict[str, list[dict]] = {}
        for r in self.rows:
            out.setdefault(r["group"], []).append(r)
        return out

    def merged(self, newer: Plan) -> Plan:
        """This plan with every group `newer` planned replaced by newer's rows and notes."""
        replanned = set(newer.groups())
        rows = [r for r in self.rows if r["group"] not in replanned] + newer.rows
        notes = {g: n for g, n in self.group_notes.items() if g not in replanned}
        rows.sort(key=row_order)
        return Plan(rows, {**notes, **newer.group_notes})


def row_order(row: dict) -> tuple:
    """Group, source topic, then source partition (exact rows) or destination partition
    (reconciled rows, which have no source partition)."""
    partition = row["src_partition"]
    return (row["group"], row["src_topic"], partition is None, partition or 0, row["dst_partition"])


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
        committed_df = local_df(
            spark,
            [tuple(r[f.name] for f in COMMITTED_SCHEMA.fields) for r in rows],
            COMMITTED_SCHEMA,
        )
        src_records_df = extract_source_records(spark, src, rows, disc, cfg, progress)
        src_context_df = matching.with_context(src_records_df, k)
        anchors_df = matching.select_anchors(committed_df, src_context_df).persist()
        dst_bounds = dict(disc.destination_bounds)
        if cfg.matching.search == "full":
            dst_records_df, slices_df = _read_windows(
                spark, dst, anchors_df, dst_bounds, cfg, progress
            )
        else:
            found = search.search_destination(
                spark,
                dst,
                anchors_df,
                dst_bounds,
                cfg,
                lambda ranges: read_records(spark, dst, ranges, cfg),
                progress,
            )
            per = found.offsets_read / max(1, found.positions)
            progress(
                f"destination: read {found.offsets_read} offsets for {found.positions} anchor "
                f"positions ({per:.0f} per position) in {found.steps} steps"
            )
            dst_records_df, slices_df = found.records_df, found.slices_df
        last_ts = destination_last_timestamps(dst, dst_bounds)
        bounds_df = local_df(
            spark,
            [(t, p, s, e, last_ts.get((t, p))) for (t, p), (s, e) in dst_bounds.items()],
            DST_BOUNDS_SCHEMA,
        )
        dst_context_df = matching.with_context(dst_records_df, k)
        candidates_df = matching.with_candidates(
            anchors_df, dst_context_df, cfg.matching.window_before_ms, cfg.matching.window_after_ms
        )
        if slices_df is not None:
            candidates_df = search.filter_candidates_in_slices(candidates_df, anchors_df, slices_df)
        plan_df = matching.with_group_outcome(
            matching.resolve(anchors_df, candidates_df, bounds_df, cfg.matching.window_after_ms)
        )
        progress("matching anchors to destination records")
        plan_rows = [{**r.asDict(), "note": None} for r in plan_df.collect()]
    if disc.reconcile_topics:
        plan_rows += plan_reconciled(spark, src, dst, disc, cfg, progress)
    for r in plan_rows:
        r["previous_offset"] = disc.previous.get(r["group"], {}).get(
            (r["dst_topic"], r["dst_partition"])
        )
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
    notes = {g: (GroupStatus.REFUSED, reason) for g, reason in disc.refusals.items()}
    for group in disc.groups:
        if not disc.committed[group] and group not in notes:
            notes[group] = (
                GroupStatus.NOTHING_TO_MIGRATE,
                "no committed offsets on the selected topics: nothing to migrate",
            )
    plan_rows.sort(key=row_order)
    return Plan(plan_rows, notes)


def _read_windows(spark, dst, anchors_df, dst_bounds, cfg, progress):  # noqa: ANN001, ANN202
    """`matching.search: full`: every anchor's whole timestamp window, read at once."""
    k = cfg.matching.context
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
    intervals = window_offsets(dst, windows, dst_bounds, k)
    dst_ranges = RangeBook().new_ranges(intervals)
    progress(
        f"destination: reading {len(dst_ranges)} windows "
        f"({sum(r.end - r.start for r in dst_ranges)} offsets)"
    )
    dst_book = RangeBook(read={tp: ivs for tp, ivs in intervals.items()})
    records_df = with_segments(
        read_records(spark, dst, dst_ranges, cfg), dst_book.segments_df(spark)
    )
    return records_df, None


def _unmatched_row(group, topic, partition, disc, cfg, status, reason) -> dict:  # noqa: ANN001
    return matching.plan_row(
        group=group,
        src_topic=topic,
        src_partition=partition,
        committed_offset=disc.committed[group][(topic, partition)],
        dst_topic=cfg.topics.destination_topic(topic),
        # a reconciled topic's records are not in the same partitions on the destination
        dst_partition=None if disc.is_reconciled(topic) else partition,
        status=status,
        previous_offset=None,
        note=reason,
    )
