"""Reconcile's frontiers: where each group's consumed and unconsumed records meet on a topic.

A group's frontier runs from lo = its earliest first-unconsumed record to hi = its latest
last-consumed one, over the source partitions; its band is that widened by the matching
windows. `with_frontier` finds it from the records around the committed offsets; groups whose
frontiers lie close together share one (`join_frontiers`), and with it one slice of every
destination partition (`FrontierSlice`), which `ferry.migrate.frontier_read` reads narrow first and
widens until enough has been read. What "enough" means, and why, is in docs/matching.md
("What is read: the frontier, not the band" and "Enough has been read").
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

FIRST_RADIUS = 64  # at most, records read either side of the frontier at the first step
# ... at least this many per source partition: a side has read enough once it holds a copy
# of every source partition, and a replicator interleaves them
RADIUS_PER_SOURCE = 4
GROWTH = 4  # an open side of a slice grows this many times per step
MAX_STEPS = 16
MERGE_RECORDS = 256  # frontiers closer than this share a slice: reading them costs less than
# looking them up
BAND_EDGE = 2  # records read before the band's start when a side reaches it (as full reads)
# A partition no larger than a first slice is read whole without a lookup. (Larger ones are
# not: the source is read for every millisecond a destination slice holds.)
SMALL_PARTITION = 2 * FIRST_RADIUS


@dataclass
class GroupFrontier:
    """One group's frontier on one topic; per-source-partition lists are indexed by p."""

    group: str
    topic: str
    dst_topic: str
    lo_ms: int
    hi_ms: int
    band_lo_ms: int
    band_hi_ms: int
    committed: list[int]
    last_consumed_ms: list[int | None]
    last_consumed_offset: list[int | None]
    first_unconsumed_ms: list[int | None]


@dataclass
class FrontierSlice:
    """What is read of one destination partition for a frontier; each side grows until it
    has read enough, or reaches the log's end or the band's edge (its cap)."""

    lo_pos: int  # first offset at or after the frontier's first millisecond
    hi_pos: int  # first offset after its last millisecond
    log_start: int
    log_end: int
    before: int = FIRST_RADIUS
    after: int = FIRST_RADIUS
    cap_start: int | None = None
    cap_end: int | None = None
    is_left_closed: bool = False
    is_right_closed: bool = False
    read_bounds: tuple[int, int] | None = None

    def bounds(self) -> tuple[int, int]:
        start = max(self.log_start, self.lo_pos - self.before, self.cap_start or 0)
        end = min(self.log_end, self.hi_pos + self.after)
        if self.cap_end is not None:
            end = min(end, self.cap_end)
        return start, max(start, end)

    def close_at_limits(self) -> None:
        start, end = self.bounds()
        self.is_left_closed |= start <= self.log_start or (
            self.cap_start is not None and start <= self.cap_start
        )
        self.is_right_closed |= end >= self.log_end or (
            self.cap_end is not None and end >= self.cap_end
        )

    @property
    def is_open(self) -> bool:
        return not (self.is_left_closed and self.is_right_closed)

    @property
    def is_unread(self) -> bool:
        """Whether its bounds hold offsets not read yet: a side closed at the log's end or the
        band's edge by growing (`close_at_limits`) is done only once those bounds are read."""
        return self.read_bounds != self.bounds()


@dataclass
class Frontier:
    """Groups of one topic whose frontiers lie close together: one slice per partition."""

    index: int
    topic: str
    dst_topic: str
    lo_ms: int
    hi_ms: int
    band_lo_ms: int
    band_hi_ms: int
    groups: list[GroupFrontier]
    slices: dict[int, FrontierSlice] = field(default_factory=dict)
    source: dict[int, tuple[int, int]] = field(default_factory=dict)  # p -> offsets read
    covered: tuple[int, int] | None = None  # milliseconds read on every source partition


@dataclass
class Reconciled:
    placed: dict[tuple[str, str, int], dict]  # (group, dst_topic, q) -> offset, counts
    missing: dict[tuple[str, str], int]  # (group, source topic) -> consumed, not copied
    source_offsets: int
    destination_offsets: int
    frontiers: int
    steps: int
    by_topic: dict[str, tuple[int, int]]  # source topic -> (source, destination) offsets read


def first_radius(source_partitions: int) -> int:
    """Records read either side of a frontier at the first step: RADIUS_PER_SOURCE per
    source partition, at least 16 and at most FIRST_RADIUS."""
    return min(FIRST_RADIUS, max(16, RADIUS_PER_SOURCE * source_partitions))


def with_partition_frontier(positions_df: DataFrame, edges_df: DataFrame) -> DataFrame:
    """Per group × source partition: committed offset, log end, and the last consumed and
    first unconsumed records read around the committed offset (timestamps; null when there is
    none, or it was not read).

    positions_df: group, topic, partition, committed_offset, log_end_offset.
    edges_df: topic, partition, offset, timestamp_ms — at least the records just before and
    at each committed offset."""
    p, e = positions_df.alias("p"), edges_df.alias("e")
    joined = p.join(
        e,
        (F.col("p.topic") == F.col("e.topic")) & (F.col("p.partition") == F.col("e.partition")),
        "left",
    )
    is_before = F.col("e.offset") < F.col("p.committed_offset")
    return joined.groupBy(
        "p.group", "p.topic", "p.partition", "p.committed_offset", "p.log_end_offset"
    ).agg(
        F.max_by(F.col("e.timestamp_ms"), F.when(is_before, F.col("e.offset"))).alias("last_ts"),
        F.max(F.when(is_before, F.col("e.offset"))).alias("last_offset"),
        F.min_by(F.col("e.timestamp_ms"), F.when(~is_before, F.col("e.offset"))).alias("next_ts"),
    )


