"""Reconcile transforms on tiny inline DataFrames: frontier, identification, placement (D_q,
duplicates, unplaced), whether a slice has read enough, and PENDING."""

from __future__ import annotations

import hashlib

import pytest

from ferry.migrate import copies, placement, replication
from ferry.migrate.frontier import GroupFrontier, with_frontier, with_partition_frontier
from ferry.migrate.replication import is_replicated
from ferry.session import local_df

RECORDS = "topic string, partition int, offset long, timestamp_ms long, sha256 binary"
POSITIONS = "group string, topic string, partition int, committed_offset long, log_end_offset long"
PENDING = (
    "group string, topic string, partition int, after_offset long, committed_offset long, "
    "band_lo_ms long"
)
W = 1_000  # both matching windows


def h(name: str) -> bytes:
    return hashlib.sha256(name.encode()).digest()


def records_df(spark, topic: str, rows):  # noqa: ANN001, ANN201
    """rows: (partition, offset, ts, name)."""
    return spark.createDataFrame([(topic, p, o, ts, h(n)) for p, o, ts, n in rows], RECORDS)


def place(
    spark,
    src,
    dst,
    positions,
    dst_partitions,
    band=(0, 10_000),
    frontier=None,
    slices=None,
    replicated=None,
    groups=None,
):
    """Run identification and placement.

    src/dst rows are (partition, offset, ts, name); positions (p, committed, log end);
    dst_partitions (q, log end), each read whole unless `slices` gives q → (start, end);
    frontier (lo, hi) defaults to the band; `groups` maps more group names to their positions
    (all placed in the same pass). Returns group → q → (D_q, duplicates, unplaced, left closed,
    right closed), or for a single group just q → (D_q, duplicates, unplaced)."""
    src_df, dst_df = records_df(spark, "t", src), records_df(spark, "d", dst)
    copies_df = copies.with_copies(dst_df, src_df, {"t": "d"})
    lo, hi = frontier or band
    ts_at = {(p, o): ts for p, o, ts, _ in src}
    rows = []
    for group, pos in (groups or {"g": positions}).items():
        committed = [c for _, c, _ in pos]
        last = [ts_at.get((p, c - 1), placement.NO_TIME_BEFORE) for p, c, _ in pos]
        first = [ts_at.get((p, c), placement.NO_TIME_AFTER) for p, c, _ in pos]
        for q, end in dst_partitions:
            start, stop = (slices or {}).get(q, (0, end))
            rows.append(
                (group, "d", q, start, stop, 0, end, lo, hi, *band, *band, committed,
                 [0] * len(pos), [e for _, _, e in pos], last, first,
                 replicated or [True] * len(pos))
            )  # fmt: skip
    groups_df = local_df(spark, rows, placement.GROUPS_SCHEMA)
    out: dict[str, dict[int, tuple]] = {}
    for r in placement.with_placement(copies_df, groups_df, W, W).collect():
        out.setdefault(r.group, {})[r.dst_partition] = (
            r.destination_offset,
            r.duplicates,
            r.unplaced,
            r.is_left_closed,
            r.is_right_closed,
        )
    if groups is None:
        return {q: v[:3] for q, v in out["g"].items()}
    return out


def test_frontier_takes_earliest_unconsumed_and_latest_consumed(spark):
    edges = records_df(
        spark,
        "t",
        [(0, 4, 140, "a"), (0, 5, 150, "b"), (1, 8, 120, "c"), (1, 9, 190, "d"), (2, 2, 300, "e")],
    )
    positions = spark.createDataFrame(
        [("g", "t", 0, 5, 10), ("g", "t", 1, 9, 10), ("g", "t", 2, 3, 3)], POSITIONS
    )
    (f,) = with_frontier(positions, edges).collect()
    assert (f.lo_timestamp_ms, f.lo_partition) == (150, 0)  # first unconsumed on 0
    assert (f.hi_timestamp_ms, f.hi_partition) == (300, 2)  # partition 2 drained at 3
    assert f.unknown_partition is None
    per = {r.partition: r for r in with_partition_frontier(positions, edges).collect()}
    assert (per[0].last_ts, per[0].last_offset, per[0].next_ts) == (140, 4, 150)
    assert (per[2].last_ts, per[2].next_ts) == (300, None)


def test_frontier_names_a_partition_with_nothing_read_around_its_offset(spark):
    edges = records_df(spark, "t", [(0, 4, 140, "a")])
    positions = spark.createDataFrame([("g", "t", 0, 5, 9), ("g", "t", 1, 7, 9)], POSITIONS)
    (f,) = with_frontier(positions, edges).collect()
    assert f.unknown_partition == 1
    assert f.lo_timestamp_ms == 140  # a gap at 5: the last consumed record stands in


