"""Plan the topics whose records sit in other partitions on the destination (another partition
count, or `matching.partitioning: reconcile`): one plan row per group × destination partition
with its reconciled offset, duplicates and unplaced records (`ferry.migrate.placement`).

Reads, every group of a topic sharing them:
1. the source records just before and at every committed offset: each group's frontier, from
   its earliest first-unconsumed record (lo) to its latest last-consumed one (hi);
2. around each frontier, on every destination partition and then on every source partition,
   as much as it takes to place the frontier's records (`ferry.migrate.frontier_read`: narrow
   first, or the whole band [min(lo, hi) − window_before_ms, max(lo, hi) + window_after_ms]
   with `matching.search: full`).
A group whose consumed and unconsumed records interleave over more than `matching.max_band_ms`
(hi − lo: a group that stopped hours apart on different partitions) is not planned: its rows
say how wide the band is and where; raising the bound reads that much more of every partition.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from datetime import datetime, timezone

from pyspark.sql import SparkSession
from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

from ferry.config import FerryConfig
from ferry.kafka.cluster import Cluster
from ferry.keys import TopicPartitionKey
from ferry.migrate.discover import Discovery
from ferry.migrate.extract import read_records, union_records
from ferry.migrate.frontier import GroupFrontier, with_frontier, with_partition_frontier
from ferry.migrate.frontier_read import reconcile_frontiers
from ferry.migrate.matching import plan_row
from ferry.migrate.ranges import RangeBook
from ferry.session import local_df
from ferry.status import PartitionStatus

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
    groups, more_problems, edges_df, n_edges = _frontiers(
        spark, src, disc, cfg, positions, positions_df, progress
    )
    problems.update(more_problems)
    placed, missing = {}, {}
    if groups:
        found = reconcile_frontiers(spark, src, dst, groups, disc, cfg, edges_df, progress)
        placed, missing = found.placed, found.missing
        n_src = found.source_offsets + sum(n_edges.values())
        per_group = (n_src + found.destination_offsets) / len(groups)
        progress(
            f"reconcile: read {n_src} source offsets and {found.destination_offsets} destination "
            f"offsets for {len(groups)} group topics ({per_group:.0f} per group topic) in "
            f"{found.steps} steps, {found.frontiers} frontiers"
        )
        for topic, (n_topic_src, n_topic_dst) in sorted(found.by_topic.items()):
            n_groups = sum(g.topic == topic for g in groups)
            progress(
                f"reconcile: topic {topic}: read {n_topic_src + n_edges.get(topic, 0)} source "
                f"and {n_topic_dst} destination offsets for {n_groups} groups"
            )
    planned = {(g.group, g.topic) for g in groups}
    rows = []
    topics = {(g, t) for g, t, *_ in positions} | set(problems)
    for group, topic in sorted(topics):
        dst_topic = cfg.topics.destination_topic(topic)
        for q in range(disc.reconcile_topics[topic][1]):
            row = _row(group, topic, dst_topic, q)
            if (group, topic) in problems:
                row["status"], row["note"] = problems[(group, topic)]
            elif (group, topic) not in planned:  # nothing on the source to reconcile against
                row.update(destination_offset=disc.destination_bounds[(dst_topic, q)][1])
                row.update(status=PartitionStatus.RECONCILED, is_resolved=True)
                row.update(duplicates=0, unplaced=0)
            else:
                row.update(placed[(group, dst_topic, q)])
                short = missing.get((group, topic), 0)
                row["status"] = PartitionStatus.PENDING if short else PartitionStatus.RECONCILED
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
                    PartitionStatus.NO_POSITION,
                    f"no committed offset on {topic}{unknown}, which hold records: reconcile "
                    "needs the group's position on every source partition",
                )
            else:
                positions.extend(rows)
    return positions, problems


def _frontiers(spark, src, disc, cfg, positions, positions_df, progress):  # noqa: ANN001, ANN202
    """Each group's frontier per topic, from the records around its committed offsets."""
    needs: dict[TopicPartitionKey, list[tuple[int, int]]] = defaultdict(list)
    for _, topic, p, c, end in positions:
        start = disc.source_bounds[(topic, p)][0]
        needs[(topic, p)].append((max(start, c - EDGE), min(end, c + EDGE)))
    ranges = RangeBook().new_ranges(needs)
    n: dict[str, int] = defaultdict(int)
    for r in ranges:
        n[r.topic] += r.end - r.start
    progress(
        f"reconcile: source: reading {sum(n.values())} offsets around {len(positions)} "
        "committed offsets"
    )
    edges_df = read_records(spark, src, ranges, cfg) if ranges else union_records(spark, [])
    frontier = with_frontier(positions_df, edges_df).collect()
    per_partition: dict[tuple[str, str], dict[int, object]] = defaultdict(dict)
    for r in with_partition_frontier(positions_df, edges_df).collect():
        per_partition[(r.group, r.topic)][r.partition] = r
    groups: list[GroupFrontier] = []
    problems: dict[tuple[str, str], tuple[str, str]] = {}
    m = cfg.matching
    for f in frontier:
        key = (f.group, f.topic)
        if f.unknown_partition is not None:
            problems[key] = (
                PartitionStatus.NO_POSITION,
                f"no record found around the committed offset on {f.topic}[{f.unknown_partition}]",
            )
            continue
        known = [t for t in (f.lo_timestamp_ms, f.hi_timestamp_ms) if t is not None]
        if not known:
            continue  # the source topic holds no record: nothing consumed, nothing to find
        overlap = (f.hi_timestamp_ms or 0) - (f.lo_timestamp_ms or 0) if len(known) == 2 else 0
        if overlap > m.max_band_ms:
            problems[key] = (
                PartitionStatus.BAND_TOO_WIDE,
                f"frontier band is {overlap / 60_000:.0f} min wide: first unconsumed record on "
                f"{f.topic}[{f.lo_partition}] from {_iso(f.lo_timestamp_ms)}, last consumed on "
                f"{f.topic}[{f.hi_partition}] from {_iso(f.hi_timestamp_ms)}; raise "
                f"matching.max_band_ms ({m.max_band_ms}) to read that much of every partition",
            )
            continue
        rows = [per_partition[key][p] for p in range(disc.reconcile_topics[f.topic][0])]
        groups.append(
            GroupFrontier(
                group=f.group,
                topic=f.topic,
                dst_topic=cfg.topics.destination_topic(f.topic),
                lo_ms=min(known),
                hi_ms=max(known),
                band_lo_ms=min(known) - m.window_before_ms,
                band_hi_ms=max(known) + m.window_after_ms,
                committed=[r.committed_offset for r in rows],
                last_consumed_ms=[r.last_ts for r in rows],
                last_consumed_offset=[r.last_offset for r in rows],
                # a gap at the committed offset: the last consumed record stands in (earlier)
                first_unconsumed_ms=[
                    r.next_ts
                    if r.next_ts is not None
                    else (r.last_ts if r.committed_offset < r.log_end_offset else None)
                    for r in rows
                ],
            )
        )
    return groups, problems, edges_df, n


def _row(group: str, topic: str, dst_topic: str, q: int) -> dict:
    return plan_row(
        group=group, src_topic=topic, dst_topic=dst_topic, dst_partition=q, anchor_kind="reconcile"
    )


def _iso(ms: int | None) -> str:
    return "?" if ms is None else datetime.fromtimestamp(ms / 1000, tz=timezone.utc).isoformat()
