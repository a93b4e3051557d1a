"""Slices, the destination search's unit (`ferry.migrate.search`): what is read around one
anchor position (`AnchorSlice`, on the driver), the pure transforms that match a step's anchors
inside their slices (Spark), and the judgement of the slices still open from the offsets and
timestamps read (`judge_slices`, on the driver, which holds them). An anchor position is a
destination partition × anchor timestamp; the rules for when one is decided or closed are in
`ferry.migrate.search`'s module doc.

Pure: DataFrames, Arrow tables and plain values in, a DataFrame or plain values out; no reads,
writes or sessions.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

from ferry.keys import TopicPartitionKey
from ferry.migrate import matching
from ferry.migrate.anchors import PartitionRecords

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


# A destination partition read whole: one slice for all its anchor positions
WHOLE_SLICES_SCHEMA = StructType(
    [
        StructField("dst_topic", StringType(), False),
        StructField("dst_partition", IntegerType(), False),
        StructField("slice_start", LongType(), False),
        StructField("slice_end", LongType(), False),
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
    # Its partition is read whole: the one slice of all the partition's anchor positions.
    is_whole: bool = False

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


def with_slices(
    anchors_df: DataFrame,
    slices_df: DataFrame | None,
    unanchored: bool = False,
    whole_df: DataFrame | None = None,
) -> DataFrame:
    """The anchors of these slices (`SLICES_SCHEMA`; `whole_df`: and of the partitions read
    whole, `WHOLE_SLICES_SCHEMA`; None: there are none), each with its slice's bounds,
    slice_start and slice_end: broadcast joins, slices being few beside records. A partition
    read whole is one row, not one a position (250,000 positions: 40 MiB broadcast twice a
    step). `unanchored`: and the positions with no anchor (kind "none"), which have no slice
    (null bounds) — outer joins, not a union, which Spark analyses again over both plans."""
    joined, starts, ends = anchors_df, [], []
    for df, keys, name in (
        (slices_df, SLICE_KEYS, "key"),
        (whole_df, ["dst_topic", "dst_partition"], "whole"),
    ):
        if df is not None:
            bounds = df.select(
                *keys,
                F.col("slice_start").alias(f"{name}_start"),
                F.col("slice_end").alias(f"{name}_end"),
            )
            joined = joined.join(F.broadcast(bounds), keys, "left")
            starts.append(F.col(f"{name}_start"))
            ends.append(F.col(f"{name}_end"))
    none = F.lit(None).cast(LongType())
    out = joined.select(
        *anchors_df.columns,
        (F.coalesce(*starts) if starts else none).alias("slice_start"),
        (F.coalesce(*ends) if ends else none).alias("slice_end"),
    )
    has_slice = F.col("slice_start").isNotNull()
    if unanchored:
        has_slice = has_slice | (F.col("anchor_kind") == "none")
    return out.filter(has_slice)


def match_in_slices(
    inputs: matching.MatchInputs,
    anchors_df: DataFrame,
    located: matching.Located,
    k: int,
    window_before_ms: int,
    window_after_ms: int,
    within_slices: bool = True,
) -> DataFrame:
    """Matching's row for each anchor (`matching.POSITION_COLUMNS`, is_full_match: its top
    candidate matches its whole context at its own timestamp, and its `ANCHOR_ROW`) from the
    candidates inside its own slice (`anchors_df` from `with_slices`; `inputs`: the run's
    source fingerprints, the destination's bounds; `located`: the possible candidates, with
    their timestamps and hashes, `ferry.migrate.context`). Not `within_slices`: every located
    candidate is inside its anchor's slice (the anchors carry no bounds)."""
    resolved_df = matching.match(inputs, anchors_df, located, k, window_before_ms,
                                 window_after_ms, within_slices)  # fmt: skip
    return resolved_df.select(*matching.POSITION_COLUMNS, "is_full_match", matching.ANCHOR_ROW)


def collected(resolved_df: DataFrame, anchors_table: pa.Table, *extra: str) -> pa.Table:
    """Matching's rows (`matching.POSITION_COLUMNS`, then the `extra` columns, then
    `ANCHOR_ROW`) of a query over the anchors of `anchors_table` (the driver's own,
    `ferry.migrate.plan.anchors_table`), as Arrow (`in_anchor_order` puts them in that table's
    order). Spark sends back each row's anchor row and what it worked out; the anchor's own
    columns (its topics, kind and hash: 70% of the bytes) are taken from the driver's table."""
    worked_out = [*matching.RESULT_COLUMNS, *extra]
    rows = resolved_df.select(matching.ANCHOR_ROW, *worked_out).toArrow()
    at = rows[matching.ANCHOR_ROW]
    own = anchors_table.select(matching.ANCHOR_RESULT_COLUMNS).take(at)
    return pa.Table.from_arrays(
        [*own.columns, *rows.select(worked_out).columns, at],
        names=[*matching.ANCHOR_RESULT_COLUMNS, *worked_out, matching.ANCHOR_ROW],
    )


