"""How positions become spans and how each position finds its next record among the records
read (ferry.groups.positions), on plain values and tiny inline DataFrames (no brokers)."""

from __future__ import annotations

import pytest
from chispa import assert_df_equality

from ferry.groups.positions import plan_spans, with_next_records
from ferry.kafka import OffsetRange

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


POSITIONS = "topic string, partition int, position bigint"
RECORDS = "topic string, partition int, offset bigint, timestamp_ms bigint"
RESOLVED = (
    "topic string, partition int, position bigint, next_offset bigint, next_timestamp_ms bigint"
)


def test_each_position_takes_the_first_record_read_at_or_after_it(spark) -> None:
    positions_df = spark.createDataFrame(
        [
            ("t", 0, 0),
            ("t", 0, 2),  # gap at 2-3: record 4
            ("t", 0, 4),  # at a record: that record
            ("t", 0, 7),  # a span ending in a gap was read on to its next record, 20
            ("t", 0, 20),  # a second span of the same partition
            ("t", 0, 22),
            ("t", 0, 24),  # read to the partition's end: no next record
            ("t", 1, 4),  # same offset on another partition
            ("u", 0, 0),  # no record read at all
        ],
        POSITIONS,
    )
    records_df = spark.createDataFrame(
        [("t", 0, o, T0 + o) for o in (0, 1, 4, 5, 20, 20, 22, 23)]  # 20 twice: read on to,
        + [("t", 1, 3, T0), ("t", 1, 4, T0 + 40)],  # and the next span's first record
        RECORDS,
    )
    expected_df = spark.createDataFrame(
        [
            ("t", 0, 0, 0, T0),
            ("t", 0, 2, 4, T0 + 4),
            ("t", 0, 4, 4, T0 + 4),
            ("t", 0, 7, 20, T0 + 20),
            ("t", 0, 20, 20, T0 + 20),
            ("t", 0, 22, 22, T0 + 22),
            ("t", 0, 24, None, None),
            ("t", 1, 4, 4, T0 + 40),
            ("u", 0, 0, None, None),
        ],
        RESOLVED,
    )
    assert_df_equality(
        with_next_records(positions_df, records_df),
        expected_df,
        ignore_row_order=True,
        ignore_nullable=True,
    )
