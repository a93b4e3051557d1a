"""The destination search's rules on tiny inline DataFrames: when a slice is decided, when it
is closed, and which candidates count (no brokers)."""

from __future__ import annotations

from collections import Counter

from ferry.config import FerryConfig
from ferry.migrate import anchors, lookups, matching, search, slices
from ferry.migrate.extract import DST_BOUNDS_SCHEMA
from ferry.migrate.ranges import RangeBook

from .test_matching import T0, anchors_of, located, records, source_prints

K = 2


def state_of(
    spark, src_values, dst_values, c, slice_bounds, *, dst_ts=None, src_ts=None, before=50, after=50
):
    """The judgement of one slice on dst (`slice_bounds`, as read) for one group committed at
    `c` on src: matched in Spark, judged on the driver, as a search step does."""
    src_df = records(spark, "src", src_values, ts=src_ts)
    dst_df = records(spark, "dst", dst_values, ts=dst_ts)
    anchors_df = anchors_of(spark, [("src", 0, c, "dst", 0, 0, 10**6)], src_df)
    anchor = anchors_df.first()
    position = min(
        (i for i in range(len(dst_values)) if (dst_ts or {}).get(i, T0 + 10 * i)
         >= anchor.anchor_timestamp_ms),
        default=len(dst_values),
    )  # fmt: skip
    start, end = slice_bounds
    s = slices.AnchorSlice(position, 0, len(dst_values), position - (K + 1) - start,
                           end - position - (K + 1))  # fmt: skip
    assert s.bounds(K) == slice_bounds
    key = ("dst", 0, anchor.anchor_timestamp_ms)
    slices_df = spark.createDataFrame(
        [(*key, position, start, end, 0, len(dst_values))], slices.SLICES_SCHEMA
    )
    bounds_df = spark.createDataFrame(
        [("dst", 0, 0, len(dst_values), T0 + 10**9)], DST_BOUNDS_SCHEMA
    )
    inputs = matching.MatchInputs(anchors_df, source_prints(spark, src_df), bounds_df, lambda: None)
    row = slices.match_in_slices(
        inputs, slices.with_slices(anchors_df, slices_df), located(spark, dst_df), K, before, after
    ).first()
    read = anchors.records_by_partition(
        dst_df.select("topic", "partition", "offset", "timestamp_ms").toArrow()
    )
    state = slices.judge_slices(read, {key: s}, {key: row.is_full_match}, K, before, after)[key]
    return state.is_decided, state.is_left_closed, state.is_right_closed


VALUES = [f"v{i}" for i in range(40)]


def test_a_full_context_match_at_the_anchors_time_decides(spark):
    # anchor v20 (C = 21); the slice holds it with K records either side and K + 1 after its ms
    assert state_of(spark, VALUES, VALUES, 21, (16, 25)) == (True, False, False)


def test_context_cut_short_by_the_slice_does_not_decide(spark):
    # the slice ends right after the anchor: its after-context is not there yet
    decided, _, _ = state_of(spark, VALUES, VALUES, 21, (16, 22))
    assert not decided


def test_a_different_neighbour_does_not_decide(spark):
    dst = list(VALUES)
    dst[22] = "changed"
    decided, _, _ = state_of(spark, VALUES, dst, 21, (10, 30))
    assert not decided


def test_a_copy_at_another_timestamp_does_not_decide(spark):
    # rewritten timestamps: the copy is there with full context, 5 ms later than the anchor
    shifted = {i: T0 + 10 * i + 5 for i in range(40)}
    decided, _, _ = state_of(spark, VALUES, VALUES, 21, (10, 30), dst_ts=shifted)
    assert not decided


def test_two_full_matches_in_the_slice_decide_without_widening(spark):
    # the anchor's millisecond holds the same run of 2K + 1 records twice, on both clusters:
    # widening cannot make it less ambiguous, so the slice is decided (resolve: AMBIGUOUS)
    run = ["a", "b", "c", "d", "e"]
    values = [*VALUES[:10], *run, *run, *VALUES[20:]]
    ts = {i: T0 + 100 for i in range(10, 20)}
    assert state_of(spark, values, values, 13, (5, 30), dst_ts=ts, src_ts=ts)[0]


def test_closed_sides_need_k_plus_one_records_outside_the_window(spark):
    # window ±50 ms = ±5 records around the anchor at index 20
    assert state_of(spark, VALUES, VALUES, 21, (12, 30))[1:] == (True, True)
    assert state_of(spark, VALUES, VALUES, 21, (14, 28))[1:] == (False, False)
    # the log's ends close a side whatever the timestamps
    assert state_of(spark, VALUES, VALUES, 21, (0, 40), before=10**6, after=10**6)[1:] == (
        True,
        True,
    )


