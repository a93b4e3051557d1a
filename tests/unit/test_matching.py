"""Matching logic on tiny inline DataFrames (no brokers)."""

from __future__ import annotations

import hashlib

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from chispa import assert_df_equality
from pyspark.sql import functions as F

from ferry import hashing
from ferry.migrate import anchors, extract, matching
from ferry.migrate.extract import DST_BOUNDS_SCHEMA
from ferry.migrate.model import offsets_by_partition
from ferry.migrate.plan import ANCHORS_SCHEMA, anchored_table, anchors_table
from ferry.session import arrow_df

T0 = 1_700_000_000_000
RECORD_SCHEMA = "topic string, partition int, offset long, timestamp_ms long, sha256 binary"


def h(value: str) -> bytes:
    return hashlib.sha256(value.encode()).digest()


def records(spark, topic, values, *, first_offset=0, ts=None, offsets=None):
    """Records with the given values; `ts` maps index -> timestamp (default T0 + 10 * index)."""
    offs = offsets or [first_offset + i for i in range(len(values))]
    rows = [
        (topic, 0, off, (ts or {}).get(i, T0 + 10 * i), h(v))
        for i, (off, v) in enumerate(zip(offs, values, strict=True))
    ]
    return spark.createDataFrame(rows, RECORD_SCHEMA)


def on_driver(records_df):
    """What a read of these records brings to the driver (`extract.read_hashed`), per
    partition (`anchors.records_by_partition`), and its read intervals: one per partition,
    from its first record to its last."""
    table = records_df.toArrow()
    read = table.select(["topic", "partition", "offset", "timestamp_ms", "sha256"]).append_column(
        "fingerprint", pa.array(hashing.fingerprints(table.column("sha256")))
    )
    by_tp = anchors.records_by_partition(read)
    segments = {tp: [(int(r.offsets[0]), int(r.offsets[-1]) + 1)] for tp, r in by_tp.items()}
    return by_tp, segments


def located(spark, records_df):
    """Every record located, as migrate locates the possible candidates: on the driver."""
    by_tp, segments = on_driver(records_df)
    wanted = {tp: r.offsets for tp, r in by_tp.items()}
    return extract.located_records(spark, by_tp, segments, wanted)


def source_prints(spark, src_df):
    """The source partitions' fingerprints, which the anchors' context is cut from."""
    by_tp, _ = on_driver(src_df)
    return extract.fingerprints_df(spark, by_tp, by_tp.keys())


def anchors_table_of(positions, src_df):
    """The anchors of `positions` (POSITIONS_SCHEMA tuples) among `src_df`'s records, as
    migrate finds them: chosen, located and hashed on the driver (`anchors.nearest_in`,
    `plan.anchored_table`, `plan.anchors_table`), as the driver holds them (Arrow)."""
    by_tp, segments = on_driver(src_df)
    renamed = {row[0]: row[3] for row in positions}
    bounds = {(row[0], row[1]): (row[5], row[6]) for row in positions}
    found = {
        tp: anchors.nearest_in(committed, by_tp.get(tp))
        for tp, committed in offsets_by_partition([row[:3] for row in positions]).items()
    }
    return anchors_table(*anchored_table(found, renamed, bounds), by_tp, segments)


def anchors_of(spark, positions, src_df):
    """`anchors_table_of` as the DataFrame migrate makes of it."""
    return arrow_df(spark, anchors_table_of(positions, src_df), ANCHORS_SCHEMA)


def plan(spark, src_df, dst_df, commits, *, k=4, before=60_000, after=60_000, dst_last=None):
    """Run all matching stages on the commits' positions; commits: list of (group,
    committed_offset); each group gets its position's row."""
    positions = [("src", 0, c, "dst", 0, 0, 10**6) for c in sorted({c for _, c in commits})]
    dst_offsets = [r.offset for r in dst_df.select("offset").collect()]
    last_ts = dst_last if dst_last is not None else T0 + 10**9
    bounds_df = spark.createDataFrame(
        [("dst", 0, min(dst_offsets, default=0), max(dst_offsets, default=-1) + 1, last_ts)],
        DST_BOUNDS_SCHEMA,
    )
    anchors_df = anchors_of(spark, positions, src_df)
    inputs = matching.MatchInputs(anchors_df, source_prints(spark, src_df), bounds_df, lambda: None)
    resolved_df = matching.match(inputs, anchors_df, located(spark, dst_df), k, before, after)
    by_offset = {r.committed_offset: r.asDict() for r in resolved_df.collect()}
    assert len(by_offset) == resolved_df.count()  # one row per position
    return {g: {"group": g, **by_offset[c]} for g, c in commits}


