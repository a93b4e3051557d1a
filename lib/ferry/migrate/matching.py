"""Matching: which destination record is the source record before a committed offset.

Pure DataFrame transforms (no reads, writes or sessions), built from Spark's own functions.
They work on anchor **positions** — distinct (source topic, partition, committed offset) —
not on group partitions: ten thousand groups committed on the same partitions share a few
thousand positions, and each is matched once (`ferry.migrate.model` gives every group
partition its position's result afterwards, on the driver):

1. Context: each compared record's neighbours' fingerprints (k before, k after, nearest
   first) within the contiguous range it was read in. The driver locates the anchors and, on
   the destination, the records that share an anchor's fingerprint (the only possible
   candidates) among their partitions' fingerprints (`ferry.migrate.context`); a row's
   context is cut out of those (`with_context`, a broadcast) only where it is compared.
2. The anchor of each committed offset C: the last source record before C ("last"), or when
   nothing precedes C the first record at or after it ("next"), or neither ("none": the
   source has nothing before or after C). It is chosen, located and its hash picked on the
   driver, which holds the source records read (`ferry.migrate.anchors`,
   `ferry.migrate.context`).
3. `with_candidates` joins anchors to destination records with the same SHA-256 whose
   timestamp is within [anchor − window_before_ms, anchor + window_after_ms] (an anchor with
   none keeps one row), and scores each candidate by the length of the common prefix of its
   neighbours and the anchor's, before and after.
4. `resolve` groups each position's rows and keeps the candidate with the longest matching
   context before, then after; a tie at the top is AMBIGUOUS. MATCHED commits candidate + 1
   (the record after the last consumed one); MATCHED_NEXT commits the candidate itself; EMPTY
   commits the destination's log end.
   No candidate is PENDING while the destination has not been written past the window (the
   replica may still bring the record) and NOT_FOUND after. INCONSISTENT: the source's next
   record exists and so does the destination's, but they differ — the last consumed record
   and the next one would not land side by side.

Known limits: a run of more than k identical records whose neighbours are also identical on
both sides cannot be told apart and is AMBIGUOUS by design (raise `matching.context`); ranking
is "longest matching context wins", so context cut short by the destination's log start
scores lower than a full match elsewhere.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, IntegerType, LongType

from ferry.config.model import MAX_CONTEXT
from ferry.status import PartitionStatus

# Exact mode's resolved statuses, as Spark compares them (plain strings).
RESOLVED_STATUSES = tuple(
    s.value for s in (PartitionStatus.MATCHED, PartitionStatus.MATCHED_NEXT, PartitionStatus.EMPTY)
)

# A position: what every stage keys on (several groups committed at the same offset share it).
ANCHOR_KEYS = ["src_topic", "src_partition", "committed_offset"]
COMMITTED_COLUMNS = [
    "src_topic",
    "src_partition",
    "committed_offset",
    "dst_topic",
    "dst_partition",
    "src_log_start_offset",
    "src_log_end_offset",
]
# a position with its anchor, chosen on the driver (`ferry.migrate.anchors`)
ANCHORED_COLUMNS = [*COMMITTED_COLUMNS, "anchor_kind", "anchor_offset", "anchor_timestamp_ms"]
# where an anchor record is among its partition's fingerprints (`ferry.migrate.context`:
# its index, and its segment's first and last; null for none)
ANCHOR_LOCATION_COLUMNS = ["src_at", "src_first", "src_last"]
# a position's row in the driver's table of anchors, carried to the result (`slices.collected`)
ANCHOR_ROW = "anchor_row"
# a position with its anchor's hash and location (`ferry.migrate.plan.anchors_table`)
ANCHORS_COLUMNS = [
    *COMMITTED_COLUMNS,
    "anchor_kind",
    "anchor_offset",
    "anchor_timestamp_ms",
    "anchor_sha256",
    *ANCHOR_LOCATION_COLUMNS,
    ANCHOR_ROW,
]
# what a position's result takes from its anchor as it is (`resolve`)
ANCHOR_RESULT_COLUMNS = [
    *ANCHOR_KEYS,
    "dst_topic",
    "dst_partition",
    "anchor_kind",
    "anchor_offset",
    "anchor_timestamp_ms",
    "anchor_sha256",
]
# what matching works out for a position (`resolve`), and its result with its anchor's columns
RESULT_COLUMNS = [
    "candidate_count",
    "match_before",
    "match_after",
    "destination_offset",
    "status",
    "is_resolved",
]
POSITION_COLUMNS = [*ANCHOR_RESULT_COLUMNS, *RESULT_COLUMNS]
# a plan row: one group partition with its position's result
PLAN_COLUMNS = ["group", *POSITION_COLUMNS]


def plan_row(**values: object) -> dict:
    """A plan row made outside matching (refusals, missing destinations, reconciled topics):
    every plan column empty, unresolved, then `values`."""
    return {**dict.fromkeys(PLAN_COLUMNS), "is_resolved": False, "note": None, **values}


def _empty_context() -> Column:
    return F.array().cast(ArrayType(LongType()))


class Located(NamedTuple):
    """Records located on the driver (`ferry.migrate.context`): where each is among its
    partition's fingerprints (`index_df`, `context.INDEX_FIELDS`) and those fingerprints
    (`fingerprints_df`, `context.FINGERPRINT_FIELDS`), from which `with_context` cuts it;
    `repeated_df`: the (topic, partition, sha256) that two or more of them share, or None
    when none do (an anchor with another hash has at most one candidate: `match`)."""

    index_df: DataFrame
    fingerprints_df: DataFrame
    repeated_df: DataFrame | None = None


class MatchInputs(NamedTuple):
    """What every matching query of a run reads besides the candidates: the anchors
    (`ANCHORS_COLUMNS`; cached for a search of several steps: `anchors_cached` waits for
    it), their partitions' fingerprints and the destination's bounds (`DST_BOUNDS_SCHEMA`)."""

    anchors_df: DataFrame
    src_prints_df: DataFrame
    bounds_df: DataFrame
    anchors_cached: Callable[[], None]
    # anchors partitioned by position, to group their candidates: a cache already is
    by_position: Callable[[DataFrame], DataFrame] = lambda df: df
    anchors_table: Any = None  # pyarrow: `anchors_df` as the driver made it, row by ANCHOR_ROW


def _context_sizes(at: Column, first: Column, last: Column, k: int) -> tuple[Column, Column]:
    """How many records of a located record's context there are before it and after it: at
    most k each, within its segment."""
    return at - F.greatest(first, at - F.lit(k)), F.least(last, at + F.lit(k)) - at


def _cut(fingerprints: str, at: str, first: str, last: str, k: int) -> tuple[Column, Column]:
    """A located record's context (`ferry.migrate.context.locate`: 0-based indexes into its
    partition's fingerprints): the k before it within its segment, nearest first, and the k
    after."""
    i = F.col(at)
    n_before, n_after = _context_sizes(i, F.col(first), F.col(last), k)
    before = F.reverse(F.slice(F.col(fingerprints), i - n_before + 1, n_before))
    after = F.slice(F.col(fingerprints), i + 2, n_after)
    return before, after


def with_context(
    located_df: DataFrame,
    fingerprints_df: DataFrame,
    k: int,
    partition: tuple[str, str] = ("topic", "partition"),
    location: tuple[str, str, str] = ("at", "first", "last"),
    names: tuple[str, str] = ("before", "after"),
) -> DataFrame:
    """`located_df`'s rows with their records' context, before and after (`names`), cut out
    of their partitions' fingerprints (`FINGERPRINT_FIELDS`, a broadcast: a partition's
    fingerprints are 8 bytes a record read; they are cut in the join's own projection, never
    copied whole into a row). `partition`: the columns naming a row's partition; `location`:
    its record's index, its segment's first and last (`INDEX_FIELDS`); a row whose record is
    not located (null) gets empty context."""
    prints = F.broadcast(
        fingerprints_df.select(
            F.col("topic").alias(partition[0]),
            F.col("partition").alias(partition[1]),
            F.col("fingerprints").alias("_fingerprints"),
        )
    )
    joined = located_df.join(prints, list(partition), "left")
    before, after = _cut("_fingerprints", *location, k)
    return joined.select(
        *located_df.columns,
        F.coalesce(before, _empty_context()).alias(names[0]),
        F.coalesce(after, _empty_context()).alias(names[1]),
    )


def _renamed(df: DataFrame, **names: str) -> DataFrame:
    """Only the given columns of a records DataFrame, each under its new name (a side of a
    join)."""
    return df.select(*(F.col(old).alias(new) for old, new in names.items()))


def _common_prefix(x: Column, y: Column) -> Column:
    """Length of the common prefix of two arrays (0 when either is empty). Built from column
    functions, not SQL text: parsing SQL starts Spark's parser, half a second on a cold JVM."""
    n = F.least(F.size(x), F.size(y))
    head_x, head_y = F.slice(x, 1, n), F.slice(y, 1, n)
    # Most candidates match whole: the two heads compared as values settle them. For the
    # others, the least index whose (index, fingerprint) pair is in one head and not the other.
    # No lambda: an expression without generated code (a higher-order function's) takes the
    # whole projection out of the query's generated code (10,000 groups: 0.5-0.8 s of tasks).
    at = F.sequence(F.lit(1), n)
    differ = F.array_except(
        F.arrays_zip(at.alias("i"), head_x.alias("v")),
        F.arrays_zip(at.alias("i"), head_y.alias("v")),
    )
    return (
        F.when(n == 0, F.lit(0)).when(head_x == head_y, n).otherwise(F.array_min(differ)["i"] - 1)
    )