def with_frontier(positions_df: DataFrame, edges_df: DataFrame) -> DataFrame:
    """Per group × source topic: the earliest first-unconsumed timestamp (`lo_*`) and the
    latest last-consumed one (`hi_*`), with the partitions they are on.

    A partition with unconsumed records whose first one was not read (a gap) stands in with
    its last consumed record's timestamp, an earlier bound; with neither it is named in
    `unknown_partition`."""
    per_partition = with_partition_frontier(positions_df, edges_df)
    has_unconsumed = F.col("committed_offset") < F.col("log_end_offset")
    first_unconsumed_ts = F.when(has_unconsumed, F.coalesce("next_ts", "last_ts"))
    unknown = has_unconsumed & F.col("next_ts").isNull() & F.col("last_ts").isNull()
    return (
        per_partition.groupBy("group", "topic")
        .agg(
            F.min_by(
                F.struct(first_unconsumed_ts.alias("ts"), F.col("partition")), first_unconsumed_ts
            ).alias("lo"),
            F.max_by(F.struct(F.col("last_ts").alias("ts"), F.col("partition")), "last_ts").alias(
                "hi"
            ),
            F.min(F.when(unknown, F.col("partition"))).alias("unknown_partition"),
        )
        .select(
            "group",
            "topic",
            F.col("lo.ts").alias("lo_timestamp_ms"),
            F.col("lo.partition").alias("lo_partition"),
            F.col("hi.ts").alias("hi_timestamp_ms"),
            F.col("hi.partition").alias("hi_partition"),
            "unknown_partition",
        )
    )


def join_frontiers(
    groups: Sequence[GroupFrontier],
    gap_ms: Mapping[str, float],
    max_band_ms: int,
    full: bool,
) -> list[Frontier]:
    """Groups of each topic whose frontiers lie within `gap_ms[topic]` of each other share a
    frontier (full reads: whose bands overlap), never wider than `max_band_ms`."""
    out: list[Frontier] = []
    by_topic: dict[str, list[GroupFrontier]] = defaultdict(list)
    for g in groups:
        by_topic[g.topic].append(g)
    for topic, members in sorted(by_topic.items()):
        current: Frontier | None = None
        for g in sorted(members, key=lambda g: (g.band_lo_ms if full else g.lo_ms, g.group)):
            if current is not None and _shares(current, g, gap_ms.get(topic, 0), max_band_ms, full):
                current.groups.append(g)
                current.hi_ms = max(current.hi_ms, g.hi_ms)
                current.band_lo_ms = min(current.band_lo_ms, g.band_lo_ms)
                current.band_hi_ms = max(current.band_hi_ms, g.band_hi_ms)
                continue
            current = Frontier(
                len(out), topic, g.dst_topic, g.lo_ms, g.hi_ms, g.band_lo_ms, g.band_hi_ms, [g]
            )
            out.append(current)
    return out


def _shares(f: Frontier, g: GroupFrontier, gap_ms: float, max_band_ms: int, full: bool) -> bool:
    is_near = g.band_lo_ms <= f.band_hi_ms if full else g.lo_ms <= f.hi_ms + gap_ms
    return is_near and max(g.hi_ms, f.hi_ms) - f.lo_ms <= max_band_ms


def merge_gaps(groups: Iterable[GroupFrontier], partitions: Mapping[str, tuple[int, int]]) -> dict:
    """Per topic, how many milliseconds hold MERGE_RECORDS records on its busiest partition,
    from the committed offsets' timestamps (a topic with one known point: 0, only frontiers
    that overlap share a slice)."""
    points: dict[tuple[str, int], list[tuple[int, int]]] = defaultdict(list)
    for g in groups:
        for p, c in enumerate(g.committed):
            if g.last_consumed_ms[p] is not None and g.last_consumed_offset[p] is not None:
                points[(g.topic, p)].append((g.last_consumed_ms[p], g.last_consumed_offset[p]))
            if g.first_unconsumed_ms[p] is not None:
                points[(g.topic, p)].append((g.first_unconsumed_ms[p], c))
    rates: dict[str, list[float]] = defaultdict(list)
    for (topic, _), pts in points.items():
        (t0, o0), (t1, o1) = min(pts), max(pts)
        if t1 > t0 and o1 > o0:
            rates[topic].append((o1 - o0) / (t1 - t0))
    out = {}
    for topic, rs in rates.items():
        n_dst = partitions[topic][1]
        busiest = max(max(rs), sum(rs) / max(1, n_dst))
        out[topic] = MERGE_RECORDS / busiest
    return out
