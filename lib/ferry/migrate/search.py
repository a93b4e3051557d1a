"""Search: find each anchor's copy on the destination by reading outward from where its
timestamp lands, not the whole matching window.

The window (`window_before_ms`/`window_after_ms`) is a bound, not the amount to read. Each
distinct anchor position (destination partition × anchor timestamp) gets a slice: from
k + 1 records before P, the first offset whose timestamp is at or after the anchor's (the
broker's lookup verified by reading), to k + 1 + r records after it. All slices are read
in one read per step (`ferry.kafka.read`: on the driver when small, else one Spark job); a
slice that is not yet decided grows its open sides fourfold and is read again (only the new
offsets), until it is decided or covers the window on both sides.

A slice is **decided** early when, for every anchor at that position, the best candidate
in the slice

- carries the anchor's own timestamp (the replicator kept CreateTime), and
- matches the anchor's whole context: all k records before and after (as many as the source
  has), and
- the slice covers the anchor's millisecond, plus k + 1 records after it, so every record
  with that timestamp has been seen (two such full matches are AMBIGUOUS, as in a full read).

Otherwise the slice widens until each side has k + 1 records outside the window (or reaches
the log's end), and the outcome is exactly a full-window read's. The one difference from a
full read, chosen on purpose: an identical run of 2k + 1 records elsewhere in the window,
at another timestamp, does not make an early-decided anchor AMBIGUOUS — with timestamps
kept, a record at another millisecond is not the copy. `matching.search: full` reads whole
windows (and reports such runs AMBIGUOUS). A replicator that rewrites timestamps never
decides early: its copies are found by widening in the direction the timestamps moved, and
proven unique by reading the window, so narrow windows pay off there.

Candidates are taken only from an anchor's own slice, so a plan does not depend on which
other groups happened to be in the same run.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

from ferry import kafka
from ferry.config import FerryConfig
from ferry.kafka.cluster import Cluster
from ferry.keys import TopicPartitionKey
from ferry.migrate import matching
from ferry.migrate.extract import collect_rows, union_records, window_extents, with_segments
from ferry.migrate.ranges import RangeBook
from ferry.session import local_df

FIRST_RADIUS = 64  # offsets read after P at the first step: a busy millisecond and then some
GROWTH = 4  # an open side of an undecided slice grows this many times per step
MAX_STEPS = 24
SMALL_PARTITION = 1024  # offsets: a destination partition this small is read whole at once
# Open slices whose windows hold at most this many offsets still unread are read to their
# windows' edges at once (a second or so of one consumer), not fourfold per Spark step.
LEFTOVER_OFFSETS = 100_000
# Their windows are looked up when no partition has more than this many of them: a lookup
# takes a ListOffsets layer and a probe read per timestamp of a partition (two per slice).
WINDOW_LOOKUPS_PER_PARTITION = 16

SLICE_KEYS = ["dst_topic", "dst_partition", "anchor_timestamp_ms"]
SLICES_SCHEMA = StructType(
    [
        StructField("dst_topic", StringType(), False),
        StructField("dst_partition", IntegerType(), False),
        *(
            StructField(name, LongType(), False)
            for name in (
                "anchor_timestamp_ms",
                "position",
                "slice_start",
                "slice_end",
                "log_start",
                "log_end",
            )
        ),
    ]
)


@dataclass
class AnchorSlice:
    """What is read around one anchor position; sides grow until decided or closed."""

    position: int  # first offset with timestamp >= the anchor's (log end if none)
    log_start: int
    log_end: int
    before: int  # offsets read before position - (k + 1)
    after: int  # offsets read after position + (k + 1)
    is_left_closed: bool = False
    is_right_closed: bool = False
    is_decided: bool = False
    read_bounds: tuple[int, int] | None = None  # what has been read for it so far
    # The offsets a full read of the anchor's window reads (`extract.window_offsets`), once
    # looked up: a slice never reads past them, and a side that reaches them is closed.
    window: tuple[int, int] | None = None

    def edges(self) -> tuple[int, int]:
        """The most a slice may read: its window's offsets when known, else the log."""
        if self.window is None:
            return self.log_start, self.log_end
        return max(self.log_start, self.window[0]), min(self.log_end, self.window[1])

    def bounds(self, k: int) -> tuple[int, int]:
        lo, hi = self.edges()
        start = max(lo, self.position - (k + 1) - self.before)
        end = min(hi, self.position + (k + 1) + self.after)
        return start, max(start, end)

    def close_at_edges(self, k: int) -> None:
        start, end = self.bounds(k)
        lo, hi = self.edges()
        self.is_left_closed = self.is_left_closed or start <= lo
        self.is_right_closed = self.is_right_closed or end >= hi

    def reach_edges(self) -> None:
        """Read the rest of the window (or log) at once: each open side to its edge."""
        lo, hi = self.edges()
        if not self.is_left_closed:
            self.before = max(self.before, self.position - lo)
        if not self.is_right_closed:
            self.after = max(self.after, hi - self.position)

    @property
    def is_open(self) -> bool:
        return not self.is_decided and not (self.is_left_closed and self.is_right_closed)


