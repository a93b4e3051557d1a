"""Context located on the driver (`ferry.migrate.context`) and the fingerprint it holds
(`ferry.hashing.fingerprints`): plain pytest on numpy arrays and Arrow tables (the context
cut from them in Spark: tests/unit/test_matching.py)."""

from __future__ import annotations

import hashlib

import numpy as np
import pyarrow as pa
import pytest

from ferry import hashing
from ferry.migrate import context
from ferry.migrate.anchors import PartitionRecords

TP = ("t", 0)


def records_at(keys) -> context.RecordsAt:
    """`RecordsAt` of (partition, offset or None) keys, in their order."""
    rows: dict = {}
    for row, (tp, offset) in enumerate(keys):
        if offset is not None:
            rows.setdefault(tp, []).append(row)
    return context.RecordsAt(
        len(keys),
        {
            tp: (np.asarray(members, np.int64), np.asarray([keys[r][1] for r in members], np.int64))
            for tp, members in rows.items()
        },
    )


def part(offsets: list[int]) -> PartitionRecords:
    """A partition read at these offsets; each record's fingerprint is its offset + 1000."""
    o = np.asarray(offsets, dtype=np.int64)
    return PartitionRecords(o, o * 10, o + 1000)


def test_a_record_is_located_among_the_records_read_across_gaps():
    # compaction left gaps: 5 is the 4th record read (index 3), its segment [0, 10) runs
    # from index 0 to 5
    records = part([0, 1, 2, 5, 6, 9])
    at, first, last = context.locate(records, [(0, 10)], np.array([5, 0, 5]))
    assert (at.tolist(), first.tolist(), last.tolist()) == ([3, 0, 3], [0, 0, 0], [5, 5, 5])


def test_a_segment_is_its_read_interval():
    # two intervals read, [0, 4) and [10, 14): nothing is known between them
    records = part([0, 1, 2, 3, 10, 11, 12, 13])
    at, first, last = context.locate(records, [(0, 4), (10, 14)], np.array([3, 10, 11]))
    assert (at.tolist(), first.tolist(), last.tolist()) == ([3, 4, 5], [0, 4, 4], [3, 7, 7])


def test_a_record_not_read_cannot_be_located():
    with pytest.raises(ValueError, match="not read"):
        context.locate(part([0, 1, 3]), [(0, 4)], np.array([2]))
    with pytest.raises(ValueError, match="not read"):
        context.locate(part([0, 1]), [(0, 4)], np.array([3]))


def test_locate_each_keeps_the_keys_order_and_gives_none_nulls():
    records = {TP: part([0, 1, 2]), ("u", 1): part([7, 8])}
    keys = [(("u", 1), 8), (TP, 0), (TP, None), (TP, 2)]
    at, first, last = context.locate_each(
        records, {TP: [(0, 3)], ("u", 1): [(7, 9)]}, records_at(keys)
    )
    assert at.to_pylist() == [1, 0, None, 2]
    assert first.to_pylist() == [0, 0, None, 0] and last.to_pylist() == [1, 2, None, 2]


def test_the_possible_candidates_share_an_anchors_fingerprint():
    hashes = pa.array([b"h0", b"h1", b"h2", b"h3"])
    records = {TP: part([0, 1, 2, 3])._replace(hashes=hashes), ("u", 0): part([0, 1])}
    wanted = context.with_fingerprint_in(records, np.array([1001, 1003]), [TP, ("v", 0)])
    assert {tp: w.tolist() for tp, w in wanted.items()} == {TP: [1, 3]}
    table = context.index_table(records, {TP: [(0, 4)]}, wanted)
    assert table.column_names == list(context.INDEX_FIELDS)
    # each located with the timestamp and hash it is joined on (part(): timestamp 10 × offset)
    assert table.to_pylist() == [
        {"topic": "t", "partition": 0, "offset": 1, "timestamp_ms": 10, "sha256": b"h1",
         "at": 1, "first": 0, "last": 3},
        {"topic": "t", "partition": 0, "offset": 3, "timestamp_ms": 30, "sha256": b"h3",
         "at": 3, "first": 0, "last": 3},
    ]  # fmt: skip
    with pytest.raises(ValueError, match="without hashes"):  # a candidate needs its hash
        context.index_table(records, {("u", 0): [(0, 2)]}, {("u", 0): [1]})
    prints = context.fingerprint_table(records, [TP, ("v", 0)])
    expected = {"topic": "t", "partition": 0, "fingerprints": [1000, 1001, 1002, 1003]}
    assert prints.to_pylist() == [expected]
    assert context.index_table(records, {}, {}).num_rows == 0


def test_a_fingerprint_is_the_hashs_first_8_bytes_big_endian_signed():
    hashes = [hashlib.sha256(v).digest() for v in (b"a", b"b")] + [
        b"\xff" * 32,
        b"\x80" + bytes(31),
    ]
    prints = hashing.fingerprints(pa.chunked_array([pa.array(hashes[:1]), pa.array(hashes[1:])]))
    expected = [int.from_bytes(x[:8], "big", signed=True) for x in hashes]
    assert prints.tolist() == expected and prints.tolist()[2:] == [-1, -(2**63)]
    # the first 8 bytes alone (what a Spark read brings to the driver) give the same
    assert hashing.fingerprints(pa.array([x[:8] for x in hashes])).tolist() == expected
    with pytest.raises(ValueError, match="shorter"):
        hashing.fingerprints(pa.array([b"abc"]))


def test_fingerprints_at_keeps_the_order_asked_across_partitions():
    records = {("t", 0): part([0, 1, 2, 5]), ("t", 1): part([3, 4, 7])}
    keys = [(("t", 1), 7), (("t", 0), 5), (("t", 1), 3), (("t", 0), 0), (("t", 0), 5)]
    prints = context.fingerprints_at(records, records_at(keys))
    assert prints.tolist() == [1007, 1005, 1003, 1000, 1005]
    assert context.fingerprints_at(records, records_at([])).tolist() == []


def test_hashes_at_picks_each_records_hash_in_the_order_asked():
    from ferry.migrate import anchors

    read = pa.table(
        {
            "topic": ["t", "t", "u", "t"],
            "partition": pa.array([0, 0, 0, 0], pa.int32()),
            "offset": [7, 3, 5, 4],
            "timestamp_ms": [1, 2, 3, 4],
            "sha256": [b"h7", b"h3", b"u5", b"h4"],
        }
    )
    records = anchors.records_by_partition(read)  # sorted per partition, hashes sliced along
    keys = [(("u", 0), 5), (("t", 0), 3), (("t", 0), None), (("t", 0), 7), (("t", 0), 4)]
    hashes = context.hashes_at(records, records_at(keys))
    assert hashes.to_pylist() == [b"u5", b"h3", None, b"h7", b"h4"]
    assert context.hashes_at(records, records_at([(("t", 0), None)])).to_pylist() == [None]
    with pytest.raises(ValueError, match="not read"):
        context.hashes_at(records, records_at([(("t", 0), 6)]))
    unhashed = anchors.records_by_partition(read.drop_columns(["sha256"]))
    with pytest.raises(ValueError, match="not read"):
        context.hashes_at(unhashed, records_at([(("t", 0), 3)]))