def in_anchor_order(tables: Sequence[pa.Table], anchors: int) -> pa.Table:
    """The rows of one or more queries over the same anchors (`collected`'s, each anchor in
    one of them) as one table whose row i is anchor i's, `ANCHOR_ROW` dropped: the driver's
    anchors are the positions in the order the plan listed them, so the plan knows which row
    is a position's before matching ends (`ferry.migrate.model.PositionRows`). Anything but
    one row per anchor is an error, never a plan."""
    table = pa.concat_tables(tables)
    table = table.take(pc.sort_indices(table[matching.ANCHOR_ROW]))
    at = table[matching.ANCHOR_ROW].to_numpy()
    if len(at) != anchors or not np.array_equal(at, np.arange(anchors, dtype=at.dtype)):
        raise RuntimeError(f"matching gave {len(at)} rows for {anchors} anchor positions")
    return table.drop_columns([matching.ANCHOR_ROW])


@dataclass(frozen=True)
class SliceState:
    """An open slice after a step: decided, or which of its sides reached its edge."""

    is_decided: bool
    is_left_closed: bool
    is_right_closed: bool


def judge_slices(
    records: Mapping[TopicPartitionKey, PartitionRecords],
    open_slices: Mapping[tuple[str, int, int], AnchorSlice],
    is_full: Mapping[tuple[str, int, int], bool],
    k: int,
    window_before_ms: int,
    window_after_ms: int,
) -> dict[tuple[str, int, int], SliceState]:
    """Whether each open slice is decided, and which of its sides are closed (the rules are in
    `ferry.migrate.search`'s module doc), from the offsets and timestamps of the records read
    so far (`records`: per partition, `anchors.records_by_partition`; each record once) and,
    per slice,
    whether every anchor at its position fully matched (`is_full`: matching's
    is_full_match, all of the slice's rows). On the driver, which holds both: counting records
    by timestamp inside each slice is a few array operations, where a Spark job would spend a
    range join, a grouping and a window on it."""
    keys = list(open_slices)
    counts = _counts_in_slices(records, [open_slices[key] for key in keys], keys, k,
                               window_before_ms, window_after_ms)  # fmt: skip
    out = {}
    for key, (n_after_ms, n_before_window, n_after_window) in zip(keys, counts, strict=True):
        s = open_slices[key]
        start, end = s.bounds(k)
        is_ms_covered = end >= s.log_end or n_after_ms >= k + 1
        out[key] = SliceState(
            is_decided=bool(is_full.get(key, False)) and is_ms_covered,
            is_left_closed=start <= s.log_start or n_before_window >= k + 1,
            is_right_closed=end >= s.log_end or n_after_window >= k + 1,
        )
    return out


CHUNK = 1 << 22  # records compared at once: bounds the arrays of a dense search's slices


def _counts_in_slices(
    records: Mapping[TopicPartitionKey, PartitionRecords],
    slices: Sequence[AnchorSlice],
    keys: Sequence[tuple[str, int, int]],
    k: int,
    window_before_ms: int,
    window_after_ms: int,
) -> np.ndarray:
    """Per slice: records at or after its position later than the anchor's millisecond,
    records before its window, records after its window (rows of a (n, 3) array)."""
    out = np.zeros((len(slices), 3), dtype=np.int64)
    by_tp: dict[TopicPartitionKey, list[int]] = defaultdict(list)
    for i, (t, p, _) in enumerate(keys):
        if (t, p) in records:
            by_tp[(t, p)].append(i)
    for tp, members in by_tp.items():
        offs, times = records[tp].offsets, records[tp].timestamps
        idx = np.array(members)
        bounds = np.array([slices[i].bounds(k) for i in members], dtype=np.int64).reshape(-1, 2)
        lo = np.searchsorted(offs, bounds[:, 0])
        hi = np.searchsorted(offs, bounds[:, 1])
        at = np.searchsorted(offs, np.array([slices[i].position for i in members]))
        anchor_ts = np.array([keys[i][2] for i in members], dtype=np.int64)
        lens = hi - lo
        ends = np.cumsum(lens)
        first = 0
        while first < len(members):  # chunks of at most CHUNK records (one slice at least)
            done = int(ends[first - 1]) if first else 0
            last = max(first + 1, int(np.searchsorted(ends, done + CHUNK, side="right")))
            part = slice(first, last)
            n = lens[part]
            owner = np.repeat(np.arange(last - first), n)
            starts = np.cumsum(n) - n
            where = np.arange(n.sum()) - starts[owner] + lo[part][owner]
            t, t0 = times[where], anchor_ts[part][owner]
            for column, hit in enumerate(
                (
                    (where >= at[part][owner]) & (t > t0),
                    t < t0 - window_before_ms,
                    t > t0 + window_after_ms,
                )
            ):
                out[idx[part], column] = np.bincount(owner, weights=hit, minlength=last - first)
            first = last
    return out