@dataclass
class SearchResult:
    records_df: DataFrame  # (topic, partition, segment, offset, timestamp_ms, sha256)
    slices_df: DataFrame  # SLICES_SCHEMA: each anchor position's final slice
    offsets_read: int
    positions: int
    steps: int


# -- pure transforms ------------------------------------------------------------------------


def filter_candidates_in_slices(
    candidates_df: DataFrame, anchors_df: DataFrame, slices_df: DataFrame
) -> DataFrame:
    """Only the candidates inside their own anchor's slice."""
    bounds = anchors_df.select(*matching.ANCHOR_KEYS, *SLICE_KEYS).join(slices_df, SLICE_KEYS)
    columns = candidates_df.columns
    return (
        candidates_df.join(bounds, matching.ANCHOR_KEYS)
        .filter(
            (F.col("candidate_offset") >= F.col("slice_start"))
            & (F.col("candidate_offset") < F.col("slice_end"))
        )
        .select(*columns)
    )


def with_slice_state(
    anchors_df: DataFrame,
    candidates_df: DataFrame,
    records_df: DataFrame,
    slices_df: DataFrame,
    k: int,
    window_before_ms: int,
    window_after_ms: int,
) -> DataFrame:
    """One row per slice: is_decided, is_left_closed, is_right_closed (see the module doc).

    `candidates_df` holds only candidates inside their slices (`filter_candidates_in_slices`)."""
    s = slices_df.alias("s")
    r = records_df.select(
        F.col("topic").alias("r_topic"),
        F.col("partition").alias("r_partition"),
        F.col("offset").alias("r_offset"),
        F.col("timestamp_ms").alias("r_ts"),
    )
    in_slice = s.join(
        r,
        (F.col("r_topic") == F.col("dst_topic"))
        & (F.col("r_partition") == F.col("dst_partition"))
        & (F.col("r_offset") >= F.col("slice_start"))
        & (F.col("r_offset") < F.col("slice_end")),
        "left",
    )
    ts = F.col("anchor_timestamp_ms")
    edges = in_slice.groupBy(*SLICE_KEYS).agg(
        F.count(F.when((F.col("r_offset") >= F.col("position")) & (F.col("r_ts") > ts), 1)).alias(
            "n_after_ms"
        ),
        F.count(F.when(F.col("r_ts") < ts - F.lit(window_before_ms), 1)).alias("n_before_window"),
        F.count(F.when(F.col("r_ts") > ts + F.lit(window_after_ms), 1)).alias("n_after_window"),
    )
    ranked = Window.partitionBy(*matching.ANCHOR_KEYS).orderBy(
        F.desc("match_before"), F.desc("match_after"), F.asc("candidate_offset")
    )
    best = (
        candidates_df.withColumn("rank", F.row_number().over(ranked))
        .filter(F.col("rank") == 1)
        .select(*matching.ANCHOR_KEYS, "match_before", "match_after", "candidate_timestamp_ms")
    )
    a = anchors_df.filter(F.col("anchor_kind") != "none").join(best, matching.ANCHOR_KEYS, "left")
    is_full_match = (
        (F.col("match_before") == F.size("src_before"))
        & (F.col("match_after") == F.size("src_after"))
        & (F.col("candidate_timestamp_ms") == F.col("anchor_timestamp_ms"))
    )
    per_position = a.groupBy(*SLICE_KEYS).agg(
        F.min(F.coalesce(is_full_match, F.lit(False)).cast(IntegerType())).alias("all_full")
    )
    state = slices_df.join(edges, SLICE_KEYS).join(per_position, SLICE_KEYS, "left")
    is_ms_covered = (F.col("slice_end") >= F.col("log_end")) | (F.col("n_after_ms") >= k + 1)
    is_left_closed = (F.col("slice_start") <= F.col("log_start")) | (
        F.col("n_before_window") >= k + 1
    )
    is_right_closed = (F.col("slice_end") >= F.col("log_end")) | (F.col("n_after_window") >= k + 1)
    return state.select(
        *SLICE_KEYS,
        ((F.coalesce(F.col("all_full"), F.lit(0)) == 1) & is_ms_covered).alias("is_decided"),
        is_left_closed.alias("is_left_closed"),
        is_right_closed.alias("is_right_closed"),
    )


# -- the search loop (driver) ---------------------------------------------------------------