def fingerprints(values: str) -> dict[str, int]:
    prints = hashing.fingerprints(pa.array([h(v) for v in values])).tolist()
    return dict(zip(values, prints, strict=True))


def test_anchors_carry_their_hash_and_location_and_their_context_is_cut_from_it(spark):
    src = records(spark, "src", ["a", "b", "c", "d"])
    anchors_df = anchors_of(spark, [("src", 0, 2, "dst", 0, 0, 4)], src)
    out = anchors_df.first()
    assert out.anchor_offset == 1 and bytes(out.anchor_sha256) == h("b")
    assert (out.src_at, out.src_first, out.src_last) == (1, 0, 3)
    cut = matching.with_context(
        anchors_df, source_prints(spark, src), 2, ("src_topic", "src_partition"),
        tuple(matching.ANCHOR_LOCATION_COLUMNS), ("src_before", "src_after"),
    ).first()  # fmt: skip
    fp = fingerprints("abcd")
    assert cut.src_before == [fp["a"]] and cut.src_after == [fp["c"], fp["d"]]


def test_with_context_cuts_the_neighbours_within_each_segment_nearest_first(spark):
    # located on the driver: offsets 0 5 6 in one segment (a gap: 5's neighbour is 0), 100
    # alone in another (no neighbours across), all from one partition's fingerprints
    fp = fingerprints("abcx")
    prints = [fp["a"], fp["b"], fp["c"], fp["x"]]
    fingerprints_df = spark.createDataFrame(
        [("t", 0, prints)], "topic string, partition int, fingerprints array<bigint>"
    )
    index_df = spark.createDataFrame(
        [("t", 0, 0, 0, 0, 2), ("t", 0, 5, 1, 0, 2), ("t", 0, 6, 2, 0, 2), ("t", 0, 100, 3, 3, 3)],
        "topic string, partition int, offset long, at int, first int, last int",
    )
    expected = spark.createDataFrame(
        [
            ("t", 0, 0, [], [fp["b"], fp["c"]]),
            ("t", 0, 5, [fp["a"]], [fp["c"]]),
            ("t", 0, 6, [fp["b"], fp["a"]], []),
            ("t", 0, 100, [], []),
        ],
        "topic string, partition int, offset long, before array<bigint>, after array<bigint>",
    )
    got = matching.with_context(index_df, fingerprints_df, 2)
    assert got.columns == [*index_df.columns, "before", "after"]
    assert_df_equality(
        got.drop("at", "first", "last"), expected, ignore_row_order=True, ignore_nullable=True
    )
    none = matching.with_context(index_df, fingerprints_df, 0).collect()
    assert [(r.before, r.after) for r in none] == [([], [])] * 4  # k = 0
    # a record of a partition whose fingerprints are not there: no context, not no row
    elsewhere = index_df.withColumn("partition", index_df.partition + 1)
    gone = matching.with_context(elsewhere, fingerprints_df, 2).collect()
    assert [(r.before, r.after) for r in gone] == [([], [])] * 4


def test_shifted_offsets_match_plus_one(spark):
    values = [f"v{i}" for i in range(20)]
    src = records(spark, "src", values)
    dst = records(
        spark, "dst", values[5:], first_offset=0, ts={i: T0 + 10 * (i + 5) for i in range(15)}
    )
    out = plan(spark, src, dst, [("g", 12)])
    assert out["g"]["status"] == "MATCHED"
    assert out["g"]["anchor_offset"] == 11
    assert out["g"]["destination_offset"] == 7  # record 11 is destination 6; next is 7
    assert out["g"]["is_resolved"]


def test_identical_run_in_one_millisecond_resolved_by_preceding_context(spark):
    values = ["a", "b", "c", "x", "x", "x", "x", "d", "e"]
    same_ms = {i: T0 for i in range(len(values))}
    src = records(spark, "src", values, ts=same_ms)
    dst = records(spark, "dst", values, first_offset=100, ts=same_ms)
    # committed 6: last consumed is the 3rd x (offset 5)
    out = plan(spark, src, dst, [("g", 6)], k=8)
    assert out["g"]["candidate_count"] == 4
    assert out["g"]["status"] == "MATCHED"
    assert out["g"]["destination_offset"] == 106


