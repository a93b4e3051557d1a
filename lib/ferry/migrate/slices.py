"""Slices, the destination search's unit (`ferry.migrate.search`): what is read around one
anchor position (`AnchorSlice`, on the driver), and the pure transforms over a step's records,
its slices and the anchors read in it (Spark). An anchor position is a destination
partition × anchor timestamp; the rules for when one is decided or
closed are in `ferry.migrate.search`'s module doc.

Pure: DataFrames and plain values in, a DataFrame out; no reads, writes or sessions.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

from ferry.migrate import matching

SLICE_KEYS = ["dst_topic", "dst_partition", "anchor_timestamp_ms"]
SLICE_KEYS_SCHEMA = StructType(
    [
        StructField("dst_topic", StringType(), False),
        StructField("dst_partition", IntegerType(), False),
        StructField("anchor_timestamp_ms", LongType(), False),
    ]
)
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
    resolved_df: DataFrame,
    records_df: DataFrame,
    slices_df: DataFrame,
    k: int,
    window_before_ms: int,
    window_after_ms: int,
) -> DataFrame:
    """`resolved_df` (`matching.resolve`'s rows, `is_full_match` included, from candidates
    inside their slices: `filter_candidates_in_slices`) with, for the slices of `slices_df`,
    is_decided, is_left_closed and is_right_closed (see the module doc); null for the rest.

    Decided needs every position of the slice fully matched, so the rows of one slice are
    taken together (a window over them: resolve's rows are used once, their candidates are
    not computed twice)."""
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
        F.first("slice_end").alias("e_slice_end"),
        F.first("slice_start").alias("e_slice_start"),
        F.first("log_start").alias("e_log_start"),
        F.first("log_end").alias("e_log_end"),
        F.count(F.when((F.col("r_offset") >= F.col("position")) & (F.col("r_ts") > ts), 1)).alias(
            "n_after_ms"
        ),
        F.count(F.when(F.col("r_ts") < ts - F.lit(window_before_ms), 1)).alias("n_before_window"),
        F.count(F.when(F.col("r_ts") > ts + F.lit(window_after_ms), 1)).alias("n_after_window"),
    )
    per_slice = Window.partitionBy(*SLICE_KEYS)
    all_full = F.min(F.col("is_full_match").cast(IntegerType())).over(per_slice)
    state = resolved_df.withColumn("all_full", all_full).join(edges, SLICE_KEYS, "left")
    is_ms_covered = (F.col("e_slice_end") >= F.col("e_log_end")) | (F.col("n_after_ms") >= k + 1)
    is_left_closed = (F.col("e_slice_start") <= F.col("e_log_start")) | (
        F.col("n_before_window") >= k + 1
    )
    is_right_closed = (F.col("e_slice_end") >= F.col("e_log_end")) | (
        F.col("n_after_window") >= k + 1
    )
    is_known = F.col("e_slice_end").isNotNull()
    return state.select(
        *resolved_df.columns,
        F.when(is_known, (F.col("all_full") == 1) & is_ms_covered).alias("is_decided"),
        F.when(is_known, is_left_closed).alias("is_left_closed"),
        F.when(is_known, is_right_closed).alias("is_right_closed"),
    )


def match_in_slices(
    anchors_df: DataFrame,
    records_df: DataFrame,
    slices_df: DataFrame | None,
    open_df: DataFrame | None,
    bounds_df: DataFrame,
    k: int,
    window_before_ms: int,
    window_after_ms: int,
) -> DataFrame:
    """Matching's row for each anchor (`matching.POSITION_COLUMNS`) from the candidates inside
    its slice (`slices_df`; None: every slice holds its whole partition), with, for the slices
    of `open_df`, is_decided, is_left_closed and is_right_closed (`with_slice_state`; null for
    the others)."""
    context_df = matching.with_context(records_df, k)
    candidates_df = matching.with_candidates(
        anchors_df, context_df, window_before_ms, window_after_ms
    )
    if slices_df is not None:
        candidates_df = filter_candidates_in_slices(candidates_df, anchors_df, slices_df)
    resolved_df = matching.resolve(anchors_df, candidates_df, bounds_df, window_after_ms)
    state = ["is_decided", "is_left_closed", "is_right_closed"]
    if open_df is None:
        return resolved_df.select(
            *matching.POSITION_COLUMNS, *(F.lit(None).cast("boolean").alias(c) for c in state)
        )
    return with_slice_state(
        resolved_df, records_df, open_df, k, window_before_ms, window_after_ms
    ).select(*matching.POSITION_COLUMNS, *state)