def anchor_positions(
    dst: Cluster,
    positions: Sequence[Mapping],
    bounds: Mapping[TopicPartitionKey, tuple[int, int]],
) -> dict[tuple[str, int, int], int]:
    """P for each (dst_topic, dst_partition, anchor_timestamp_ms): verified timestamp lookups,
    all of them in lockstep (`kafka.offsets_for_many_timestamps`)."""
    per_tp: dict[TopicPartitionKey, list[int]] = defaultdict(list)
    for p in positions:
        per_tp[(p["dst_topic"], p["dst_partition"])].append(p["anchor_timestamp_ms"])
    found = kafka.offsets_for_many_timestamps(dst, per_tp, bounds)
    return {key: bounds[key[:2]][1] if at is None else at for key, at in found.items()}


def look_up_windows(
    dst: Cluster,
    slices: Mapping[tuple[str, int, int], AnchorSlice],
    bounds: Mapping[TopicPartitionKey, tuple[int, int]],
    k: int,
    before_ms: int,
    after_ms: int,
) -> None:
    """Give each slice its window's offsets, those a full read of it reads (never less than
    the slice already covers), all looked up at once."""
    windows: dict[TopicPartitionKey, list[tuple[int, int]]] = defaultdict(list)
    keys = sorted(slices)
    for t, p, ts in keys:
        windows[(t, p)].append((ts - before_ms, ts + after_ms + 1))
    extents = window_extents(dst, windows, bounds, k)
    taken: dict[TopicPartitionKey, int] = defaultdict(int)
    for key in keys:
        tp = key[:2]
        lo, hi = extents[tp][taken[tp]]
        taken[tp] += 1
        start, end = slices[key].bounds(k)
        slices[key].window = (min(lo, start), max(hi, end))


def finish_leftovers(
    dst: Cluster,
    open_slices: Mapping[tuple[str, int, int], AnchorSlice],
    bounds: Mapping[TopicPartitionKey, tuple[int, int]],
    book: RangeBook,
    cfg: FerryConfig,
) -> int | None:
    """When what the open slices' windows still hold is small (`LEFTOVER_OFFSETS`), widen
    their open sides to the windows' edges at once (closed once read, no Spark job to decide
    it): the last few positions take one read, not a step each. The offsets that will read,
    or None (the slices widen step by step). When the rest of their partitions is that small
    already, no window is looked up (reading past a window changes no outcome: candidates
    are taken by timestamp); else windows are looked up while no partition has more than
    `WINDOW_LOOKUPS_PER_PARTITION` open slices."""
    m = cfg.matching

    def unread() -> int:
        rest: dict[TopicPartitionKey, list[tuple[int, int]]] = defaultdict(list)
        for (t, p, _), s in open_slices.items():
            lo, hi = s.edges()
            if not s.is_left_closed:
                rest[(t, p)].append((lo, s.position))
            if not s.is_right_closed:
                rest[(t, p)].append((s.position, hi))
        return book.unread(rest)

    n = unread()  # to the windows' edges where known, else to the log's
    unknown = {key: s for key, s in open_slices.items() if s.window is None}
    per_tp: dict[TopicPartitionKey, int] = defaultdict(int)
    for t, p, _ in open_slices:
        per_tp[(t, p)] += 1
    if n > LEFTOVER_OFFSETS and unknown and max(per_tp.values()) <= WINDOW_LOOKUPS_PER_PARTITION:
        look_up_windows(dst, unknown, bounds, m.context, m.window_before_ms, m.window_after_ms)
        n = unread()
    if n > LEFTOVER_OFFSETS:
        return None
    for s in open_slices.values():
        s.reach_edges()
    return n