def test_slice_bounds_grow_and_close_at_the_log():
    s = slices.AnchorSlice(position=100, log_start=90, log_end=1000, before=0, after=64)
    assert s.bounds(K) == (97, 167)
    s.close_at_edges(K)
    assert (s.is_left_closed, s.is_right_closed, s.is_open) == (False, False, True)
    s.before = 64
    assert s.bounds(K)[0] == 90
    s.close_at_edges(K)
    assert s.is_left_closed and s.is_open
    whole = search._first_slice(5, 0, 600, K, whole=True)
    assert whole.bounds(K) == (0, 600) and not whole.is_open
    assert search._first_slice(5000, 0, 20_000, K, whole=True).bounds(K) == (0, 20_000)


def test_partitions_read_whole_are_the_small_and_the_densely_anchored():
    """No lookups where the first slices alone would read half the partition anyway."""
    first_read = 2 * (K + 1) + search.FIRST_RADIUS

    def at(tp: tuple[str, int], n: int) -> list[tuple[str, int, int]]:
        return [(*tp, i) for i in range(n)]  # anchor positions: partition and timestamp

    size = 20_000
    dense = -(-size // (2 * first_read))  # the fewest anchors whose first slices cover half
    bounds = {("small", 0): (0, search.SMALL_PARTITION), ("t", 0): (0, size), ("t", 1): (0, size)}
    positions = at(("small", 0), 1) + at(("t", 0), dense) + at(("t", 1), dense - 1)
    per_tp = Counter(p[:2] for p in positions)
    assert search.partitions_read_whole(per_tp, bounds, K) == {("small", 0), ("t", 0)}
    # one step (no cache of the anchors) only when every anchor's partition is read whole
    context = dict.fromkeys(positions, K)
    assert not search.takes_one_step(context, bounds, K)
    assert search.takes_one_step({p: K for p in positions if p[:2] != ("t", 1)}, bounds, K)
    assert search.takes_one_step({}, bounds, K)


def test_a_slice_never_reads_past_its_window_and_closes_at_it():
    """Once its window's offsets are known (a full read's), a slice is clamped to them and a
    side that reaches them is closed, as a full read of the window would be."""
    s = slices.AnchorSlice(position=500, log_start=0, log_end=10_000, before=0, after=64)
    s.window = (400, 700)
    s.before, s.after = 1024, 1024
    assert s.bounds(K) == (400, 700)
    s.close_at_edges(K)
    assert not s.is_open


def test_leftovers_are_read_to_their_windows_edges_at_once():
    """The open slices' unread windows are small: both open sides jump to the edges in one
    step; a closed side stays where it is. Too much left: they widen step by step."""
    book = RangeBook()
    book.new_ranges({("t", 0): [(480, 600)], ("t", 1): [(4_000, 4_200)]})
    small = slices.AnchorSlice(position=500, log_start=0, log_end=10_000, before=0, after=64)
    small.window = (100, 900)
    half = slices.AnchorSlice(position=4_100, log_start=0, log_end=10_000, before=0, after=64)
    half.window = (3_000, 5_000)
    half.is_right_closed = True
    cfg = FerryConfig()
    n = search.finish_leftovers(None, {("t", 0, 1): small, ("t", 1, 2): half}, {}, book, cfg)
    assert n == (800 - 120) + (1_100 - 100)
    assert small.bounds(K) == (100, 900) and half.bounds(K)[0] == 3_000
    assert half.bounds(K)[1] < 5_000  # closed: not widened
    small.close_at_edges(K)
    half.close_at_edges(K)
    assert not small.is_open and not half.is_open

    big = slices.AnchorSlice(position=5_000, log_start=0, log_end=10**7, before=0, after=64)
    big.window = (0, 10**7)
    before = big.bounds(K)
    assert search.finish_leftovers(None, {("t", 2, 3): big}, {}, book, cfg) is None
    assert big.bounds(K) == before


def test_the_book_counts_what_it_has_not_read():
    book = RangeBook()
    book.new_ranges({("t", 0): [(10, 20), (30, 40)]})
    assert book.unread({("t", 0): [(0, 50), (15, 35)], ("t", 1): [(0, 5)]}) == 30 + 5
    assert book.read == {("t", 0): [(10, 20), (30, 40)]}  # counting records nothing


def test_each_slice_gets_its_own_window_and_never_less_than_it_covers(monkeypatch):
    """`look_up_windows` asks for every slice's window [ts - before, ts + after + 1) and hands
    each slice the extent answered for it (the lookups themselves: tests/integration)."""
    asked = {}

    def extents(_dst, windows, _bounds, _k):
        asked.update(windows)
        return {tp: [(lo // 1000, hi // 1000) for lo, hi in ws] for tp, ws in windows.items()}

    monkeypatch.setattr(lookups, "window_extents", extents)
    a = slices.AnchorSlice(position=100, log_start=0, log_end=10**6, before=0, after=64)
    b = slices.AnchorSlice(position=500, log_start=0, log_end=10**6, before=0, after=64)
    lookups.look_up_windows(None, {("t", 0, 900_000): b, ("t", 0, 200_000): a}, {}, K, 50, 70)
    assert asked == {("t", 0): [(199_950, 200_071), (899_950, 900_071)]}
    assert a.window == (97, 200) and b.window == (497, 900)  # a's own reach: from 97


def test_slices_are_judged_on_their_own_partitions_records_in_any_chunking(monkeypatch):
    # two topics × two partitions, records out of order; slices overlap and one partition has
    # no record read at all; each chunk size gives the counts of one pass over everything
    import pyarrow as pa

    rows = [(t, p, o, T0 + 10 * o + (5 if t == "b" else 0) + p) for t in ("a", "b")
            for p in (0, 1) for o in range(40)]  # fmt: skip
    rows.reverse()
    read = pa.table(
        {
            "topic": [r[0] for r in rows],
            "partition": pa.array([r[1] for r in rows], pa.int32()),
            "offset": [r[2] for r in rows],
            "timestamp_ms": [r[3] for r in rows],
        }
    )
    open_slices = {
        ("a", 0, T0 + 200): slices.AnchorSlice(20, 0, 40, before=2, after=4),
        ("a", 0, T0 + 250): slices.AnchorSlice(25, 0, 40, before=10, after=10),
        ("b", 1, T0 + 206): slices.AnchorSlice(20, 0, 40, before=0, after=0),
        ("a", 7, T0 + 100): slices.AnchorSlice(10, 0, 40, before=0, after=0),
    }

    def expected(key, s):
        t, p, ts0 = key
        start, end = s.bounds(K)
        inside = [r for r in rows if (r[0], r[1]) == (t, p) and start <= r[2] < end]
        return [
            sum(r[2] >= s.position and r[3] > ts0 for r in inside),
            sum(r[3] < ts0 - 30 for r in inside),
            sum(r[3] > ts0 + 40 for r in inside),
        ]

    want = [expected(key, s) for key, s in open_slices.items()]
    assert want[3] == [0, 0, 0] and want[0] != want[1]
    for chunk in (1, 7, 1 << 22):
        monkeypatch.setattr(slices, "CHUNK", chunk)
        got = slices._counts_in_slices(
            anchors.records_by_partition(read), list(open_slices.values()), list(open_slices), K,
            30, 40,
        )  # fmt: skip
        assert got.tolist() == want


def test_a_steps_anchors_are_those_of_its_slices_and_with_unanchored_the_empty_ones(spark):
    anchors_df = spark.createDataFrame(
        [
            ("dst", 0, T0, 1, "last"),  # its slice is read in this step
            ("dst", 0, T0 + 5, 2, "last"),  # its slice is not
            (None, None, None, 3, "none"),  # nothing on the source: no slice at all
        ],
        "dst_topic string, dst_partition int, anchor_timestamp_ms long, committed_offset long, "
        "anchor_kind string",
    )
    slices_df = spark.createDataFrame([("dst", 0, T0, 10, 4, 20, 0, 100)], slices.SLICES_SCHEMA)

    def chosen(unanchored):
        df = slices.with_slices(anchors_df, slices_df, unanchored)
        return sorted((r.committed_offset, r.slice_start, r.slice_end) for r in df.collect())

    assert chosen(False) == [(1, 4, 20)]
    assert chosen(True) == [(1, 4, 20), (3, None, None)]


def test_every_anchor_of_a_partition_read_whole_takes_its_one_slice(spark):
    anchors_df = spark.createDataFrame(
        [
            ("dst", 0, T0, 1, "last"),  # a slice of its own
            ("dst", 1, T0, 2, "last"),  # partition 1 is read whole: its one slice
            ("dst", 1, T0 + 7, 3, "last"),
            ("dst", 2, T0, 4, "last"),  # neither: not read in this step
            (None, None, None, 5, "none"),
        ],
        "dst_topic string, dst_partition int, anchor_timestamp_ms long, committed_offset long, "
        "anchor_kind string",
    )
    slices_df = spark.createDataFrame([("dst", 0, T0, 10, 4, 20, 0, 100)], slices.SLICES_SCHEMA)
    whole_df = spark.createDataFrame([("dst", 1, 0, 50)], slices.WHOLE_SLICES_SCHEMA)

    def chosen(unanchored):
        df = slices.with_slices(anchors_df, slices_df, unanchored, whole_df)
        assert df.columns == [*anchors_df.columns, "slice_start", "slice_end"]
        return sorted((r.committed_offset, r.slice_start, r.slice_end) for r in df.collect())

    assert chosen(False) == [(1, 4, 20), (2, 0, 50), (3, 0, 50)]
    assert chosen(True) == [(1, 4, 20), (2, 0, 50), (3, 0, 50), (5, None, None)]
    # either kind alone (None: there are none of it), or neither
    only_whole = slices.with_slices(anchors_df, None, False, whole_df).collect()
    assert sorted(r.committed_offset for r in only_whole) == [2, 3]
    only_keyed = slices.with_slices(anchors_df, slices_df, False, None).collect()
    assert [r.committed_offset for r in only_keyed] == [1]
    neither = slices.with_slices(anchors_df, None, True, None).collect()
    assert [(r.committed_offset, r.slice_start) for r in neither] == [(5, None)]
