"""Reconcile: where a group resumes on a destination topic whose records do not sit in the
same partitions as on the source (another partition count, re-partitioned by the replicator).

A group's consumed set S is every source record before its committed offset C_p, on every
source partition p. For each destination partition q the reconciled offset D_q is the first
record on q that is not in S (the end of what was read when every record is in S); the
duplicates of q are the records at or after D_q that are in S — what its consumers will
receive a second time.

`with_placement` finds them per group × destination partition, in one pass over the
partition's records (identified by `ferry.migrate.copies`) for every group: each copy is
consumed exactly when its source offset is below C_p, so the first unconsumed copy of each
source partition is found by a search over its copies ordered by source offset, not a join per
group; special records are consumed when all their sources are, not consumed when none are,
otherwise unplaced; a record not found on the source is consumed before the group's band, not
consumed after it, and unplaced inside it. Unplaced records count as not consumed (no loss,
maybe a duplicate more). It also says whether the slice read is enough (docs/matching.md,
"Enough has been read").

Assumes the replicator keeps record timestamps (CreateTime) and each source partition's order,
and that timestamps on each partition are out of order by less than the matching windows.
"""

from __future__ import annotations

from functools import partial

import numpy as np
import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from ferry.migrate.copies import COPIES_COLUMNS, COPY, SPECIAL

NO_TIME_BEFORE = -(2**62)  # "no last consumed record": older than any timestamp
NO_TIME_AFTER = 2**62  # "no first unconsumed record": newer than any timestamp
_END = np.iinfo(np.int64).max

# One row per group × destination partition: what `with_placement` needs to place the
# partition's records for that group. Per-source-partition values are arrays indexed by p.
GROUPS_SCHEMA = StructType(
    [
        StructField("group", StringType(), False),
        StructField("dst_topic", StringType(), False),
        StructField("dst_partition", IntegerType(), False),
        *(
            StructField(name, LongType(), False)
            for name in (
                "slice_start",  # the offsets read for the group's frontier on this partition
                "slice_end",
                "log_start",
                "log_end",
                "frontier_lo_ms",  # min(lo, hi): consumed and unconsumed records meet from here
                "frontier_hi_ms",  # max(lo, hi) ... to here
                "band_lo_ms",  # frontier_lo_ms - window_before_ms
                "band_hi_ms",  # frontier_hi_ms + window_after_ms
                "covered_lo_ms",  # every source partition read for these milliseconds
                "covered_hi_ms",
            )
        ),
        StructField("committed", ArrayType(LongType(), False), False),
        StructField("src_log_start", ArrayType(LongType(), False), False),
        StructField("src_log_end", ArrayType(LongType(), False), False),
        StructField("last_consumed_ms", ArrayType(LongType(), False), False),
        StructField("first_unconsumed_ms", ArrayType(LongType(), False), False),
        StructField("is_replicated", ArrayType(BooleanType(), False), False),
    ]
)
PLACED_SCHEMA = StructType(
    [
        StructField("group", StringType(), False),
        StructField("dst_topic", StringType(), False),
        StructField("dst_partition", IntegerType(), False),
        StructField("destination_offset", LongType(), False),
        StructField("duplicates", LongType(), False),
        StructField("unplaced", LongType(), False),
        StructField("records_read", LongType(), False),
        StructField("is_left_closed", BooleanType(), False),
        StructField("is_right_closed", BooleanType(), False),
    ]
)


def with_placement(
    copies_df: DataFrame, groups_df: DataFrame, window_before_ms: int, window_after_ms: int
) -> DataFrame:
    """D_q, duplicates and unplaced records per group × destination partition (PLACED_SCHEMA),
    each group over its own slice, and whether each side of the slice has read enough.

    copies_df: `with_copies`. groups_df: GROUPS_SCHEMA, one row per group × destination
    partition (a partition with nothing read resumes at its slice's end)."""
    place = partial(_place_partition, before_ms=window_before_ms, after_ms=window_after_ms)
    records = copies_df.select(*COPIES_COLUMNS).groupBy("dst_topic", "dst_partition")
    groups = groups_df.groupBy("dst_topic", "dst_partition")
    return records.cogroup(groups).applyInPandas(place, PLACED_SCHEMA)


def _matrix(column: pd.Series, dtype: type) -> np.ndarray:
    """An array column (one array per row, all the same length) as a rows × length matrix."""
    if len(column) == 0:
        return np.zeros((0, 0), dtype=dtype)
    return np.stack([np.asarray(v, dtype=dtype) for v in column])