def test_copies_are_identified_once_for_every_group(spark):
    src = [(0, 0, 10, "a"), (0, 1, 10, "same"), (0, 2, 10, "same"), (1, 0, 20, "dup"),
           (0, 3, 20, "dup"), (1, 1, 30, "once")]  # fmt: skip
    dst = [(0, 0, 10, "a"), (0, 1, 10, "same"), (0, 2, 10, "same"), (1, 0, 20, "dup"),
           (2, 0, 20, "dup"), (1, 1, 30, "once"), (2, 1, 30, "once"),
           (2, 2, 40, "stranger")]  # fmt: skip
    got = {
        (r.dst_partition, r.offset): (r.kind, r.src_partition, r.src_offset, r.source_partitions)
        for r in copies.with_copies(
            records_df(spark, "d", dst), records_df(spark, "t", src), {"t": "d"}
        ).collect()
    }
    assert got[(0, 0)] == ("copy", 0, 0, None)
    assert (got[(0, 1)], got[(0, 2)]) == (("copy", 0, 1, None), ("copy", 0, 2, None))  # in order
    assert got[(1, 0)][0] == got[(2, 0)][0] == "special"  # on two source partitions
    assert sorted(got[(1, 0)][3]) == [0, 1]
    assert got[(1, 1)][0] == "special"  # two copies of one record: a re-send
    assert got[(2, 2)] == ("not_found", None, None, None)


def test_time_ordered_copy_resumes_exactly_with_no_duplicates(spark):
    # Source 0: a(10) b(30) | c(50); source 1: x(20) | y(40) z(60). Committed 0->2, 1->1.
    src = [(0, 0, 10, "a"), (0, 1, 30, "b"), (0, 2, 50, "c"), (1, 0, 20, "x"), (1, 1, 40, "y"),
           (1, 2, 60, "z")]  # fmt: skip
    # Destination 0 gets a x c, destination 1 gets b y z (copied in time order).
    dst = [(0, 0, 10, "a"), (0, 1, 20, "x"), (0, 2, 50, "c"), (1, 0, 30, "b"), (1, 1, 40, "y"),
           (1, 2, 60, "z")]  # fmt: skip
    out = place(spark, src, dst, [(0, 2, 3), (1, 1, 3)], [(0, 3), (1, 3), (2, 0)])
    assert out == {0: (2, 0, 0), 1: (1, 0, 0), 2: (0, 0, 0)}


def test_uneven_copy_counts_the_duplicates_a_consumer_would_get(spark):
    # Destination 0 got source 0 whole, then source 1: a b c x y. Consumed: a b | x y.
    src = [(0, 0, 10, "a"), (0, 1, 30, "b"), (0, 2, 50, "c"), (1, 0, 20, "x"), (1, 1, 40, "y")]
    dst = [(0, 0, 10, "a"), (0, 1, 30, "b"), (0, 2, 50, "c"), (0, 3, 20, "x"), (0, 4, 40, "y")]
    out = place(spark, src, dst, [(0, 2, 3), (1, 2, 2)], [(0, 5)])
    assert out == {0: (2, 2, 0)}  # resume at c; x and y come again


def test_identical_records_in_one_partition_are_placed_by_occurrence(spark):
    # Three identical records (same hash and millisecond) on source 0, two consumed.
    src = [(0, 0, 10, "same"), (0, 1, 10, "same"), (0, 2, 10, "same"), (0, 3, 20, "after")]
    dst = [(0, 5, 10, "same"), (0, 6, 10, "same"), (0, 7, 10, "same"), (0, 8, 20, "after")]
    assert place(spark, src, dst, [(0, 2, 4)], [(0, 9)]) == {0: (7, 0, 0)}


def test_identical_records_with_a_copy_not_read_are_not_told_apart(spark):
    # Only two of the three copies read: which source record each is cannot be known.
    src = [(0, 0, 10, "same"), (0, 1, 10, "same"), (0, 2, 10, "same"), (0, 3, 20, "after")]
    dst = [(0, 6, 10, "same"), (0, 7, 10, "same"), (0, 8, 20, "after")]
    assert place(spark, src, dst, [(0, 2, 4)], [(0, 9)], slices={0: (6, 9)}) == {0: (6, 0, 2)}


