"""Reading records against a real local broker: `ferry.kafka.read` on both of its paths (the
driver, and the `ferry-kafka` data source on the executors) gives the same rows, gaps
included; the read loop's reconnect rule and time limit."""

from __future__ import annotations

import dataclasses
import threading
import time

import pytest
from chispa import assert_df_equality
from pyspark.sql import functions as F
from pyspark.sql.types import LongType

from ferry import kafka
from ferry.errors import one_line
from ferry.hashing import record_hasher
from ferry.kafka import Cluster, OffsetRange
from ferry.kafka.source import FULL_SCHEMA, plan_partitions
from ferry.testing.brokers import start_broker
from ferry.testing.produce import Record, create_topics, produce, produce_transactions

pytestmark = pytest.mark.integration

BASE_TS = 1_750_000_000_000
PATHS = ("driver", "spark")


def on(path: str, config: dict, name: str = "c", **settings) -> Cluster:
    """A cluster whose reads `ferry.kafka.read` sends down `path`."""
    limit = 10**9 if path == "driver" else 0
    return Cluster(name, config, driver_max_offsets=limit, **settings)


@pytest.fixture(params=PATHS)
def path(request) -> str:
    return request.param


def _expected_df(spark, topic, partition, records, offsets, hashed=False):
    hasher = record_hasher(["key", "value"])
    rows = []
    for rec, off in zip(records, offsets, strict=True):
        row = {
            "topic": topic,
            "partition": partition,
            "offset": off,
            "timestamp_ms": rec.timestamp_ms,
            "timestamp_type": 0,
            "key": rec.key,
            "value": rec.value,
            "headers": [{"key": k, "value": v} for k, v in rec.headers] or None,
        }
        if hashed:
            row["sha256"] = hasher(rec.key, rec.value, rec.headers)
        rows.append(row)
    fields = [f for f in FULL_SCHEMA.fields if hashed or f.name != "sha256"]
    schema = FULL_SCHEMA.__class__(
        [f if f.name != "timestamp" else f.__class__("timestamp_ms", LongType()) for f in fields]
    )
    df = spark.createDataFrame(rows, schema)
    df = df.withColumn("timestamp", F.timestamp_millis("timestamp_ms")).drop("timestamp_ms")
    return df.select(*[f.name for f in fields])


@pytest.fixture(scope="module")
def topic(cluster):
    """Two partitions with null keys/values, empty values, headers and a 1 MB value."""
    name = f"source-test-{int(time.time() * 1000)}"
    create_topics(cluster.config, {name: 3})
    p0 = [Record(f"k{i}".encode(), f"v{i}".encode(), BASE_TS + i) for i in range(30)]
    p0[3] = Record(None, b"null-key", BASE_TS + 3)
    p0[4] = Record(b"null-value", None, BASE_TS + 4)
    p0[5] = Record(b"empty", b"", BASE_TS + 5)
    p0[6] = Record(b"hdr", b"v", BASE_TS + 6, (("trace", b"abc"), ("empty", None), ("trace", b"2")))
    p1 = [
        Record(b"big", b"x" * 1_000_000, BASE_TS + 100),
        Record(b"after-big", b"y", BASE_TS + 101),
    ]
    off0 = produce(cluster.config, name, 0, p0)
    off1 = produce(cluster.config, name, 1, p1)
    return name, {0: (p0, off0), 1: (p1, off1)}


def test_reads_exactly_what_was_produced(spark, cluster, topic, path):
    name, data = topic
    df = kafka.read(
        spark,
        on(path, cluster.config),
        [OffsetRange(name, 0, 0, 30), OffsetRange(name, 1, 0, 2)],
        hash_fields=["key", "value"],
    )
    expected = _expected_df(spark, name, 0, *data[0], hashed=True).unionByName(
        _expected_df(spark, name, 1, *data[1], hashed=True)
    )
    assert_df_equality(df, expected, ignore_row_order=True, ignore_nullable=True)


def test_subrange_empty_range_and_range_past_end(spark, cluster, topic, path):
    name, data = topic
    records, offsets = data[0]
    c = on(path, cluster.config)
    df = kafka.read(
        spark,
        c,
        [
            OffsetRange(name, 0, 10, 20),  # a middle slice
            OffsetRange(name, 0, 25, 25),  # empty
            OffsetRange(name, 1, 2, 50),  # starts at the end
            OffsetRange(name, 2, 0, 10),  # empty partition, end beyond the high watermark
        ],
    )
    expected = _expected_df(spark, name, 0, records[10:20], offsets[10:20])
    assert_df_equality(df, expected, ignore_row_order=True, ignore_nullable=True)
    # nothing but empty ranges (or none at all) is an empty DataFrame, not an error
    for ranges in ([OffsetRange(name, 0, 25, 25), OffsetRange(name, 2, 0, 10)], []):
        nothing = kafka.read(spark, c, ranges, hash_fields=["key", "value"])
        assert nothing.count() == 0 and "sha256" in nothing.columns