# A scored candidate of an anchor (`with_candidates`); all null but the anchor's for an anchor
# with none.
CANDIDATE_COLUMNS = [
    *ANCHOR_RESULT_COLUMNS,
    ANCHOR_ROW,
    "src_before_size",
    "src_after_size",
    "candidate_offset",
    "candidate_at",
    "candidate_timestamp_ms",
    "match_before",
    "match_after",
    "has_dst_next",
]


def with_candidates(
    anchors_df: DataFrame,
    src_fingerprints_df: DataFrame,
    dst_located: Located,
    k: int,
    window_before_ms: int,
    window_after_ms: int,
    within_slices: bool = False,
) -> DataFrame:
    """Every anchor once per destination record with its hash inside its window, scored by
    how much of their contexts match (`CANDIDATE_COLUMNS`), or once with no candidate;
    `within_slices`: only records inside the anchor's own slice, [slice_start, slice_end),
    columns `anchors_df` carries (`ferry.migrate.slices.with_slices`) — a condition of the
    same join. `src_fingerprints_df`: the fingerprints of the anchors' partitions
    (`FINGERPRINT_FIELDS`); `dst_located`: at least every destination record that can be a
    candidate, located, with its timestamp and SHA-256.

    The possible candidates (picked on the driver, `ferry.migrate.context`) are broadcast and
    the anchors streamed past them, keeping the anchors' partitioning (`match`). Both contexts
    are cut and compared in one projection at the end."""
    bounds = ["slice_start", "slice_end"] if within_slices else []
    a = anchors_df.select(*ANCHOR_RESULT_COLUMNS, ANCHOR_ROW, *ANCHOR_LOCATION_COLUMNS, *bounds)
    d = _renamed(
        dst_located.index_df,
        topic="d_topic",
        partition="d_partition",
        offset="candidate_offset",
        timestamp_ms="d_timestamp_ms",
        sha256="d_sha256",
        at="d_at",
        first="d_first",
        last="d_last",
    )
    on = (
        (a.dst_topic == d.d_topic)
        & (a.dst_partition == d.d_partition)
        & (a.anchor_sha256 == d.d_sha256)  # null for an anchor of kind "none": no candidate
        & (d.d_timestamp_ms >= a.anchor_timestamp_ms - F.lit(window_before_ms))
        & (d.d_timestamp_ms <= a.anchor_timestamp_ms + F.lit(window_after_ms))
    )
    if within_slices:
        on = on & (d.candidate_offset >= a.slice_start) & (d.candidate_offset < a.slice_end)
    located = a.join(F.broadcast(d), on, "left").select(
        *ANCHOR_RESULT_COLUMNS,
        ANCHOR_ROW,
        *ANCHOR_LOCATION_COLUMNS,
        "candidate_offset",
        "d_timestamp_ms",
        "d_at",
        "d_first",
        "d_last",
    )
    src = ("src_topic", "src_partition")
    cut = with_context(located, src_fingerprints_df, k, src, ("src_at", "src_first", "src_last"),
                       ("src_before", "src_after"))  # fmt: skip
    cut = with_context(cut, dst_located.fingerprints_df, k, ("dst_topic", "dst_partition"),
                       ("d_at", "d_first", "d_last"), ("d_before", "d_after"))  # fmt: skip
    before_size, after_size = _context_sizes(*(F.col(c) for c in ANCHOR_LOCATION_COLUMNS), k)
    _, d_after_size = _context_sizes(F.col("d_at"), F.col("d_first"), F.col("d_last"), k)
    return cut.select(
        *ANCHOR_RESULT_COLUMNS,
        ANCHOR_ROW,
        F.coalesce(before_size, F.lit(0)).alias("src_before_size"),
        F.coalesce(after_size, F.lit(0)).alias("src_after_size"),
        "candidate_offset",
        F.col("d_at").alias("candidate_at"),
        F.col("d_timestamp_ms").alias("candidate_timestamp_ms"),
        _common_prefix(F.col("src_before"), F.col("d_before")).alias("match_before"),
        _common_prefix(F.col("src_after"), F.col("d_after")).alias("match_after"),
        (d_after_size > 0).alias("has_dst_next"),
    )


