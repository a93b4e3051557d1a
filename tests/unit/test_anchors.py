"""Anchors chosen on the driver (`ferry.migrate.anchors`): plain pytest on Arrow tables."""

from __future__ import annotations

from typing import NamedTuple

import pyarrow as pa

from ferry.migrate import anchors
from ferry.migrate.model import offsets_by_partition


class Anchor(NamedTuple):
    kind: str  # "last", "next" or "none"
    offset: int | None
    timestamp_ms: int | None
    records_before: int = 0


NO_ANCHOR = Anchor("none", None, None)


def nearest_records(positions, records):
    """Each position's anchor (`anchors.nearest_in`, per partition) as one tuple."""
    out = {}
    for (t, p), committed in offsets_by_partition(positions).items():
        found = anchors.nearest_in(committed, records.get((t, p)))
        columns = (found.kinds, found.offsets, found.timestamps, found.records_before)
        for c, kind, *anchor in zip(committed, *(a.tolist() for a in columns), strict=True):
            is_none = kind == anchors.NONE
            out[(t, p, c)] = NO_ANCHOR if is_none else Anchor(anchors.ANCHOR_KINDS[kind], *anchor)
    return out


def read(rows):
    """(topic, partition, offset, timestamp_ms) rows, in any order, as a read leaves them:
    an Arrow table, grouped per partition (`records_by_partition`)."""
    return anchors.records_by_partition(_table(rows))


def _table(rows):
    return pa.table(
        {
            "topic": pa.array([r[0] for r in rows], pa.string()),
            "partition": pa.array([r[1] for r in rows], pa.int32()),
            "offset": pa.array([r[2] for r in rows], pa.int64()),
            "timestamp_ms": pa.array([r[3] for r in rows], pa.int64()),
        }
    )


def test_the_nearest_record_read_before_the_offset_across_gaps():
    # compaction left gaps: the anchor is the nearest record before C, never C - 1
    rows = [("t", 0, o, 1000 + o) for o in (12, 3, 9, 4, 8, 5)]  # shuffled, as reads append
    got = nearest_records([("t", 0, c) for c in (2, 3, 4, 7, 8, 9, 12, 13)], read(rows))
    assert {c: (a.kind, a.offset) for (_, _, c), a in got.items()} == {
        2: ("next", 3),
        3: ("next", 3),
        4: ("last", 3),
        7: ("last", 5),
        8: ("last", 5),
        9: ("last", 8),
        12: ("last", 9),
        13: ("last", 12),
    }
    assert got[("t", 0, 9)] == Anchor("last", 8, 1008, 3)  # 3, 4 and 5 read before it


def test_partitions_are_kept_apart_and_an_unread_partition_has_no_anchor():
    rows = [("t", 0, 5, 50), ("t", 1, 1, 10), ("u", 0, 7, 70)]
    got = nearest_records([("t", 0, 6), ("t", 1, 6), ("u", 0, 6), ("u", 1, 6)], read(rows))
    assert got[("t", 0, 6)] == Anchor("last", 5, 50, 0)
    assert got[("t", 1, 6)] == Anchor("last", 1, 10, 0)
    assert got[("u", 0, 6)] == Anchor("next", 7, 70, 0)
    assert got[("u", 1, 6)] == NO_ANCHOR


def test_the_search_looks_where_anchors_land_with_the_least_context_they_need():
    """One key per destination partition and anchor timestamp; its context before is the
    least of its anchors' records read before them, at most k. Two source topics renamed
    to one destination topic share its keys; a position with no anchor has none."""
    rows = [("a", 0, o, 1000 + o // 2) for o in range(10)] + [("b", 0, 4, 1002)]
    positions = [("a", 0, c) for c in (1, 3, 5, 8, 9)] + [("b", 0, 9), ("c", 0, 1)]
    records = read(rows)
    found = {
        tp: anchors.nearest_in(committed, records.get(tp))
        for tp, committed in offsets_by_partition(positions).items()
    }
    assert found[("c", 0)].kinds.tolist() == [anchors.NONE]
    renamed = {"a": "d", "b": "d", "c": "e"}
    # a's anchors: offsets 0 (ts 1000, 0 before), 2 (1001, 2), 4 (1002, 4), 7 (1003, 7), 8
    # (1004, 8); b's: offset 4 (1002, 0 before)
    assert anchors.search_positions(found, renamed, k=5) == {
        ("d", 0, 1000): 0,
        ("d", 0, 1001): 2,
        ("d", 0, 1002): 0,
        ("d", 0, 1003): 5,
        ("d", 0, 1004): 5,
    }


def test_nothing_read_gives_no_anchors():
    assert nearest_records([("t", 0, 1)], read([])) == {("t", 0, 1): NO_ANCHOR}


def test_the_distinct_positions_of_all_groups_sorted_as_tuples():
    from ferry.migrate.plan import distinct_positions

    exact = {
        "g1": {("b", 0): 7, ("a", 10): 3, ("a", 2): 30},
        "g2": {("a", 2): 4, ("b", 0): 7},
        "g3": {},
    }
    want = sorted({(t, p, o) for offsets in exact.values() for (t, p), o in offsets.items()})
    assert distinct_positions(exact) == want == [("a", 2, 4), ("a", 2, 30), ("a", 10, 3),
                                                 ("b", 0, 7)]  # fmt: skip
    assert distinct_positions({}) == []