def test_split_ranges_give_the_same_rows(spark, cluster, topic):
    name, _ = topic
    ranges = [OffsetRange(name, 0, 0, 30), OffsetRange(name, 1, 0, 2)]
    planned = plan_partitions(ranges, 7)
    assert all(task.size <= 7 for task in planned)
    assert sum(task.size for task in planned) == 32
    assert len(plan_partitions(ranges, 100, min_partitions=1)) == 1  # small ranges share a task
    fields = ["key", "value", "headers"]
    whole = kafka.read(spark, on("driver", cluster.config), ranges, hash_fields=fields)
    split_cluster = on("spark", cluster.config, max_records_per_task=7)
    split = kafka.read(spark, split_cluster, ranges, hash_fields=fields)
    assert split.rdd.getNumPartitions() == len(planned)
    assert_df_equality(whole, split, ignore_row_order=True)


def test_headers_and_column_projection(spark, cluster, topic, path):
    name, _ = topic
    df = kafka.read(
        spark,
        on(path, cluster.config),
        [OffsetRange(name, 0, 6, 7)],
        columns=["offset", "headers"],
        hash_fields=["key", "value", "headers"],
        ignore_headers=["trace"],
    )
    assert df.columns == ["offset", "headers", "sha256"]
    row = df.collect()[0]
    assert [(h["key"], h["value"]) for h in row.headers] == [
        ("trace", b"abc"),
        ("empty", None),
        ("trace", b"2"),
    ]
    # ignored headers leave the hash equal to one computed without them
    assert row.sha256 == record_hasher(["key", "value", "headers"])(b"hdr", b"v", [("empty", None)])


@pytest.fixture(scope="module")
def gappy(cluster):
    """One partition with offsets that hold no record: plain records, a committed transaction,
    an aborted one, plain records, a committed transaction last (the log ends in its marker).
    Returns (topic, log end)."""
    name = f"gappy-{int(time.time() * 1000)}"
    create_topics(cluster.config, {name: 1})

    def records(n: int, tag: str) -> list[Record]:
        return [Record(f"{tag}{i}".encode(), f"{tag}-{i}".encode(), BASE_TS + i) for i in range(n)]

    produce(cluster.config, name, 0, records(5, "a"))
    produce_transactions(cluster.config, name, 0, [records(3, "t")], commit=True)
    produce_transactions(cluster.config, name, 0, [records(2, "x")], commit=False)
    produce(cluster.config, name, 0, records(4, "b"))
    produce_transactions(cluster.config, name, 0, [records(2, "u")], commit=True)
    # 5 + (3 + marker) + (2 + marker) + 4 + (2 + marker). A commit returns before its markers
    # are written to the partition: a log end read at once was one short in a loaded run.
    layout, deadline, c = 19, time.monotonic() + 30, Cluster("c", cluster.config)
    while (end := kafka.watermarks(c, [(name, 0)])[(name, 0)][1]) < layout:
        assert time.monotonic() < deadline, f"the last marker never reached {name}: log end {end}"
        time.sleep(0.1)
    return name, end


@pytest.mark.parametrize("isolation", ["read_committed", "read_uncommitted"])
def test_driver_and_spark_give_identical_rows_across_gaps(spark, cluster, gappy, isolation):
    """Range boundaries on records, on transaction markers and past the log end, read both
    ways: the same rows; and with `to_next_record`, the same record after each range's end."""
    name, end = gappy
    ranges = [OffsetRange(name, 0, s, e) for s, e in ((0, 3), (4, 9), (9, 12), (13, end + 5))]
    singles = [OffsetRange(name, 0, o, o + 1) for o in (8, 11, end - 1)]  # 8, 11, end - 1: markers

    def rows(path: str, ranges: list[OffsetRange], to_next_record: bool = False) -> list:
        c = on(path, cluster.config, isolation_level=isolation)
        df = kafka.read(spark, c, ranges, hash_fields=["key"], to_next_record=to_next_record)
        return sorted(df.collect())

    read = rows("driver", ranges)
    assert read == rows("spark", ranges)
    offsets = [r.offset for r in read]
    assert offsets[:7] == [0, 1, 2, 4, 5, 6, 7], offsets  # 3 is outside, 8 a marker
    assert not {8, 11, end - 1} & set(offsets) and offsets[-1] == end - 2
    # each single offset is a marker: the record after it, or none after the last
    after = rows("driver", singles, to_next_record=True)
    assert after == rows("spark", singles, to_next_record=True)
    every = [r.offset for r in rows("driver", [OffsetRange(name, 0, 0, end)])]
    assert [r.offset for r in after] == [min(o for o in every if o > m) for m in (8, 11)]
    assert rows("driver", singles) == rows("spark", singles) == []
    # a range whose last offset holds a record: that record is the one at or after it, and the
    # record after the range (3) is not read on to
    whole = [OffsetRange(name, 0, 0, 3)]
    assert [r.offset for r in rows("driver", whole, to_next_record=True)] == [0, 1, 2]
    assert rows("spark", whole, to_next_record=True) == rows("driver", whole, to_next_record=True)