# `resolve` ranks a candidate by one long: its score (match_before, then match_after, each at
# most `MAX_CONTEXT`, 16 bits) above its index among its partition's records read
# (`candidate_at`, an int, ordered as its offset). Fixed-width maxima keep the grouping a
# generated hash aggregate (a struct's maximum made it an interpreted sort aggregate).
_SIDE_BITS = MAX_CONTEXT.bit_length()  # 16
_AT_BITS = 31
_AT = 1 << _AT_BITS


def _rank(lowest_first: bool) -> Column:
    score = F.shiftleft(F.col("match_before").cast(LongType()), _SIDE_BITS) + F.col("match_after")
    at = F.col("candidate_at").cast(LongType())
    return F.when(
        F.col("candidate_offset").isNotNull(),
        score * _AT + (F.lit(_AT - 1) - at if lowest_first else at),
    )


def match(
    inputs: MatchInputs,
    anchors_df: DataFrame,
    located: Located,
    k: int,
    window_before_ms: int,
    window_after_ms: int,
    within_slices: bool = False,
) -> DataFrame:
    """Matching's row for each of `anchors_df`'s positions (`resolve`'s columns), among
    `located`'s possible candidates (`with_candidates`; `inputs`: the run's source
    fingerprints, destination bounds and `by_position`). An anchor whose hash no two located
    records share has at most one candidate row: its row is its result, worked out as the
    anchors stream past the broadcasts (`resolve_each`), with no shuffle and no grouping.
    Only the anchors of a shared hash are grouped by position (`resolve`)."""

    def candidates(df: DataFrame) -> DataFrame:
        return with_candidates(df, inputs.src_prints_df, located, k, window_before_ms,
                               window_after_ms, within_slices)  # fmt: skip

    if located.repeated_df is None:
        return resolve_each(candidates(anchors_df), inputs.bounds_df, window_after_ms)
    keys = ["dst_topic", "dst_partition", "anchor_sha256"]
    repeated = F.broadcast(located.repeated_df.toDF(*keys))
    alone_df = anchors_df.join(repeated, keys, "left_anti")
    shared_df = inputs.by_position(anchors_df.join(repeated, keys, "left_semi"))
    return resolve_each(candidates(alone_df), inputs.bounds_df, window_after_ms).unionByName(
        resolve(candidates(shared_df), inputs.bounds_df, window_after_ms)
    )