def _at(values: np.ndarray, index: np.ndarray, default: int) -> np.ndarray:
    """values[index] where index is in range, else default."""
    if len(values) == 0:
        return np.full(len(index), default, dtype=np.int64)
    return np.where(index < len(values), values[np.minimum(index, len(values) - 1)], default)


def _place_partition(
    key: tuple,
    records: pd.DataFrame,
    groups: pd.DataFrame,
    before_ms: int,
    after_ms: int,
) -> pd.DataFrame:
    """Every group's placement on one destination partition (see `with_placement`)."""
    if groups.empty:
        return pd.DataFrame(columns=[f.name for f in PLACED_SCHEMA.fields])
    records = records.sort_values("offset", kind="stable")
    off = records["offset"].to_numpy(np.int64)
    ts = records["timestamp_ms"].to_numpy(np.int64)
    kind = records["kind"].to_numpy(object)
    src_p = records["src_partition"].fillna(-1).to_numpy(np.int64)
    src_o = records["src_offset"].fillna(-1).to_numpy(np.int64)

    a, b = groups["slice_start"].to_numpy(np.int64), groups["slice_end"].to_numpy(np.int64)
    lo = groups["frontier_lo_ms"].to_numpy(np.int64)
    hi = groups["frontier_hi_ms"].to_numpy(np.int64)
    committed = _matrix(groups["committed"], np.int64)
    first_unconsumed = _matrix(groups["first_unconsumed_ms"], np.int64)
    last_consumed = _matrix(groups["last_consumed_ms"], np.int64)
    is_replicated = _matrix(groups["is_replicated"], bool)
    consumed_all = committed >= _matrix(groups["src_log_end"], np.int64)
    consumed_none = committed <= _matrix(groups["src_log_start"], np.int64)

    ia, ib = np.searchsorted(off, a), np.searchsorted(off, b)
    n_read = ib - ia
    # The slice's first and last records stand for its oldest and newest (a record out of
    # order inside the slice only makes a side look less finished: it is read further).
    first_ts = _at(ts, ia, NO_TIME_AFTER)
    last_ts = np.where(n_read > 0, _at(ts, ib - 1, NO_TIME_BEFORE), NO_TIME_BEFORE)
    first_ts = np.where(n_read > 0, first_ts, NO_TIME_AFTER)

    d = np.full(len(groups), _END, dtype=np.int64)
    left_ok = np.ones(len(groups), dtype=bool)
    right_ok = np.ones(len(groups), dtype=bool)
    per_source = []
    is_copy = kind == COPY
    for p in range(committed.shape[1]):
        mask = is_copy & (src_p == p)
        dst_offsets, src_offsets, stamps = off[mask], src_o[mask], ts[mask]
        ja, jb = np.searchsorted(dst_offsets, a), np.searchsorted(dst_offsets, b)
        c = committed[:, p]
        if np.all(np.diff(src_offsets) >= 0):  # the replicator kept p's order
            j = np.clip(np.searchsorted(src_offsets, c), ja, jb)
            is_monotone = True
        else:  # order broken: place every copy by its offset, and trust no edge evidence
            j = np.array(
                [
                    ja[g] + int(np.argmax(np.append(src_offsets[ja[g] : jb[g]] >= c[g], True)))
                    for g in range(len(groups))
                ],
                dtype=np.int64,
            )
            is_monotone = False
        d = np.minimum(d, np.where(j < jb, _at(dst_offsets, j, _END), _END))
        has_copies = jb > ja
        if is_monotone:
            # (c) a consumed copy of p older than the frontier opens the slice's left side:
            # every copy of p before it is of an older record; (c) any unconsumed copy of p
            # closes the right side: every copy of p after it is of a later, unconsumed record
            # (p's order), whatever its timestamp. The right side moves no D_q, it only ends
            # the count of duplicates (docs/matching.md, "Enough has been read").
            seen_old = (j > ja) & (_at(stamps, ja, NO_TIME_AFTER) < lo)
            seen_new = j < jb
        else:
            seen_old = seen_new = np.zeros(len(groups), dtype=bool)
        # (d) a record more than a window away from p's own frontier: nothing of p can lie
        # beyond it (timestamps are out of order by less than the windows).
        far_before = first_ts < first_unconsumed[:, p] - before_ms
        far_after = last_ts > last_consumed[:, p] + after_ms
        left_ok &= consumed_all[:, p] | seen_old | far_before
        right_ok &= consumed_none[:, p] | seen_new | far_after
        # PENDING is decided only where a consumed record's copy would have been read.
        left_ok &= is_replicated[:, p] | has_copies | (first_ts < last_consumed[:, p] - before_ms)
        per_source.append((dst_offsets, src_offsets, ja, j, jb, c, is_monotone))

    others = _others(records[~is_copy], groups, a, b, lo, hi, committed)
    for g, (offsets, states) in others.items():
        not_consumed = offsets[states != _CONSUMED]
        if len(not_consumed):
            d[g] = min(d[g], not_consumed[0])
    d = np.where(d == _END, b, d)

    duplicates = np.zeros(len(groups), dtype=np.int64)
    for dst_offsets, src_offsets, ja, j, jb, c, is_monotone in per_source:
        k = np.searchsorted(dst_offsets, d)
        if is_monotone:
            duplicates += np.maximum(0, j - np.maximum(ja, k))
        else:
            for g in range(len(groups)):
                part = slice(max(ja[g], k[g]), jb[g])
                duplicates[g] += int(np.sum(src_offsets[part] < c[g]))
    unplaced = np.zeros(len(groups), dtype=np.int64)
    for g, (offsets, states) in others.items():
        past = offsets >= d[g]
        duplicates[g] += int(np.sum(past & (states == _CONSUMED)))
        unplaced[g] += int(np.sum(past & (states == _UNPLACED)))

    return pd.DataFrame(
        {
            "group": groups["group"].to_numpy(object),
            "dst_topic": groups["dst_topic"].to_numpy(object),
            "dst_partition": groups["dst_partition"].to_numpy(np.int32),
            "destination_offset": d,
            "duplicates": duplicates,
            "unplaced": unplaced,
            "records_read": n_read.astype(np.int64),
            "is_left_closed": (a <= groups["log_start"].to_numpy(np.int64)) | left_ok,
            "is_right_closed": (b >= groups["log_end"].to_numpy(np.int64)) | right_ok,
        }
    )


