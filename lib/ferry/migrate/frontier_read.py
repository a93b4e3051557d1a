"""Reconcile's read loop: every group's frontier read narrow first, not its whole band.

Where the frontiers land on every destination partition is looked up (timestamp lookups
verified by reading); each slice reads that and a few records per source partition either
side, then the source for the same milliseconds, and an open side widens fourfold per step
only while it has not read enough — never past the band. Every slice of every topic is read in
one Spark job per side and step, and every group is placed in one pass per step
(`ferry.migrate.placement`). `matching.search: full` reads each band whole instead. The rules,
and what a narrow read may report differently from a full one, are in docs/matching.md.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

from ferry import kafka
from ferry.config import FerryConfig
from ferry.kafka.cluster import Cluster
from ferry.keys import TopicPartitionKey
from ferry.migrate import copies, placement, replication
from ferry.migrate.discover import Discovery
from ferry.migrate.extract import read_records, union_records
from ferry.migrate.frontier import (
    BAND_EDGE,
    GROWTH,
    MAX_STEPS,
    SMALL_PARTITION,
    Frontier,
    FrontierSlice,
    GroupFrontier,
    Reconciled,
    first_radius,
    join_frontiers,
    merge_gaps,
)
from ferry.migrate.lookups import anchor_positions
from ferry.migrate.ranges import RangeBook
from ferry.runtime import keep, release
from ferry.session import local_df

SLICES_SCHEMA = StructType(
    [
        StructField("frontier", IntegerType(), False),
        StructField("dst_topic", StringType(), False),
        StructField("dst_partition", IntegerType(), False),
        *(
            StructField(name, LongType(), False)
            for name in ("slice_start", "slice_end", "band_lo_ms", "band_hi_ms")
        ),
    ]
)


def reconcile_frontiers(
    spark: SparkSession,
    src: Cluster,
    dst: Cluster,
    groups: Sequence[GroupFrontier],
    disc: Discovery,
    cfg: FerryConfig,
    edges_df: DataFrame,
    progress: Callable[[str], None],
) -> Reconciled:
    """Read every group's frontier (narrow first, or whole bands with `matching.search:
    full`) and place every destination record read, for every group."""
    m = cfg.matching
    full = m.search == "full"
    frontiers = join_frontiers(
        groups, merge_gaps(groups, disc.reconcile_topics), m.max_band_ms, full
    )
    mapping = {f.topic: f.dst_topic for f in frontiers}
    progress(
        f"reconcile: {len(frontiers)} frontiers for {len(groups)} group topics "
        f"({'whole bands' if full else 'narrow first'})"
    )
    _destination_slices(dst, frontiers, disc, full)
    dst_book, src_book = RangeBook(), RangeBook()
    dst_parts: list[DataFrame] = []
    src_parts: list[DataFrame] = []
    read = {"source": 0, "destination": 0}
    placed_rows: list = []
    copied: dict[tuple[str, int], int] = {}
    newest: dict[str, int] = {}
    step = 0
    while step < MAX_STEPS:
        step += 1
        wanted: dict[TopicPartitionKey, list[tuple[int, int]]] = defaultdict(list)
        for f in frontiers:
            for q, s in f.slices.items():
                # Also a slice closed since its last read: `_widen` closes a side whose grown
                # bounds reach a limit before they are read.
                if s.is_open or s.is_unread:
                    s.read_bounds = s.bounds()
                    wanted[(f.dst_topic, q)].append(s.read_bounds)
        open_count = sum(s.is_open for f in frontiers for s in f.slices.values())
        total = sum(len(f.slices) for f in frontiers)
        n = _read(spark, dst, cfg, dst_book, wanted, dst_parts)
        read["destination"] += n
        progress(
            f"reconcile: destination: step {step}, {open_count} of {total} slices open, "
            f"read {n} offsets"
        )
        dst_df = union_records(spark, dst_parts)
        # The destination first, then the source up to its log end as it is now: every
        # record the replicator had copied when the destination was read is on the source.
        n = _read_source(spark, src, cfg, frontiers, dst_df, disc, src_book, src_parts, full)
        read["source"] += n
        progress(f"reconcile: source: step {step}, read {n} offsets")
        src_df = union_records(spark, src_parts)
        copies_df = keep(copies.with_copies(dst_df, src_df, mapping))
        copied, newest = replication.replication_read(
            replication.with_replication(copies_df).collect()
        )
        groups_df = local_df(
            spark,
            _group_rows(frontiers, disc, copied, newest, m.window_after_ms),
            placement.GROUPS_SCHEMA,
        )
        placed_rows = placement.with_placement(
            copies_df, groups_df, m.window_before_ms, m.window_after_ms
        ).collect()
        release(copies_df)
        if full or not _widen(dst, frontiers, placed_rows, disc, step):
            break
    missing = replication.missing_records(
        spark, frontiers, disc, copied, newest, cfg, src_df, edges_df
    )
    placed = {
        (r.group, r.dst_topic, r.dst_partition): {
            "destination_offset": r.destination_offset,
            "duplicates": r.duplicates,
            "unplaced": r.unplaced,
        }
        for r in placed_rows
    }
    by_topic = {
        topic: (_offsets_read(src_book, topic), _offsets_read(dst_book, dst_topic))
        for topic, dst_topic in mapping.items()
    }
    return Reconciled(
        placed, missing, read["source"], read["destination"], len(frontiers), step, by_topic
    )


def _offsets_read(book: RangeBook, topic: str) -> int:
    return sum(e - s for (t, _), ivs in book.read.items() if t == topic for s, e in ivs)


def _look_up(
    cluster: Cluster,
    targets: Iterable[tuple[str, int, int]],
    bounds: Mapping[TopicPartitionKey, tuple[int, int]],
) -> dict[tuple[str, int, int], int]:
    """First offset at or after each (topic, partition, timestamp): verified lookups, the
    distinct timestamps of a partition side by side (`ferry.migrate.search`)."""
    keys = sorted(set(targets))
    return anchor_positions(cluster, keys, bounds) if keys else {}


def _destination_slices(dst: Cluster, frontiers: list[Frontier], disc: Discovery, full: bool):  # noqa: ANN202
    """Each frontier's first slice on every destination partition: its milliseconds and
    FIRST_RADIUS records either side (full: its band, closed); a small partition whole."""
    bounds = disc.destination_bounds
    targets = []
    for f in frontiers:
        lo, hi = (f.band_lo_ms, f.band_hi_ms) if full else (f.lo_ms, f.hi_ms)
        for q in range(disc.reconcile_topics[f.topic][1]):
            start, end = bounds[(f.dst_topic, q)]
            if end - start > SMALL_PARTITION:
                targets += [(f.dst_topic, q, lo), (f.dst_topic, q, hi + 1)]
    at = _look_up(dst, targets, bounds)
    for f in frontiers:
        lo, hi = (f.band_lo_ms, f.band_hi_ms) if full else (f.lo_ms, f.hi_ms)
        for q in range(disc.reconcile_topics[f.topic][1]):
            start, end = bounds[(f.dst_topic, q)]
            if end - start <= SMALL_PARTITION:
                s = FrontierSlice(start, end, start, end, 0, 0)
            elif full:
                lo_pos, hi_pos = at[(f.dst_topic, q, lo)], at[(f.dst_topic, q, hi + 1)]
                s = FrontierSlice(
                    lo_pos, hi_pos, start, end, BAND_EDGE, 1, lo_pos - BAND_EDGE, hi_pos + 1
                )
            else:
                r = first_radius(disc.reconcile_topics[f.topic][0])
                lo_pos, hi_pos = at[(f.dst_topic, q, lo)], at[(f.dst_topic, q, hi + 1)]
                s = FrontierSlice(lo_pos, hi_pos, start, end, r, r)
            s.close_at_limits()
            f.slices[q] = s


def _read(
    spark: SparkSession,
    cluster: Cluster,
    cfg: FerryConfig,
    book: RangeBook,
    wanted: Mapping[TopicPartitionKey, list[tuple[int, int]]],
    parts: list[DataFrame],
) -> int:
    """Read what `wanted` holds that was not read yet, in one Spark job; offsets read."""
    ranges = book.new_ranges(wanted)
    n = sum(r.end - r.start for r in ranges)
    if ranges:
        part = read_records(spark, cluster, ranges, cfg)
        part.count()
        parts.append(part)
    return n


def _read_source(  # noqa: PLR0913
    spark: SparkSession,
    src: Cluster,
    cfg: FerryConfig,
    frontiers: list[Frontier],
    dst_df: DataFrame,
    disc: Discovery,
    book: RangeBook,
    parts: list[DataFrame],
    full: bool,
) -> int:
    """Read the source for every millisecond of each frontier's band its destination slices
    hold (and its own frontier): the records that identify theirs."""
    slices_df = local_df(
        spark,
        [
            (f.index, f.dst_topic, q, *s.read_bounds, f.band_lo_ms, f.band_hi_ms)
            for f in frontiers
            for q, s in f.slices.items()
            if s.read_bounds is not None
        ],
        SLICES_SCHEMA,
    )
    times = {
        r.frontier: (r.earliest_ms, r.latest_ms)
        for r in copies.with_needed_times(dst_df, slices_df).collect()
    }
    needs: dict[int, tuple[int, int]] = {}
    for f in frontiers:
        lo, hi = (f.band_lo_ms, f.band_hi_ms) if full else (f.lo_ms, f.hi_ms)
        earliest, latest = times.get(f.index, (lo, hi))
        need = (min(lo, earliest), max(hi, latest))
        if f.covered is None or need[0] < f.covered[0] or need[1] > f.covered[1]:
            needs[f.index] = (
                need
                if f.covered is None
                else (min(need[0], f.covered[0]), max(need[1], f.covered[1]))
            )
    if not needs:
        return 0
    tps = {(f.topic, p) for f in frontiers for p in range(disc.reconcile_topics[f.topic][0])}
    now = kafka.watermarks(src, tps)
    bounds = {tp: (disc.source_bounds[tp][0], end) for tp, (_, end) in now.items()}
    # Only the ends that moved are looked up; a small partition is read whole.
    ends: dict[tuple[int, int], tuple[int | None, int | None]] = {}
    for f in frontiers:
        if f.index not in needs:
            continue
        lo, hi = needs[f.index]
        is_new_lo = f.covered is None or lo < f.covered[0]
        is_new_hi = f.covered is None or hi > f.covered[1]
        for p in range(disc.reconcile_topics[f.topic][0]):
            start, end = bounds[(f.topic, p)]
            if end - start > SMALL_PARTITION:
                ends[(f.index, p)] = (lo if is_new_lo else None, hi + 1 if is_new_hi else None)
    at = _look_up(
        src,
        [
            (frontiers[i].topic, p, t)
            for (i, p), pair in ends.items()
            for t in pair
            if t is not None
        ],
        bounds,
    )
    wanted: dict[TopicPartitionKey, list[tuple[int, int]]] = defaultdict(list)
    for f in frontiers:
        if f.index not in needs:
            continue
        for p in range(disc.reconcile_topics[f.topic][0]):
            start, end = bounds[(f.topic, p)]
            if (f.index, p) not in ends:
                f.source[p] = (start, end)
            else:
                lo, hi = ends[(f.index, p)]
                old_start, old_end = f.source.get(p, (start, end))
                f.source[p] = (
                    old_start if lo is None else at[(f.topic, p, lo)],
                    old_end if hi is None else at[(f.topic, p, hi)],
                )
            wanted[(f.topic, p)].append(f.source[p])
        f.covered = needs[f.index]
    return _read(spark, src, cfg, book, wanted, parts)


def _group_rows(
    frontiers: list[Frontier],
    disc: Discovery,
    copied: Mapping[tuple[str, int], int],
    newest: Mapping[str, int],
    after_ms: int,
) -> list[tuple]:
    rows = []
    for f in frontiers:
        n_src = disc.reconcile_topics[f.topic][0]
        starts = [disc.source_bounds[(f.topic, p)][0] for p in range(n_src)]
        ends = [disc.source_bounds[(f.topic, p)][1] for p in range(n_src)]
        covered = f.covered or (f.lo_ms, f.hi_ms)
        for g in f.groups:
            replicated = [
                replication.is_replicated(g, p, starts[p], copied, newest, after_ms)
                for p in range(n_src)
            ]
            last_ms = [placement.NO_TIME_BEFORE if t is None else t for t in g.last_consumed_ms]
            first_ms = [placement.NO_TIME_AFTER if t is None else t for t in g.first_unconsumed_ms]
            for q, s in sorted(f.slices.items()):
                start, end = s.read_bounds or s.bounds()
                rows.append(
                    (
                        g.group,
                        f.dst_topic,
                        q,
                        start,
                        end,
                        s.log_start,
                        s.log_end,
                        g.lo_ms,
                        g.hi_ms,
                        g.band_lo_ms,
                        g.band_hi_ms,
                        *covered,
                        list(g.committed),
                        starts,
                        ends,
                        last_ms,
                        first_ms,
                        replicated,
                    )
                )
    return rows


def _widen(
    dst: Cluster, frontiers: list[Frontier], placed_rows: Sequence, disc: Discovery, step: int
) -> bool:
    """Grow the open sides of every slice that has not read enough; False when none is open.
    A side still open after the first step learns where the band ends (its cap)."""
    is_left_closed: dict[tuple[str, int, str], bool] = {}
    is_right_closed: dict[tuple[str, int, str], bool] = {}
    for r in placed_rows:
        key = (r.dst_topic, r.dst_partition, r.group)
        is_left_closed[key], is_right_closed[key] = r.is_left_closed, r.is_right_closed
    caps = []
    for f in frontiers:
        for q, s in f.slices.items():
            keys = [(f.dst_topic, q, g.group) for g in f.groups]
            s.is_left_closed |= all(is_left_closed.get(k, True) for k in keys)
            s.is_right_closed |= all(is_right_closed.get(k, True) for k in keys)
            if s.is_open and step == 1:
                if not s.is_left_closed:
                    caps.append((f.dst_topic, q, f.band_lo_ms))
                if not s.is_right_closed:
                    caps.append((f.dst_topic, q, f.band_hi_ms + 1))
    if not any(s.is_open for f in frontiers for s in f.slices.values()):
        return False
    at = _look_up(dst, caps, disc.destination_bounds)
    for f in frontiers:
        for q, s in f.slices.items():
            if (f.dst_topic, q, f.band_lo_ms) in at:
                s.cap_start = max(s.log_start, at[(f.dst_topic, q, f.band_lo_ms)] - BAND_EDGE)
            if (f.dst_topic, q, f.band_hi_ms + 1) in at:
                s.cap_end = min(s.log_end, at[(f.dst_topic, q, f.band_hi_ms + 1)] + 1)
            if not s.is_left_closed:
                s.before *= GROWTH
            if not s.is_right_closed:
                s.after *= GROWTH
            s.close_at_limits()
    return True
