"""Reconcile's reads: each group's frontier read narrow first, not its whole band.

A group's frontier on a topic is where its consumed and unconsumed records meet: from
lo = min(first unconsumed, last consumed) to hi = max(...) over the source partitions (one
millisecond or so for a group that stopped at one instant). Its band is that plus the
matching windows, [lo − window_before_ms, hi + window_after_ms]; `matching.search: full` reads
the band whole on every partition of both sides. The narrow read (the default) finds where lo
and hi land on every destination partition (timestamp lookups verified by reading), reads
that and 4 records per source partition either side (16 to 64), then the source for the same
milliseconds, and widens a side of a partition's slice fourfold per step only while it has not
read enough — never past the band. Groups whose frontiers lie within ~256 records of each
other share one slice; every slice of every topic is read in one Spark job per side and step,
and every group is placed in one pass (`ferry.migrate.placement`).

**Enough has been read** on destination partition q for a group when, on each side, for every
source partition p one of these holds:

- left (no record before the slice is one the group has not consumed):
  (a) the slice starts at q's log start; (b) the group consumed all of p; (c) the slice holds
  a copy of a record of p the group consumed whose timestamp is older than its frontier (a
  replicator keeps each source partition's order, so every copy of p before it is of an
  older, consumed record); (d) the slice holds a record more than window_before_ms older than
  p's first unconsumed record (no copy of p that new can sit before it);
- right (no record after the slice is one the group consumed):
  (a) the slice ends at q's log end; (b) the group consumed nothing of p; (c) the slice holds
  a copy of a record of p the group has not consumed, whatever its timestamp (every copy of p
  after it is of a later, unconsumed record); (d) the slice holds a record more than
  window_after_ms newer than p's last consumed record;
- and the source has been read for every millisecond of the band the slice holds, so each of
  its records is identified (copy, identical records, or not copied from the source).

(c) counts only while the slice's copies of p are in p's order (copies out of order prove
nothing on either side). The left side guards against loss — D_q is the slice's first record
the group has not consumed, right only if none lies before the slice — and its (c) keeps the
timestamp. The right side moves no D_q — it only says every consumed record after D_q has
been counted as a duplicate — and its (c) needs no timestamp. The first unconsumed copies
often carry hi itself (a group that stopped inside a millisecond, or at its start); asking
for a copy of p newer than hi made the read go on to p's next millisecond — far, on a
partition where the replicator writes runs of one source partition — and guarded nothing:
records that are not copies are not counted after the slice by any rule (a record not copied
from the source, a re-sent copy: below), a record identical over several source partitions
is the copy of one of them and that partition's rule covers it, a source partition with an
unconsumed copy read is replicated (no PENDING), and the source is read for every
millisecond the slice holds whichever rule closes it.

A side that reaches the band's edge is closed whatever else holds: records outside the band
are placed by their timestamp, as a full read does. For a replicator that keeps up, (c) holds
within a few records of the frontier, so the read does not grow with the topic; with traffic
it grows by the records of the milliseconds the slices hold, which the source is read for
whole (README, "Benchmarks": 2.46x the offsets at 4x the rate). A source partition that
lags on the destination makes its side widen to where its copies are (the duplicates are
there); one with no copies near the frontier on q widens that side to (d) or the band's edge.

PENDING: a group is pending while a source partition's consumed records are not all copied:
no copy of its last consumed record (or a later one) was read, its last consumed record lies
inside the band, and no destination record read is more than window_after_ms newer than it.
Before deciding so, every slice reads back until it holds a copy of that partition (or to the
band's edge).

What a narrow read can report differently from a full one, by design: a destination record
not copied from the source (written there directly) is unplaced only when it lies in a slice,
and a replicator's re-sent copies of consumed records (at-least-once, after a restart) are
counted as duplicates only when they lie in a slice. Neither can lose a record.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

from ferry import kafka
from ferry.config import FerryConfig
from ferry.kafka.admin import TopicPartitionKey
from ferry.kafka.cluster import Cluster
from ferry.migrate import placement
from ferry.migrate.discover import Discovery
from ferry.migrate.extract import read_records, union_records
from ferry.migrate.ranges import RangeBook
from ferry.migrate.search import anchor_positions
from ferry.session import local_df

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
PENDING_SCHEMA = StructType(
    [
        StructField("group", StringType(), False),
        StructField("topic", StringType(), False),
        StructField("partition", IntegerType(), False),
        *(
            StructField(name, LongType(), False)
            for name in ("after_offset", "committed_offset", "band_lo_ms")
        ),
    ]
)


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
class Slice:
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
    slices: dict[int, Slice] = field(default_factory=dict)
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
    replication: dict[tuple[str, int], int] = {}
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
        copies_df = placement.with_copies(dst_df, src_df, mapping).persist()
        replication, newest = _replication(placement.with_replication(copies_df).collect())
        groups_df = local_df(
            spark,
            _group_rows(frontiers, disc, replication, newest, m.window_after_ms),
            placement.GROUPS_SCHEMA,
        )
        placed_rows = placement.with_placement(
            copies_df, groups_df, m.window_before_ms, m.window_after_ms
        ).collect()
        copies_df.unpersist()
        if full or not _widen(dst, frontiers, placed_rows, disc, step):
            break
    missing = _missing(spark, frontiers, disc, replication, newest, cfg, src_df, edges_df)
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


def first_radius(source_partitions: int) -> int:
    return min(FIRST_RADIUS, max(16, RADIUS_PER_SOURCE * source_partitions))


def _look_up(
    cluster: Cluster,
    targets: Iterable[tuple[str, int, int]],
    bounds: Mapping[TopicPartitionKey, tuple[int, int]],
) -> dict[tuple[str, int, int], int]:
    """First offset at or after each (topic, partition, timestamp): verified lookups, the
    distinct timestamps of a partition side by side (`ferry.migrate.search`)."""
    positions = [
        {"dst_topic": t, "dst_partition": p, "anchor_timestamp_ms": ts}
        for t, p, ts in sorted(set(targets))
    ]
    return anchor_positions(cluster, positions, bounds) if positions else {}


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
                s = Slice(start, end, start, end, 0, 0)
            elif full:
                lo_pos, hi_pos = at[(f.dst_topic, q, lo)], at[(f.dst_topic, q, hi + 1)]
                s = Slice(lo_pos, hi_pos, start, end, BAND_EDGE, 1, lo_pos - BAND_EDGE, hi_pos + 1)
            else:
                r = first_radius(disc.reconcile_topics[f.topic][0])
                s = Slice(at[(f.dst_topic, q, lo)], at[(f.dst_topic, q, hi + 1)], start, end, r, r)
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
        for r in placement.with_needed_times(dst_df, slices_df).collect()
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


def _replication(rows: Iterable) -> tuple[dict[tuple[str, int], int], dict[str, int]]:  # noqa: ANN001
    """(destination topic, source partition) → newest source offset a copy was read of;
    destination topic → newest timestamp read."""
    copied: dict[tuple[str, int], int] = {}
    newest: dict[str, int] = {}
    for r in rows:
        if r.src_partition is not None and r.max_copied_offset is not None:
            copied[(r.dst_topic, r.src_partition)] = r.max_copied_offset
        if r.newest_ms is not None:
            newest[r.dst_topic] = max(newest.get(r.dst_topic, r.newest_ms), r.newest_ms)
    return copied, newest


def is_replicated(
    g: GroupFrontier,
    p: int,
    log_start: int,
    copied: Mapping[tuple[str, int], int],
    newest: Mapping[str, int],
    after_ms: int,
) -> bool:
    """Whether every record the group consumed on p is known to be on the destination (see
    PENDING in the module docstring)."""
    last_ms, last_offset = g.last_consumed_ms[p], g.last_consumed_offset[p]
    if g.committed[p] <= log_start or last_ms is None or last_offset is None:
        return True
    if last_ms < g.band_lo_ms:
        return True  # older than the band: taken as replicated
    if copied.get((g.dst_topic, p), -1) >= last_offset:
        return True  # a copy of it or of a later record of p: p's order puts it before
    return newest.get(g.dst_topic, last_ms) > last_ms + after_ms


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
                is_replicated(g, p, starts[p], copied, newest, after_ms) for p in range(n_src)
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


def _missing(  # noqa: PLR0913
    spark: SparkSession,
    frontiers: list[Frontier],
    disc: Discovery,
    copied: Mapping[tuple[str, int], int],
    newest: Mapping[str, int],
    cfg: FerryConfig,
    src_df: DataFrame,
    edges_df: DataFrame,
) -> dict[tuple[str, str], int]:
    """Consumed records of each group's band the replicator has not copied yet."""
    rows = []
    for f in frontiers:
        for g in f.groups:
            for p, c in enumerate(g.committed):
                start = disc.source_bounds[(f.topic, p)][0]
                if not is_replicated(g, p, start, copied, newest, cfg.matching.window_after_ms):
                    after = copied.get((g.dst_topic, p), -1)
                    rows.append((g.group, f.topic, p, after, c, g.band_lo_ms))
    if not rows:
        return {}
    pending_df = local_df(spark, rows, PENDING_SCHEMA)
    records_df = src_df.unionByName(edges_df)
    found = placement.with_missing(records_df, pending_df).collect()
    out = {(r.group, r.topic): r.missing for r in found}
    for group, topic, *_ in rows:  # its last consumed record is known to exist
        out[(group, topic)] = max(1, out.get((group, topic), 0))
    return out