_CONSUMED, _UNCONSUMED, _UNPLACED = 0, 1, 2


def _others(
    records: pd.DataFrame,
    groups: pd.DataFrame,
    a: np.ndarray,
    b: np.ndarray,
    lo: np.ndarray,
    hi: np.ndarray,
    committed: np.ndarray,
) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Special and not-found records in each group's slice: group → (offsets, states). Few:
    identical records over several partitions, re-sends, records the replicator did not copy
    from the source (and records read outside a band)."""
    if records.empty:
        return {}
    off = records["offset"].to_numpy(np.int64)
    ts = records["timestamp_ms"].to_numpy(np.int64)
    is_special = (records["kind"] == SPECIAL).to_numpy(bool)
    sources = [
        (np.asarray(sp, dtype=np.int64), np.asarray(so, dtype=np.int64)) if special else None
        for sp, so, special in zip(
            records["source_partitions"], records["source_offsets"], is_special, strict=True
        )
    ]
    band_lo, band_hi = (
        groups["band_lo_ms"].to_numpy(np.int64),
        groups["band_hi_ms"].to_numpy(np.int64),
    )
    covered_lo = groups["covered_lo_ms"].to_numpy(np.int64)
    covered_hi = groups["covered_hi_ms"].to_numpy(np.int64)
    ia, ib = np.searchsorted(off, a), np.searchsorted(off, b)
    out = {}
    for g in np.flatnonzero(ib > ia):
        part = slice(ia[g], ib[g])
        t = ts[part]
        # Not found on the source: older than the band is consumed, newer is not; inside it,
        # a record the source was read for is unplaced (not copied from the source), one it
        # was not read for is placed by the frontier (older: consumed, newer: not).
        states = np.where(
            t < band_lo[g],
            _CONSUMED,
            np.where(
                t > band_hi[g],
                _UNCONSUMED,
                np.where(
                    (t >= covered_lo[g]) & (t <= covered_hi[g]),
                    _UNPLACED,
                    np.where(t < lo[g], _CONSUMED, np.where(t > hi[g], _UNCONSUMED, _UNPLACED)),
                ),
            ),
        )
        for i in np.flatnonzero(is_special[part]):
            sp, so = sources[ia[g] + i]
            consumed = int(np.sum(so < committed[g][sp]))
            states[i] = (
                _CONSUMED if consumed == len(so) else _UNCONSUMED if consumed == 0 else _UNPLACED
            )
        out[int(g)] = (off[part], states)
    return out