def test_many_ranges_of_a_partition_skip_their_gaps_read_on_or_sought(spark, cluster, path):
    """Hundreds of small ranges on one partition (many groups' positions): small gaps are read
    on and their records dropped, gaps of large records are sought past; either way exactly
    the ranges' records, each once per range that holds it (overlaps are sought back to)."""
    name = f"many-ranges-{int(time.time() * 1000)}"
    create_topics(cluster.config, {name: 1})
    small = [Record(b"k", f"s{i}".encode(), BASE_TS + i) for i in range(600)]
    large = [Record(b"k", bytes([i]) * 100_000, BASE_TS + 600 + i) for i in range(12)]
    produce(cluster.config, name, 0, small + large + small[:30])
    ranges = [OffsetRange(name, 0, o, o + 2) for o in range(0, 600, 3)]  # gaps of one record
    ranges += [OffsetRange(name, 0, o, o + 5) for o in range(7, 600, 97)]  # overlapping them
    ranges += [OffsetRange(name, 0, 600, 601), OffsetRange(name, 0, 606, 607)]  # 500 kB apart
    ranges += [OffsetRange(name, 0, 610, 615), OffsetRange(name, 0, 630, 700)]
    wanted = sorted(o for r in ranges for o in range(r.start, min(r.end, 642)))
    df = kafka.read(spark, on(path, cluster.config), ranges, columns=["offset", "value"])
    got = sorted((r.offset, r.value) for r in df.collect())
    every = [*small, *large, *small[:30]]
    assert got == [(o, every[o].value) for o in wanted]


def test_reader_never_joins_or_commits(spark, cluster, topic, path):
    name, _ = topic
    before = set(kafka.list_groups(Cluster("c", cluster.config)))
    kafka.read(spark, on(path, cluster.config), [OffsetRange(name, 0, 0, 30)]).count()
    after = set(kafka.list_groups(Cluster("c", cluster.config)))
    assert after == before


def test_unreachable_broker_fails_within_timeout_naming_it(spark, path):
    gone = on(path, {"bootstrap.servers": "127.0.0.1:9"}, "destination", timeout_s=2)
    start = time.monotonic()
    with pytest.raises(Exception) as info:
        kafka.read(spark, gone, [OffsetRange("gone", 0, 0, 10)]).collect()
    elapsed = time.monotonic() - start
    message = one_line(info.value)
    assert message.startswith("destination: timed out after 2000 ms reading gone[0]"), message
    assert elapsed < 20


@pytest.fixture(scope="module")
def proxied():
    """A broker reached only through a FaultProxy, with one partition of 3,000 records."""
    broker = start_broker("source-faults", proxied=True)
    try:
        create_topics(broker.config, {"big": 1})
        rows = [Record(f"k{i}".encode(), b"v" * 200, BASE_TS + i) for i in range(3000)]
        # Batches of a few records: Kafka hands out whole batches, so a small fetch reads a
        # few records and a read of this partition takes many fetches.
        produce({**broker.config, "batch.size": 4096}, "big", 0, rows)
        yield broker
    finally:
        broker.stop()


BIG = [OffsetRange("big", 0, 0, 3000)]
BIG_ROWS = [(0, i) for i in range(3000)]