def test_identical_records_across_partitions_are_unplaced_when_mixed(spark):
    # The same record on source 0 (consumed) and source 1 (not): which copy is which is
    # unknown, so both count as not consumed — the first one stops D_q.
    src = [(0, 0, 10, "dup"), (1, 0, 10, "dup"), (1, 1, 20, "next")]
    dst = [(0, 0, 10, "dup"), (0, 1, 10, "dup"), (0, 2, 20, "next")]
    assert place(spark, src, dst, [(0, 1, 1), (1, 0, 2)], [(0, 3)]) == {0: (0, 0, 2)}


def test_identical_records_across_partitions_all_consumed_are_consumed(spark):
    src = [(0, 0, 10, "dup"), (1, 0, 10, "dup"), (1, 1, 20, "next")]
    dst = [(0, 0, 10, "dup"), (1, 0, 10, "dup"), (1, 1, 20, "next")]
    out = place(spark, src, dst, [(0, 1, 1), (1, 1, 2)], [(0, 2), (1, 2)])
    assert out == {0: (2, 0, 0), 1: (1, 0, 0)}


def test_record_not_found_on_the_source_is_unplaced_and_stops_the_offset(spark):
    src = [(0, 0, 10, "a"), (0, 1, 20, "b")]
    dst = [(0, 0, 10, "a"), (0, 1, 15, "stranger"), (0, 2, 20, "b")]
    out = place(spark, src, dst, [(0, 2, 2)], [(0, 3)])
    assert out == {0: (1, 1, 1)}  # b would come again: counted, not lost


def test_band_edges_place_by_timestamp(spark):
    src = [(0, 5, 500, "in")]
    dst = [(0, 0, 100, "old"), (0, 1, 500, "in"), (0, 2, 900, "new")]
    assert place(spark, src, dst, [(0, 6, 7)], [(0, 3)], band=(400, 600)) == {0: (2, 0, 0)}


def test_many_groups_are_placed_in_one_pass(spark):
    # a x b y c z on one destination partition (time order); three groups stopped at
    # different points, one of them unevenly.
    src = [(0, 0, 10, "a"), (0, 1, 30, "b"), (0, 2, 50, "c"), (1, 0, 20, "x"), (1, 1, 40, "y"),
           (1, 2, 60, "z")]  # fmt: skip
    dst = [(0, 0, 10, "a"), (0, 1, 20, "x"), (0, 2, 30, "b"), (0, 3, 40, "y"), (0, 4, 50, "c"),
           (0, 5, 60, "z")]  # fmt: skip
    groups = {
        "early": [(0, 1, 3), (1, 1, 3)],  # a x
        "late": [(0, 3, 3), (1, 2, 3)],  # a x b y c
        "uneven": [(0, 0, 3), (1, 3, 3)],  # x y z
    }
    out = place(spark, src, dst, None, [(0, 6)], groups=groups)
    assert {g: v[0][:3] for g, v in out.items()} == {
        "early": (2, 0, 0),
        "late": (5, 0, 0),
        "uneven": (0, 3, 0),  # resume at a: x y z come again
    }