def resolve(candidates_df: DataFrame, dst_bounds_df: DataFrame, window_after_ms: int) -> DataFrame:
    """Exactly one row per position with status and offset (`POSITION_COLUMNS`),
    is_full_match (the destination search's test of a decided slice) and its `ANCHOR_ROW`,
    from its anchor's scored candidates (`with_candidates`)."""
    # The best candidate has the greatest (match_before, match_after), the lowest offset first;
    # a tie at the top is two candidates with the best (match_before, match_after), whose
    # lowest and highest offsets then differ. Both are maxima of a rank (`_rank`), and the top
    # candidate's columns are taken at its rank (an anchor's candidates are in one partition:
    # no two share a rank). The anchor's own columns (the same on each of its rows) are
    # grouping keys: no window, no join back to the anchors.
    top_rank = _rank(lowest_first=True)
    best = candidates_df.groupBy(*ANCHOR_KEYS, *_ANCHOR_COLUMNS).agg(
        F.count("candidate_offset").cast(IntegerType()).alias("candidate_count"),
        F.max(top_rank).alias("top_rank"),
        F.max(_rank(lowest_first=False)).alias("last_rank"),
        F.max_by("candidate_offset", top_rank).alias("top_offset"),
        F.max_by("candidate_timestamp_ms", top_rank).alias("top_timestamp_ms"),
        F.max_by("has_dst_next", top_rank).alias("top_has_dst_next"),
    )
    return _resolved(best, dst_bounds_df, window_after_ms)