def test_run_longer_than_context_is_ambiguous(spark):
    values = ["x"] * 12
    src = records(spark, "src", values, ts={i: T0 for i in range(12)})
    dst = records(spark, "dst", values, ts={i: T0 for i in range(12)})
    out = plan(spark, src, dst, [("g", 6)], k=2)
    assert out["g"]["status"] == "AMBIGUOUS"
    assert out["g"]["destination_offset"] is None
    assert not out["g"]["is_resolved"]


def test_tie_broken_by_following_context(spark):
    # Preceding context is the same for both candidates (k=1 sees only one x before);
    # what follows tells them apart.
    src_values = ["x", "x", "y", "z"]
    dst_values = ["x", "x", "x", "q", "x", "x", "y", "z"]
    src = records(spark, "src", src_values, ts={i: T0 for i in range(4)})
    dst = records(spark, "dst", dst_values, ts={i: T0 for i in range(8)})
    out = plan(spark, src, dst, [("g", 2)], k=1)  # last consumed: the second x
    assert out["g"]["status"] == "MATCHED"
    assert out["g"]["destination_offset"] == 6


@pytest.mark.parametrize("committed", [0, 3])
def test_nothing_before_committed_uses_next_record(spark, committed):
    values = ["a", "b", "c", "d"]
    src = records(spark, "src", values[committed:], first_offset=committed)
    dst = records(spark, "dst", values, first_offset=40)
    out = plan(spark, src, dst, [("g", committed)])
    assert out["g"]["anchor_kind"] == "next"
    assert out["g"]["status"] == "MATCHED_NEXT"
    assert out["g"]["destination_offset"] == 40 + committed


def test_empty_source_lands_on_destination_log_end(spark):
    src = spark.createDataFrame([], RECORD_SCHEMA)
    dst = records(spark, "dst", ["a", "b"], first_offset=7)
    out = plan(spark, src, dst, [("g", 0)])
    assert out["g"]["status"] == "EMPTY"
    assert out["g"]["destination_offset"] == 9


def test_pending_until_destination_is_written_past_the_window(spark):
    src = records(spark, "src", ["a", "b", "c"])
    dst = records(spark, "dst", ["a"])
    anchor_ts = T0 + 20
    pending = plan(spark, src, dst, [("g", 3)], after=1000, dst_last=anchor_ts + 999)
    assert pending["g"]["status"] == "PENDING"
    missing = plan(spark, src, dst, [("g", 3)], after=1000, dst_last=anchor_ts + 1000)
    assert missing["g"]["status"] == "NOT_FOUND"


def test_window_bounds_are_inclusive(spark):
    src = records(spark, "src", ["a", "b"])
    anchor_ts = T0 + 10
    for dst_ts, status in (
        (anchor_ts - 500, "MATCHED"),
        (anchor_ts - 501, "NOT_FOUND"),
        (anchor_ts + 300, "MATCHED"),
        (anchor_ts + 301, "NOT_FOUND"),
    ):
        dst = records(spark, "dst", ["a", "b"], ts={0: dst_ts - 10, 1: dst_ts})
        out = plan(spark, src, dst, [("g", 2)], before=500, after=300, dst_last=T0 + 10**6)
        assert out["g"]["status"] == status, dst_ts


def test_rewritten_later_timestamps_need_window_after(spark):
    src = records(spark, "src", ["a", "b", "c"])
    later = {i: T0 + 10 * i + 300_000 for i in range(3)}
    dst = records(spark, "dst", ["a", "b", "c"], ts=later)
    # a window too narrow for the replicator's clock: the record is not found in it
    assert plan(spark, src, dst, [("g", 2)], after=60_000)["g"]["status"] == "NOT_FOUND"
    assert plan(spark, src, dst, [("g", 2)], after=400_000)["g"]["destination_offset"] == 2


def test_inconsistent_when_next_record_differs(spark):
    src = records(spark, "src", ["a", "b", "c", "d"])
    dst = records(spark, "dst", ["a", "b", "X", "d"])
    out = plan(spark, src, dst, [("g", 2)])
    assert out["g"]["status"] == "INCONSISTENT"
    assert out["g"]["destination_offset"] is None