def search_destination(
    spark: SparkSession,
    dst: Cluster,
    anchors_df: DataFrame,
    bounds: Mapping[TopicPartitionKey, tuple[int, int]],
    cfg: FerryConfig,
    read: Callable[[Sequence], DataFrame],
    progress: Callable[[str], None],
) -> SearchResult:
    """Read outward from every anchor position until each is decided or its window is read.

    `read(ranges)` reads offset ranges of the destination now and keeps them (a DataFrame)."""
    k = cfg.matching.context
    before_ms, after_ms = cfg.matching.window_before_ms, cfg.matching.window_after_ms
    positions = collect_rows(
        anchors_df.filter(F.col("anchor_kind") != "none").select(*SLICE_KEYS).distinct()
    )
    whole = _read_whole(positions, bounds, k)
    large = [p for p in positions if (p["dst_topic"], p["dst_partition"]) not in whole]
    if large:
        progress(f"destination: looking up {len(large)} anchor timestamps")
    at = anchor_positions(dst, large, bounds)
    at.update({(p["dst_topic"], p["dst_partition"], p["anchor_timestamp_ms"]): 0 for p in positions
               if (p["dst_topic"], p["dst_partition"]) in whole})  # fmt: skip
    slices = {
        key: _first_slice(pos, *bounds[(key[0], key[1])], k, (key[0], key[1]) in whole)
        for key, pos in at.items()
    }
    book, parts = RangeBook(), []
    offsets_read, step = 0, 0
    while step < MAX_STEPS and any(s.is_open or not s.read_bounds for s in slices.values()):
        step += 1
        wanted: dict[TopicPartitionKey, list[tuple[int, int]]] = defaultdict(list)
        for (topic, partition, _), s in slices.items():
            if s.is_open or not s.read_bounds:
                s.read_bounds = s.bounds(k)
                wanted[(topic, partition)].append(s.read_bounds)
        ranges = book.new_ranges(wanted)
        n = sum(r.end - r.start for r in ranges)
        open_count = sum(s.is_open for s in slices.values())
        progress(
            f"destination: step {step}, {open_count} of {len(slices)} anchor positions open, "
            f"reading {len(ranges)} ranges ({n} offsets)"
        )
        if ranges:
            parts.append(read(ranges))  # every open slice's new offsets, read at once
            offsets_read += n
        for s in slices.values():
            s.close_at_edges(k)
        still_open = {key: s for key, s in slices.items() if s.is_open}
        if not still_open:
            break  # every slice now spans its window or its partition: no need to look
        records_df = with_segments(union_records(spark, parts), book.segments_df(spark))
        open_df = _slices_df(spark, still_open, k)
        context_df = matching.with_context(records_df, k)
        candidates_df = filter_candidates_in_slices(
            matching.with_candidates(anchors_df, context_df, before_ms, after_ms),
            anchors_df,
            open_df,
        )
        state = collect_rows(
            with_slice_state(anchors_df, candidates_df, records_df, open_df, k, before_ms, after_ms)
        )
        for row in state:
            s = still_open[(row["dst_topic"], row["dst_partition"], row["anchor_timestamp_ms"])]
            s.is_decided = bool(row["is_decided"])
            s.is_left_closed = bool(row["is_left_closed"])
            s.is_right_closed = bool(row["is_right_closed"])
            if s.is_open:
                if not s.is_left_closed:
                    s.before = max(FIRST_RADIUS, s.before * GROWTH)
                if not s.is_right_closed:
                    s.after *= GROWTH
        leftovers = {key: s for key, s in still_open.items() if s.is_open}
        if leftovers and (n := finish_leftovers(dst, leftovers, bounds, book, cfg)) is not None:
            progress(
                f"destination: the {len(leftovers)} anchor positions still open read to "
                f"their windows' edges at once ({n} offsets)"
            )
    records_df = with_segments(union_records(spark, parts), book.segments_df(spark))
    return SearchResult(
        records_df, _slices_df(spark, slices, k, read=True), offsets_read, len(slices), step
    )


def _read_whole(
    positions: Sequence[Mapping], bounds: Mapping[TopicPartitionKey, tuple[int, int]], k: int
) -> set[TopicPartitionKey]:
    """Destination partitions read whole at once, with no lookup and no search: those no
    larger than a few steps would read, and those whose anchor positions are so many that
    their first slices alone would cover half of it. A lookup costs a request and a read per
    anchor (a cutover's 200 groups on a 20,000-record partition spent a minute in them) and
    deciding overlapping slices costs more than the records they hold."""
    first_read = 2 * (k + 1) + FIRST_RADIUS
    per_tp: dict[TopicPartitionKey, int] = defaultdict(int)
    for p in positions:
        per_tp[(p["dst_topic"], p["dst_partition"])] += 1
    out = set()
    for tp, n in per_tp.items():
        size = bounds[tp][1] - bounds[tp][0]
        if size <= SMALL_PARTITION or 2 * n * first_read >= size:
            out.add(tp)
    return out


def _first_slice(position: int, log_start: int, log_end: int, k: int, whole: bool) -> AnchorSlice:
    """The anchor's millisecond and context, or (`whole`) its partition's whole log, which
    needs no look at all."""
    s = AnchorSlice(position, log_start, log_end, before=0, after=FIRST_RADIUS)
    if whole:
        s.position, s.before, s.after = log_start, 0, max(SMALL_PARTITION, log_end - log_start)
    s.close_at_edges(k)
    return s


def _slices_df(
    spark: SparkSession,
    slices: Mapping[tuple[str, int, int], AnchorSlice],
    k: int,
    read: bool = False,
) -> DataFrame:
    """The slices as rows. read=True: the bounds last read (open slices grew since)."""
    rows = [
        (
            t,
            p,
            ts,
            s.position,
            *((s.read_bounds or (0, 0)) if read else s.bounds(k)),
            s.log_start,
            s.log_end,
        )
        for (t, p, ts), s in slices.items()
    ]
    return local_df(spark, rows, SLICES_SCHEMA)