def resolve_each(
    candidates_df: DataFrame, dst_bounds_df: DataFrame, window_after_ms: int
) -> DataFrame:
    """`resolve` of candidates with one row per position (at most one candidate each): the
    row's own values are the maxima `resolve` takes, and no row is grouped with another."""
    top_rank = _rank(lowest_first=True)
    is_candidate = top_rank.isNotNull()
    # A coalesce keeping every partition generates no code: it cuts the query's in two. Whole,
    # its method was 10,900 bytes of bytecode, past the 8,000 above which HotSpot never
    # compiles one (its tasks took 1.7x the CPU, interpreted); cut, 7,400 and 4,200.
    best = candidates_df.coalesce(_EVERY_PARTITION).select(
        *ANCHOR_KEYS,
        *_ANCHOR_COLUMNS,
        is_candidate.cast(IntegerType()).alias("candidate_count"),
        top_rank.alias("top_rank"),
        _rank(lowest_first=False).alias("last_rank"),
        F.when(is_candidate, F.col("candidate_offset")).alias("top_offset"),
        F.when(is_candidate, F.col("candidate_timestamp_ms")).alias("top_timestamp_ms"),
        F.when(is_candidate, F.col("has_dst_next")).alias("top_has_dst_next"),
    )
    return _resolved(best, dst_bounds_df, window_after_ms)


_EVERY_PARTITION = 1 << 30  # a coalesce to at most this many partitions keeps them all

# What a position's result takes from its anchor besides its key (grouping keys of `resolve`).
_ANCHOR_COLUMNS = [
    *ANCHOR_RESULT_COLUMNS[len(ANCHOR_KEYS) :], ANCHOR_ROW, "src_before_size", "src_after_size"
]


def _resolved(best: DataFrame, dst_bounds_df: DataFrame, window_after_ms: int) -> DataFrame:
    """A position's status, offset and scores from its best candidate's (`resolve`)."""
    plan = best.join(dst_bounds_df, ["dst_topic", "dst_partition"], "left")
    has_top = F.col("top_rank").isNotNull()
    score = F.shiftright("top_rank", _AT_BITS)
    match_before = F.shiftright(score, _SIDE_BITS).cast(IntegerType())
    match_after = score.bitwiseAND(F.lit(MAX_CONTEXT)).cast(IntegerType())
    top_at = F.lit(_AT - 1) - F.col("top_rank").bitwiseAND(F.lit(_AT - 1))
    is_tie = top_at != F.col("last_rank").bitwiseAND(F.lit(_AT - 1))
    is_inconsistent = (F.col("src_after_size") > 0) & F.col("top_has_dst_next") & (match_after == 0)
    replica_behind = F.col("dst_last_timestamp_ms").isNull() | (
        F.col("dst_last_timestamp_ms") < F.col("anchor_timestamp_ms") + F.lit(window_after_ms)
    )
    status = (
        F.when(F.col("anchor_kind") == "none", F.lit(PartitionStatus.EMPTY.value))
        .when(~has_top & replica_behind, F.lit(PartitionStatus.PENDING.value))
        .when(~has_top, F.lit(PartitionStatus.NOT_FOUND.value))
        .when(is_tie, F.lit(PartitionStatus.AMBIGUOUS.value))
        .when(F.col("anchor_kind") == "next", F.lit(PartitionStatus.MATCHED_NEXT.value))
        .when(is_inconsistent, F.lit(PartitionStatus.INCONSISTENT.value))
        .otherwise(F.lit(PartitionStatus.MATCHED.value))
    )
    destination = (
        F.when(status == PartitionStatus.EMPTY.value, F.col("dst_log_end_offset"))
        .when(status == PartitionStatus.MATCHED_NEXT.value, F.col("top_offset"))
        .when(status == PartitionStatus.MATCHED.value, F.col("top_offset") + 1)
    )
    return plan.select(
        *ANCHOR_RESULT_COLUMNS,
        F.col("candidate_count"),
        match_before.alias("match_before"),
        match_after.alias("match_after"),
        destination.cast(LongType()).alias("destination_offset"),
        status.alias("status"),
        status.isin(*RESOLVED_STATUSES).alias("is_resolved"),
        # the top candidate matches the anchor's whole context at its own timestamp
        F.coalesce(
            (match_before == F.col("src_before_size"))
            & (match_after == F.col("src_after_size"))
            & (F.col("top_timestamp_ms") == F.col("anchor_timestamp_ms")),
            F.lit(False),
        ).alias("is_full_match"),
        ANCHOR_ROW,
    )