def test_anchors_across_gaps_for_many_groups_sharing_a_partition(spark):
    # Compaction left gaps; every group's anchor is the nearest record before its offset
    # (or the first at/after it), never offset - 1.
    values = ["a", "b", "c", "d", "e", "f"]
    src = records(spark, "src", values, offsets=[3, 4, 5, 8, 9, 12])
    commits = {"g2": 2, "g3": 3, "g4": 4, "g7": 7, "g8": 8, "g9": 9, "g12": 12, "g13": 13}
    positions = [("src", 0, c, "dst", 0, 0, 13) for c in sorted(set(commits.values()))]
    by_offset = {
        r.committed_offset: (r.anchor_kind, r.anchor_offset)
        for r in anchors_of(spark, positions, src).collect()
    }
    anchors = {g: by_offset[c] for g, c in commits.items()}
    assert anchors == {
        "g2": ("next", 3),
        "g3": ("next", 3),
        "g4": ("last", 3),
        "g7": ("last", 5),
        "g8": ("last", 5),
        "g9": ("last", 8),
        "g12": ("last", 9),
        "g13": ("last", 12),
    }


def test_resolve_takes_the_best_context_and_calls_a_tie_at_the_top_ambiguous(spark):
    """Ranking alone, on inline candidates: the longest context before, then after, wins; two
    candidates sharing the best pair are AMBIGUOUS whatever the others score, and ties lower
    down do not matter."""
    # each anchor at k = 2 with two records before it and one after it; position 40 has no
    # candidate (its one row carries none)
    anchor_df = spark.createDataFrame(
        [
            ("src", 0, c, "dst", 0, "last", c - 1, T0, h("x"), 2, 1, i)
            for i, c in enumerate((10, 20, 30, 40))
        ],
        "src_topic string, src_partition int, committed_offset long, dst_topic string, "
        "dst_partition int, anchor_kind string, anchor_offset long, anchor_timestamp_ms long, "
        "anchor_sha256 binary, src_before_size int, src_after_size int, anchor_row int",
    )
    scores_df = spark.createDataFrame(
        [
            # position 10: one best (2, 1) at 107, two lower ones tied (2, 0)
            ("src", 0, 10, 105, T0, 2, 0, True),
            ("src", 0, 10, 107, T0, 2, 1, True),
            ("src", 0, 10, 103, T0, 2, 0, True),
            # position 20: the best (1, 1) twice, at 203 and 201; a lower (0, 1) elsewhere
            ("src", 0, 20, 203, T0, 1, 1, True),
            ("src", 0, 20, 209, T0, 0, 1, True),
            ("src", 0, 20, 201, T0, 1, 1, True),
            # position 30: one candidate
            ("src", 0, 30, 300, T0, 2, 1, False),
        ],
        "src_topic string, src_partition int, committed_offset long, candidate_offset long, "
        "candidate_timestamp_ms long, match_before int, match_after int, has_dst_next boolean",
    )
    # a candidate's index among its partition's records read follows its offset
    candidates_df = (
        anchor_df.join(scores_df, matching.ANCHOR_KEYS, "left")
        .withColumn("candidate_at", (F.col("candidate_offset") - 100).cast("int"))
        .select(*matching.CANDIDATE_COLUMNS)
    )
    bounds_df = spark.createDataFrame([("dst", 0, 0, 1000, T0 + 10**9)], DST_BOUNDS_SCHEMA)
    out = {
        r.committed_offset: r for r in matching.resolve(candidates_df, bounds_df, 60_000).collect()
    }
    assert (out[10].status, out[10].destination_offset, out[10].candidate_count) == (
        "MATCHED", 108, 3,
    )  # fmt: skip
    assert (out[10].match_before, out[10].match_after, out[10].is_full_match) == (2, 1, True)
    assert (out[20].status, out[20].destination_offset, out[20].candidate_count) == (
        "AMBIGUOUS", None, 3,
    )  # fmt: skip
    assert (out[30].status, out[30].destination_offset) == ("MATCHED", 301)
    assert (out[40].status, out[40].destination_offset, out[40].candidate_count) == (
        "NOT_FOUND", None, 0,
    )  # fmt: skip


