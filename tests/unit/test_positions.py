"""How positions become spans and how each position finds its next record within a span
(ferry.groups.positions), on plain values and tiny inline DataFrames (no brokers)."""

from __future__ import annotations

import pytest
from chispa import assert_df_equality

from ferry.groups.positions import plan_spans, resolve_in_span, with_next_records
from ferry.kafka.source import OffsetRange

T0 = 1_700_000_000_000


def test_positions_of_a_partition_share_spans_cut_at_gaps_wider_than_max_gap() -> None:
    positions = [("t", 0, o) for o in (5, 3, 3, 20, 30, 131, 400)] + [("t", 1, 7), ("u", 0, 0)]
    assert plan_spans(positions, max_gap=100) == {
        OffsetRange("t", 0, 3, 31): [3, 5, 20, 30],  # duplicates count once
        OffsetRange("t", 0, 131, 132): [131],  # 30 -> 131 is 101 apart
        OffsetRange("t", 0, 400, 401): [400],
        OffsetRange("t", 1, 7, 8): [7],
        OffsetRange("u", 0, 0, 1): [0],
    }


def test_max_gap_is_inclusive_and_zero_gap_keeps_only_equal_positions_together() -> None:
    assert plan_spans([("t", 0, 0), ("t", 0, 10), ("t", 0, 21)], max_gap=10) == {
        OffsetRange("t", 0, 0, 11): [0, 10],
        OffsetRange("t", 0, 21, 22): [21],
    }
    assert plan_spans([("t", 0, 4), ("t", 0, 4), ("t", 0, 5)], max_gap=0) == {
        OffsetRange("t", 0, 4, 5): [4],
        OffsetRange("t", 0, 5, 6): [5],
    }
    assert plan_spans([]) == {}
    with pytest.raises(ValueError):
        plan_spans([("t", 0, 1)], max_gap=-1)


def test_each_position_takes_the_first_record_at_or_after_it() -> None:
    # Offsets 2-3 and 6 are missing (a compaction gap, a transaction marker).
    records = [(0, T0), (1, T0 + 1), (4, T0 + 4), (5, T0 + 5), (7, T0 + 7)]
    assert resolve_in_span([0, 2, 3, 4, 6, 7], records) == {
        0: (0, T0),
        2: (4, T0 + 4),
        3: (4, T0 + 4),
        4: (4, T0 + 4),
        6: (7, T0 + 7),
        7: (7, T0 + 7),
    }
    # Past the last record read: unresolved, left out for the caller to read forward.
    assert resolve_in_span([5, 8, 9], records) == {5: (5, T0 + 5)}
    assert resolve_in_span([1], []) == {}


POSITIONS = "topic string, partition int, position bigint, span_end bigint"
RECORDS = "topic string, partition int, offset bigint, timestamp_ms bigint"
RESOLVED = (
    "topic string, partition int, position bigint, span_end bigint, next_offset bigint, "
    "next_timestamp_ms bigint"
)


def test_spark_merge_matches_the_sorted_merge_and_stays_inside_the_span(spark) -> None:
    positions_df = spark.createDataFrame(
        [
            ("t", 0, 0, 8),
            ("t", 0, 2, 8),  # gap at 2-3: record 4
            ("t", 0, 4, 8),  # at a record: that record
            ("t", 0, 7, 8),  # the span's last offset is missing: unresolved
            ("t", 0, 20, 23),  # a second span of the same partition
            ("t", 0, 22, 23),
            ("t", 1, 4, 5),  # same offset on another partition
            ("u", 0, 0, 1),  # no record read at all
        ],
        POSITIONS,
    )
    records_df = spark.createDataFrame(
        [("t", 0, o, T0 + o) for o in (0, 1, 4, 5, 20, 22, 23)]  # 23: read past a span's end
        + [("t", 1, 3, T0), ("t", 1, 4, T0 + 40)],
        RECORDS,
    )
    expected_df = spark.createDataFrame(
        [
            ("t", 0, 0, 8, 0, T0),
            ("t", 0, 2, 8, 4, T0 + 4),
            ("t", 0, 4, 8, 4, T0 + 4),
            ("t", 0, 7, 8, None, None),  # record 20 exists, but 8-19 were never read
            ("t", 0, 20, 23, 20, T0 + 20),
            ("t", 0, 22, 23, 22, T0 + 22),
            ("t", 1, 4, 5, 4, T0 + 40),
            ("u", 0, 0, 1, None, None),
        ],
        RESOLVED,
    )
    assert_df_equality(
        with_next_records(positions_df, records_df),
        expected_df,
        ignore_row_order=True,
        ignore_nullable=True,
    )
