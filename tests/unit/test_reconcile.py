"""Reconcile transforms on tiny inline DataFrames: frontier, placement, D_q and duplicates."""

from __future__ import annotations

import hashlib

import pytest

from ferry.migrate import placement

RECORDS = "topic string, partition int, offset long, timestamp_ms long, sha256 binary"
POSITIONS = "group string, topic string, partition int, committed_offset long, log_end_offset long"
BANDS = "group string, topic string, dst_topic string, band_lo_ms long, band_hi_ms long"
PARTITIONS = "group string, dst_topic string, dst_partition int, dst_log_end_offset long"


def h(name: str) -> bytes:
    return hashlib.sha256(name.encode()).digest()


def reconciled(spark, src, dst, positions, dst_partitions, band=(0, 10_000)):
    """Run every transform; src/dst rows are (partition, offset, ts, name)."""
    src_df = spark.createDataFrame([("t", p, o, ts, h(n)) for p, o, ts, n in src], RECORDS)
    dst_df = spark.createDataFrame([("d", q, o, ts, h(n)) for q, o, ts, n in dst], RECORDS)
    positions_df = spark.createDataFrame(
        [("g", "t", p, c, end) for p, c, end in positions], POSITIONS
    )
    bands_df = spark.createDataFrame([("g", "t", "d", *band)], BANDS)
    partitions_df = spark.createDataFrame(
        [("g", "d", q, end) for q, end in dst_partitions], PARTITIONS
    )
    classes_df = placement.with_source_classes(src_df, positions_df, bands_df)
    counted_df = placement.with_destination_counts(dst_df)
    placed_df = placement.with_placement(counted_df, bands_df, classes_df)
    rows = placement.reconciled_offsets(placed_df, partitions_df).collect()
    missing = placement.missing_consumed(classes_df, counted_df).collect()
    return (
        {r.dst_partition: (r.destination_offset, r.duplicates, r.unplaced) for r in rows},
        {r.group: r.missing for r in missing},
    )


def test_frontier_takes_earliest_unconsumed_and_latest_consumed(spark):
    edges = spark.createDataFrame(
        [
            ("t", 0, 4, 140, h("a")),
            ("t", 0, 5, 150, h("b")),  # first unconsumed on 0
            ("t", 1, 8, 120, h("c")),  # last consumed on 1
            ("t", 1, 9, 190, h("d")),
            ("t", 2, 2, 300, h("e")),  # partition 2 drained at 3
        ],
        RECORDS,
    )
    positions = spark.createDataFrame(
        [("g", "t", 0, 5, 10), ("g", "t", 1, 9, 10), ("g", "t", 2, 3, 3)], POSITIONS
    )
    (f,) = placement.with_frontier(positions, edges).collect()
    assert (f.lo_timestamp_ms, f.lo_partition) == (150, 0)
    assert (f.hi_timestamp_ms, f.hi_partition) == (300, 2)
    assert f.unknown_partition is None


def test_frontier_names_a_partition_with_nothing_read_around_its_offset(spark):
    edges = spark.createDataFrame([("t", 0, 4, 140, h("a"))], RECORDS)
    positions = spark.createDataFrame([("g", "t", 0, 5, 9), ("g", "t", 1, 7, 9)], POSITIONS)
    (f,) = placement.with_frontier(positions, edges).collect()
    assert f.unknown_partition == 1
    assert f.lo_timestamp_ms == 140  # a gap at 5: the last consumed record stands in


def test_time_ordered_copy_resumes_exactly_with_no_duplicates(spark):
    # Source 0: a(10) b(30) | c(50); source 1: x(20) | y(40) z(60). Committed 0->2, 1->1.
    src = [(0, 0, 10, "a"), (0, 1, 30, "b"), (0, 2, 50, "c"), (1, 0, 20, "x"), (1, 1, 40, "y"),
           (1, 2, 60, "z")]  # fmt: skip
    # Destination 0 gets a x c, destination 1 gets b y z (copied in time order).
    dst = [(0, 0, 10, "a"), (0, 1, 20, "x"), (0, 2, 50, "c"), (1, 0, 30, "b"), (1, 1, 40, "y"),
           (1, 2, 60, "z")]  # fmt: skip
    out, missing = reconciled(spark, src, dst, [(0, 2, 3), (1, 1, 3)], [(0, 3), (1, 3), (2, 0)])
    assert out == {0: (2, 0, 0), 1: (1, 0, 0), 2: (0, 0, 0)}
    assert missing == {"g": 0}