def test_positions_are_resolved_where_the_anchors_cache_put_them(spark):
    """The anchors cached by position (as `plan` caches them) stream past the broadcast
    candidates, so resolving them shuffles nothing: no exchange is added for the query's
    needs (joined the other way round, the candidates would be grouped by one)."""
    from ferry.session import local_df

    values = [f"v{i}" for i in range(20)]
    src = records(spark, "src", values)
    dst = records(spark, "dst", values, first_offset=100)
    positions = [("src", 0, c, "dst", 0, 0, 10**6) for c in (3, 8, 12)]
    anchors_df = anchors_of(spark, positions, src).repartition(8, *matching.ANCHOR_KEYS).cache()
    try:
        bounds_df = local_df(spark, [("dst", 0, 100, 120, T0 + 10**9)], DST_BOUNDS_SCHEMA)
        candidates_df = matching.with_candidates(
            anchors_df, source_prints(spark, src), located(spark, dst), 4, 60_000, 60_000
        )
        resolved_df = matching.resolve(candidates_df, bounds_df, 60_000)
        assert sorted(r.destination_offset for r in resolved_df.collect()) == [103, 108, 112]
        shown = resolved_df._jdf.queryExecution().executedPlan().toString()
        assert "isFinalPlan=true" in shown
        final = shown.split("\n+- == Initial Plan ==")[0]  # the query's own, unindented
        added = [line for line in final.splitlines() if "ENSURE_REQUIREMENTS" in line]
        assert added == [], shown
    finally:
        anchors_df.unpersist()


def _shuffles(df) -> list[str]:  # noqa: ANN001
    """The exchanges of `df`'s executed plan (run first: adaptive plans show their final)."""
    df.collect()
    shown = df._jdf.queryExecution().executedPlan().toString()
    final = shown.split("\n+- == Initial Plan ==")[0]
    return [line for line in final.splitlines() if "Exchange hashpartitioning" in line]


def test_anchors_whose_hash_is_their_own_are_resolved_without_a_shuffle(spark):
    """With no hash shared by two located records, each anchor has at most one candidate:
    `match` resolves it as it streams past the broadcasts (no exchange at all), to the same
    rows as grouping its candidates does. Anchors of a shared hash are grouped, after a
    shuffle of those anchors alone."""
    from ferry.session import local_df

    values = [f"v{i}" for i in range(12)]
    src, dst = records(spark, "src", values), records(spark, "dst", values, first_offset=100)
    positions = [("src", 0, c, "dst", 0, 0, 10**6) for c in (0, 3, 8, 12)]
    anchors_df = anchors_of(spark, positions, src)
    bounds_df = local_df(spark, [("dst", 0, 100, 112, T0 + 10**9)], DST_BOUNDS_SCHEMA)

    def both(anchors_df, src_df, dst_df):  # noqa: ANN001, ANN202
        prints, found = source_prints(spark, src_df), located(spark, dst_df)
        by_position = lambda df: df.repartition(8, *matching.ANCHOR_KEYS)  # noqa: E731
        inputs = matching.MatchInputs(anchors_df, prints, bounds_df, lambda: None, by_position)
        grouped = matching.resolve(
            matching.with_candidates(anchors_df, prints, found, 4, 60_000, 60_000),
            bounds_df,
            60_000,
        )
        return matching.match(inputs, anchors_df, found, 4, 60_000, 60_000), grouped, found

    alone_df, grouped_df, found = both(anchors_df, src, dst)
    assert found.repeated_df is None
    assert _shuffles(alone_df) == []
    assert_df_equality(alone_df, grouped_df, ignore_row_order=True)
    assert sorted(r.destination_offset for r in alone_df.collect()) == [100, 103, 108, 112]

    # "x" three times and "y" twice: their anchors' candidates are grouped, the rest not
    values = ["a", "x", "b", "x", "c", "y", "d", "x", "e", "y", "f", "g"]
    src, dst = records(spark, "src", values), records(spark, "dst", values, first_offset=100)
    positions = [("src", 0, c, "dst", 0, 0, 10**6) for c in range(1, 13)]
    anchors_df = anchors_of(spark, positions, src)
    mixed_df, grouped_df, found = both(anchors_df, src, dst)
    assert sorted(bytes(r.sha256) for r in found.repeated_df.collect()) == sorted([h("x"), h("y")])
    assert len(_shuffles(mixed_df)) == 1
    assert_df_equality(mixed_df, grouped_df, ignore_row_order=True)
    statuses = {r.committed_offset: r.status for r in mixed_df.collect()}
    assert statuses[1] == "MATCHED" and statuses[2] == "MATCHED"  # "a", then the first "x"