# -- enough read --------------------------------------------------------------------------
# One destination partition with both source partitions' copies interleaved in time order
# (p0 even milliseconds, p1 odd), 10 records each; the group stopped at 10: a slice from 4 to
# 16 holds consumed copies of both partitions older than the frontier and unconsumed copies of
# both newer than it.
INTERLEAVED_SRC = [(i % 2, i // 2, 10 * i, f"r{i}") for i in range(20)]
INTERLEAVED_DST = [(0, i, 10 * i, f"r{i}") for i in range(20)]
AT_TEN = [(0, 5, 10), (1, 5, 10)]  # committed offsets: records 0..9 consumed
FRONTIER = (90, 100)  # last consumed at 90, first unconsumed at 100


def closed(spark, src, dst, positions, slice_bounds, frontier=FRONTIER, **kw):  # noqa: ANN001, ANN201
    out = place(spark, src, dst, None, [(0, len(dst))], band=(-W, 2 * W), frontier=frontier,
                slices={0: slice_bounds}, groups={"g": positions}, **kw)  # fmt: skip
    d, dups, unplaced, left, right = out["g"][0]
    return (d, dups, unplaced), (left, right)


def test_a_slice_with_old_and_new_copies_of_every_source_partition_has_read_enough(spark):
    placed, sides = closed(spark, INTERLEAVED_SRC, INTERLEAVED_DST, AT_TEN, (4, 16))
    assert placed == (10, 0, 0)
    assert sides == (True, True)


def test_a_side_without_a_copy_of_some_source_partition_is_open(spark):
    # From 9: the oldest copy of p0 in the slice (record 10) is not consumed: a copy of p0
    # the group has not consumed may sit before the slice.
    _, sides = closed(spark, INTERLEAVED_SRC, INTERLEAVED_DST, AT_TEN, (9, 16))
    assert sides == (False, True)
    # Up to 11: no unconsumed copy of p1 (record 11 ends the slice's copies of p1 at 9).
    _, sides = closed(spark, INTERLEAVED_SRC, INTERLEAVED_DST, AT_TEN, (4, 11))
    assert sides == (True, False)


def test_a_source_partition_copied_late_keeps_the_right_side_open_until_its_copies(spark):
    # p1's records are copied 6 records late: on the destination after p0's newer ones.
    order = [f"r{i}" for i in range(20) if i % 2 == 0]
    late = [f"r{i}" for i in range(20) if i % 2 == 1]
    names = []
    for i, name in enumerate(order):
        names.append(name)
        if i >= 3:
            names.append(late[i - 3])
    names += late[len(order) - 3 :]
    dst = [(0, o, int(n[1:]) * 10, n) for o, n in enumerate(names)]
    where = {n: o for o, n in enumerate(names)}
    narrow = (where["r6"], where["r12"] + 1)  # around the frontier by time
    placed, sides = closed(spark, INTERLEAVED_SRC, dst, AT_TEN, narrow)
    assert sides[1] is False  # p1's consumed copies may lie after it
    wide = (where["r6"], where["r15"] + 1)  # now holds p1's record 11: unconsumed, newer
    placed, sides = closed(spark, INTERLEAVED_SRC, dst, AT_TEN, wide)
    assert sides == (True, True)
    d = where["r10"]
    assert placed == (d, sum(1 for n in names[d:] if int(n[1:]) < 10), 0)


# A group stopped inside a millisecond: two records per source partition and millisecond
# (10, 20, 30), committed at offset 3 on both — the second record of millisecond 20 is the first
# unconsumed one, so the frontier is lo = hi = 20 and the unconsumed copies near it carry
# ts == hi, none newer.
MID_MS_SRC = [(p, o, 10 * (1 + o // 2), f"p{p}o{o}") for p in range(2) for o in range(6)]
MID_MS = [(0, 3, 6), (1, 3, 6)]
MID_MS_FRONTIER = (20, 20)


def mid_ms_dst(names: list[str]) -> list[tuple[int, int, int, str]]:
    ts = {n: t for _, _, t, n in MID_MS_SRC}
    return [(0, o, ts[n], n) for o, n in enumerate(names)]


# p1 copied late: its records 0-3 after p0's record 3 (the first unconsumed one of p0).
P1_COPIED_LATE = ["p0o0", "p0o1", "p0o2", "p0o3", "p1o0", "p1o1", "p1o2", "p1o3", "p0o4", "p0o5",
                  "p1o4", "p1o5"]  # fmt: skip


def test_an_unconsumed_copy_at_the_frontiers_millisecond_closes_the_right_side(spark):
    # Copied in time order (millisecond, source partition): p1's consumed record 2 follows
    # p0's unconsumed record 3 inside millisecond 20 — one duplicate. The slice ends at the
    # last record of millisecond 20: every source partition has an unconsumed copy in it, so
    # no consumed copy can follow (p's order), though none is newer than the frontier.
    names = ["p0o0", "p0o1", "p1o0", "p1o1", "p0o2", "p0o3", "p1o2", "p1o3", "p0o4", "p0o5",
             "p1o4", "p1o5"]  # fmt: skip
    dst = mid_ms_dst(names)
    whole = closed(spark, MID_MS_SRC, dst, MID_MS, (0, 12), frontier=MID_MS_FRONTIER)
    placed, sides = closed(spark, MID_MS_SRC, dst, MID_MS, (1, 8), frontier=MID_MS_FRONTIER)
    assert sides == (True, True)
    assert placed == whole[0] == (5, 1, 0)  # resume at p0's record 3; p1's record 2 again


def test_a_lagging_partitions_consumed_copies_after_the_offset_are_counted(spark):
    # p1 is copied late: its consumed records 0-2 come after p0's first unconsumed one (D_q),
    # then its unconsumed record 3 (ts == hi) ends the slice. All three are duplicates, and
    # the side is closed: nothing of p1 after the slice can be consumed.
    dst = mid_ms_dst(P1_COPIED_LATE)
    placed, sides = closed(spark, MID_MS_SRC, dst, MID_MS, (1, 8), frontier=MID_MS_FRONTIER)
    assert sides == (True, True)
    assert placed == (3, 3, 0)


@pytest.mark.parametrize("end", [6, 7])
def test_no_unconsumed_copy_of_a_partition_keeps_the_right_side_open(spark, end):
    # The same lagging copy, the slice ending before p1's unconsumed record 3: every copy of
    # p1 it holds is consumed, so more may follow (to 6: record 2 does, a duplicate this slice
    # cannot count yet).
    dst = mid_ms_dst(P1_COPIED_LATE)
    placed, sides = closed(spark, MID_MS_SRC, dst, MID_MS, (1, end), frontier=MID_MS_FRONTIER)
    assert sides == (True, False)
    assert placed == (3, end - 4, 0)


def test_far_timestamps_close_a_side_where_a_partition_has_no_copies(spark):
    # p1 went quiet long ago (one record at -5000, consumed): nothing of it near the frontier.
    src = [(0, i, 10 * i, f"r{i}") for i in range(20)] + [(1, 0, -5 * W, "old")]
    dst = [(0, 0, -5 * W, "old")] + [(0, i + 1, 10 * i, f"r{i}") for i in range(20)]
    positions = [(0, 10, 20), (1, 1, 1)]
    placed, sides = closed(spark, src, dst, positions, (6, 16))
    assert placed == (11, 0, 0)
    # Left: p1 was consumed whole. Right: the slice's newest record is more than a window
    # newer than p1's last consumed one, so no copy of it can follow.
    assert sides == (True, True)


@pytest.mark.parametrize("replicated", [False, True])
def test_pending_reads_back_to_a_copy_of_the_partition(spark, replicated):
    # p1's one record (consumed) is far older than the frontier. While it is not known to be
    # copied, the left side stays open until the slice holds a copy of p1 or is a window
    # older than that record.
    src = [(0, i, 10 * i, f"r{i}") for i in range(20)] + [(1, 0, -2 * W, "old")]
    dst = [(0, 0, -2 * W, "old")] + [(0, i + 1, 10 * i, f"r{i}") for i in range(20)]
    placed, sides = closed(spark, src, dst, [(0, 10, 20), (1, 1, 1)], (8, 17),
                           replicated=[True, replicated])  # fmt: skip
    assert placed == (11, 0, 0)
    assert sides == (replicated, True)


def test_copies_out_of_a_partition_order_are_placed_but_prove_nothing(spark):
    dst = list(INTERLEAVED_DST)
    dst[6], dst[8] = (0, 6, 80, "r8"), (0, 8, 60, "r6")  # p0's records 3 and 4 swapped
    placed, sides = closed(spark, INTERLEAVED_SRC, dst, AT_TEN, (4, 16))
    assert placed == (10, 0, 0)
    assert sides == (False, False)


# -- PENDING --------------------------------------------------------------------------------


def group_frontier(committed: int, last_ms: int, last_offset: int) -> GroupFrontier:
    return GroupFrontier("g", "t", "d", 30, 30, 30 - W, 30 + W, [committed], [last_ms],
                         [last_offset], [30])  # fmt: skip


@pytest.mark.parametrize("copied, expected", [(["a"], 1), (["a", "b"], 0)])
def test_consumed_records_not_yet_copied_are_missing(spark, copied, expected):
    src = [(0, 0, 10, "a"), (0, 1, 20, "b"), (0, 2, 30, "c")]
    dst = [(0, i, 10 * (i + 1), n) for i, n in enumerate(copied)]
    copies_df = copies.with_copies(records_df(spark, "d", dst), records_df(spark, "t", src),
                                      {"t": "d"})  # fmt: skip
    (r,) = replication.with_replication(copies_df).collect()
    g = group_frontier(2, 20, 1)
    newest = {"d": r.newest_ms}
    if is_replicated(g, 0, 0, {("d", 0): r.max_copied_offset}, newest, W):
        assert expected == 0
        return
    pending = spark.createDataFrame([("g", "t", 0, r.max_copied_offset, 2, g.band_lo_ms)], PENDING)
    (m,) = replication.with_missing(records_df(spark, "t", src), pending).collect()
    assert m.missing == expected


def test_replication_is_known_from_newer_records_or_the_band():
    g = group_frontier(2, 20, 1)
    assert not is_replicated(g, 0, 0, {}, {"d": 20 + W}, W)
    assert is_replicated(g, 0, 0, {}, {"d": 21 + W}, W)  # the replica is a window past it
    assert is_replicated(g, 0, 0, {("d", 0): 1}, {}, W)  # its copy was read
    assert is_replicated(g, 0, 2, {}, {}, W)  # nothing consumed on the partition
    old = GroupFrontier("g", "t", "d", 5 * W, 5 * W, 4 * W, 6 * W, [2], [20], [1], [30])
    assert is_replicated(old, 0, 0, {}, {}, W)  # older than the band: taken as copied