def test_uneven_copy_counts_the_duplicates_a_consumer_would_get(spark):
    # Destination 0 got source 0 whole, then source 1: a b c x y. Consumed: a b | x y.
    src = [(0, 0, 10, "a"), (0, 1, 30, "b"), (0, 2, 50, "c"), (1, 0, 20, "x"), (1, 1, 40, "y")]
    dst = [(0, 0, 10, "a"), (0, 1, 30, "b"), (0, 2, 50, "c"), (0, 3, 20, "x"), (0, 4, 40, "y")]
    out, _ = reconciled(spark, src, dst, [(0, 2, 3), (1, 2, 2)], [(0, 5)])
    assert out == {0: (2, 2, 0)}  # resume at c; x and y come again


def test_identical_records_in_one_partition_are_placed_by_occurrence(spark):
    # Three identical records (same hash and millisecond) on source 0, two consumed.
    src = [(0, 0, 10, "same"), (0, 1, 10, "same"), (0, 2, 10, "same"), (0, 3, 20, "after")]
    dst = [(0, 5, 10, "same"), (0, 6, 10, "same"), (0, 7, 10, "same"), (0, 8, 20, "after")]
    out, _ = reconciled(spark, src, dst, [(0, 2, 4)], [(0, 9)])
    assert out == {0: (7, 0, 0)}


def test_identical_records_across_partitions_are_unplaced_when_mixed(spark):
    # The same record on source 0 (consumed) and source 1 (not): which copy is which is
    # unknown, so both count as not consumed — the first one stops D_q.
    src = [(0, 0, 10, "dup"), (1, 0, 10, "dup"), (1, 1, 20, "next")]
    dst = [(0, 0, 10, "dup"), (0, 1, 10, "dup"), (0, 2, 20, "next")]
    out, missing = reconciled(spark, src, dst, [(0, 1, 1), (1, 0, 2)], [(0, 3)])
    assert out == {0: (0, 0, 2)}
    assert missing == {"g": 0}


def test_identical_records_across_partitions_all_consumed_are_consumed(spark):
    src = [(0, 0, 10, "dup"), (1, 0, 10, "dup"), (1, 1, 20, "next")]
    dst = [(0, 0, 10, "dup"), (1, 0, 10, "dup"), (1, 1, 20, "next")]
    out, _ = reconciled(spark, src, dst, [(0, 1, 1), (1, 1, 2)], [(0, 2), (1, 2)])
    assert out == {0: (2, 0, 0), 1: (1, 0, 0)}


def test_record_not_found_on_the_source_is_unplaced_and_stops_the_offset(spark):
    src = [(0, 0, 10, "a"), (0, 1, 20, "b")]
    dst = [(0, 0, 10, "a"), (0, 1, 15, "stranger"), (0, 2, 20, "b")]
    out, _ = reconciled(spark, src, dst, [(0, 2, 2)], [(0, 3)])
    assert out == {0: (1, 1, 1)}  # b would come again: counted, not lost


def test_band_edges_place_by_timestamp(spark):
    src = [(0, 5, 500, "in")]
    dst = [(0, 0, 100, "old"), (0, 1, 500, "in"), (0, 2, 900, "new")]
    out, _ = reconciled(spark, src, dst, [(0, 6, 7)], [(0, 3)], band=(400, 600))
    assert out == {0: (2, 0, 0)}


@pytest.mark.parametrize("copied, expected", [(["a"], 1), (["a", "b"], 0)])
def test_consumed_records_not_yet_copied_are_missing(spark, copied, expected):
    src = [(0, 0, 10, "a"), (0, 1, 20, "b"), (0, 2, 30, "c")]
    dst = [(0, i, 10 * (i + 1), n) for i, n in enumerate(copied)]
    _, missing = reconciled(spark, src, dst, [(0, 2, 3)], [(0, len(copied))])
    assert missing == {"g": expected}