@pytest.mark.faults
def test_reads_survive_dropped_connections_and_fail_when_the_broker_is_gone(spark, proxied, path):
    """Connections dropped mid-read, and the cluster unreachable for a while, cost no rows;
    gone for good, the read fails after the reader timeout, naming the partition."""
    c = on(path, proxied.config, "proxied", timeout_s=8)
    dropped = proxied.proxy.arm(1, "drop")  # at the first fetch request
    got = kafka.read(spark, c, BIG, columns=["partition", "offset"]).collect()
    assert dropped.is_set() and sorted(tuple(r) for r in got) == BIG_ROWS

    proxied.proxy.cut()  # away for 3 s, then back
    threading.Timer(3, proxied.proxy.restore).start()
    got = kafka.read(spark, c, BIG, columns=["partition", "offset"]).collect()
    assert sorted(tuple(r) for r in got) == BIG_ROWS

    proxied.proxy.cut()
    start = time.monotonic()
    try:
        with pytest.raises(Exception) as info:
            kafka.read(spark, dataclasses.replace(c, timeout_s=3), BIG).collect()
    finally:
        proxied.proxy.restore()
    message = one_line(info.value)
    assert message.startswith("proxied: timed out after 3000 ms reading big[0]"), message
    assert time.monotonic() - start < 20


@pytest.mark.faults
def test_a_stalled_read_resumes_on_a_fresh_consumer_where_it_stopped(proxied):
    """The reconnect rule: no progress for a quarter of the timeout replaces the consumer,
    which resumes after the last record seen (no record twice, none missing)."""
    # Small fetches, no prefetching: the read is still going when the cluster goes away.
    small = {"fetch.max.bytes": 4096, "message.max.bytes": 4096, "queued.min.messages": 1}
    c = Cluster(
        "proxied", {**proxied.config, **small, "max.partition.fetch.bytes": 4096}, timeout_s=8
    )
    offsets: list[int] = []
    with kafka.RangeReader(c) as reader:
        # 400 records, some 22 fetches of 4 KiB: the cut comes after the first. (Without
        # prefetching, batches come up to a second apart: the whole partition, 3,000 records,
        # took 77 s.)
        for _, messages in reader.read([OffsetRange("big", 0, 0, 400)]):
            if not offsets:  # the cluster goes away after the first records
                proxied.proxy.cut()
                threading.Timer(3, proxied.proxy.restore).start()
            offsets += [m.offset() for m in messages]
        assert reader.renewals >= 1
    assert offsets == list(range(400))


def two_partitions(cluster, prefix: str, n: int) -> str:
    """A new topic of two partitions of `n` records each (offset i: value vi, BASE_TS + i)."""
    name = f"{prefix}-{int(time.time() * 1000)}"
    create_topics(cluster.config, {name: 2})
    for p in (0, 1):
        produce(cluster.config, name, p, [Record(b"k", f"v{i}".encode(), BASE_TS + i)
                                          for i in range(n)])  # fmt: skip
    return name


def test_a_kept_read_is_read_once(spark, cluster, path):
    # The records are deleted from the topic once the read returns: every later use of its
    # DataFrame must still see them all (kept in memory or in Spark's cache, not read again).
    from ferry.testing.produce import delete_records

    name = two_partitions(cluster, f"kept-{path}", 20)
    df = kafka.read(
        spark,
        on(path, cluster.config),
        [OffsetRange(name, 0, 0, 20), OffsetRange(name, 1, 5, 20)],
        columns=["topic", "partition", "offset", "timestamp", "value"],
        hash_fields=["key", "value"],
        keep=True,
    )
    delete_records(cluster.config, {(name, 0): 20, (name, 1): 20})
    read = [(r.partition, r.offset) for r in df.select("partition", "offset").collect()]
    assert sorted(read) == [*((0, o) for o in range(20)), *((1, o) for o in range(5, 20))]
    assert df.count() == 35
    assert df.filter(F.col("partition") == 1).agg(F.min("offset")).first()[0] == 5


def test_read_arrow_gives_the_rows_read_gives_on_either_path(spark, cluster, path):
    name = two_partitions(cluster, f"arrow-{path}", 12)
    ranges = [OffsetRange(name, 0, 2, 12), OffsetRange(name, 1, 0, 7)]
    options = {"columns": ["topic", "partition", "offset", "timestamp"],
               "hash_fields": ["key", "value"]}  # fmt: skip
    c = on(path, cluster.config)
    table = kafka.read_arrow(spark, c, ranges, **options)
    assert table.column_names == ["topic", "partition", "offset", "timestamp", "sha256"]
    millis = [int(t.timestamp() * 1000) for t in table["timestamp"].to_pylist()]
    assert millis == [BASE_TS + o for o in table["offset"].to_pylist()]
    keys = ["topic", "partition", "offset", "sha256"]
    got = sorted(zip(*(table[col].to_pylist() for col in keys), strict=True))
    rows = kafka.read(spark, c, ranges, **options).select(*keys).collect()
    assert got == sorted(tuple(r) for r in rows) and len(got) == 17