def test_the_driver_takes_each_rows_anchor_columns_from_its_own_table(spark):
    """A query's rows come back as each anchor's row and what matching worked out; the
    driver's table of anchors gives the rest (`slices.collected`): the same rows as Spark's
    own, column for column, in the anchors' order whichever order the rows come back in."""
    from ferry.migrate.slices import collected, in_anchor_order
    from ferry.session import local_df

    values = ["a", "x", "b", "x", "c", "y", "d", "x", "e", "y", "f", "g"]
    src, dst = records(spark, "src", values), records(spark, "dst", values, first_offset=100)
    positions = [("src", 0, c, "dst", 0, 0, 10**6) for c in range(0, 13)]
    anchors_df = anchors_of(spark, positions, src)
    bounds_df = local_df(spark, [("dst", 0, 100, 112, T0 + 10**9)], DST_BOUNDS_SCHEMA)
    inputs = matching.MatchInputs(anchors_df, source_prints(spark, src), bounds_df, lambda: None)
    # the rows in another order than the anchors' (by status, then offset descending)
    df = matching.match(inputs, anchors_df, located(spark, dst), 2, 60_000, 60_000).orderBy(
        "status", F.desc("committed_offset")
    )
    got = collected(df, anchors_table_of(positions, src), "is_full_match")
    columns = [*matching.POSITION_COLUMNS, "is_full_match", matching.ANCHOR_ROW]
    spark_rows = df.select(*columns).toArrow().to_pylist()
    assert [r["committed_offset"] for r in spark_rows] != list(range(13))  # reordered
    assert got.column_names == columns
    assert got.to_pylist() == spark_rows
    assert len({r["status"] for r in spark_rows}) > 1  # a mix of statuses
    # in the anchors' order: one query's rows, or several queries' (a search's steps)
    in_order = sorted(spark_rows, key=lambda r: r[matching.ANCHOR_ROW])
    for r in in_order:
        del r[matching.ANCHOR_ROW]
    one = in_anchor_order([got], 13)
    assert one.to_pylist() == in_order
    assert [r["committed_offset"] for r in one.to_pylist()] == list(range(13))
    steps = [got.filter(pc.equal(got["status"], s)) for s in ("MATCHED", "AMBIGUOUS")]
    rest = got.filter(pc.invert(pc.is_in(got["status"], pa.array(["MATCHED", "AMBIGUOUS"]))))
    whole = in_anchor_order([rest, *steps], 13)
    assert whole.to_pylist() == in_order
    with pytest.raises(RuntimeError, match="gave 12 rows for 13 anchor positions"):
        in_anchor_order([got.slice(1)], 13)
    with pytest.raises(RuntimeError, match="gave 14 rows for 13 anchor positions"):
        in_anchor_order([got, got.slice(12)], 13)


# HotSpot never compiles a method of more bytecode than this (`-XX:HugeMethodLimit`, on by
# default): a larger generated method runs interpreted.
JIT_LIMIT = 8000


def test_every_generated_method_of_the_matching_query_is_small_enough_to_be_compiled(spark):
    """Each whole-stage method of `match`'s query stays under HotSpot's JIT limit, for anchors
    resolved one by one and for those grouped. One method of 10,900 bytes took 1.7x the CPU
    at 10,000 groups: `resolve_each` cuts it in two."""
    from ferry.session import local_df

    debug = spark._jvm.org.apache.spark.sql.execution.debug.package  # type: ignore[union-attr]
    values = ["a", "x", "b", "x", "c", "d", "e", "f"]
    for dst_values in (values[2:], values):  # every hash its own, then "x" twice
        src, dst = records(spark, "src", values), records(spark, "dst", dst_values)
        anchors_df = anchors_of(spark, [("src", 0, c, "dst", 0, 0, 10**6) for c in (2, 5, 8)], src)
        bounds_df = local_df(spark, [("dst", 0, 0, len(dst_values), T0 + 10**9)],
                             DST_BOUNDS_SCHEMA)  # fmt: skip
        inputs = matching.MatchInputs(
            anchors_df, source_prints(spark, src), bounds_df, lambda: None
        )
        df = matching.match(inputs, anchors_df, located(spark, dst), 16, 60_000, 60_000)
        df.collect()  # adaptive execution's final plan
        stages = debug.codegenStringSeq(df._jdf.queryExecution().executedPlan())
        sizes = [stages.apply(i)._3().maxMethodCodeSize() for i in range(stages.size())]
        assert sizes and max(sizes) < JIT_LIMIT, sizes
