"""The ferry-kafka data source against a real local broker."""

from __future__ import annotations

import time

import pytest
from chispa import assert_df_equality
from pyspark.sql import functions as F
from pyspark.sql.types import LongType

from ferry import kafka
from ferry.hashing import record_hasher
from ferry.kafka.source import FULL_SCHEMA, OffsetRange, plan_partitions, read_ranges
from ferry.testing.produce import Record, create_topics, produce

pytestmark = pytest.mark.integration

BASE_TS = 1_750_000_000_000


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


def test_reads_exactly_what_was_produced(spark, cluster, topic):
    name, data = topic
    df = read_ranges(
        spark,
        cluster.config,
        [OffsetRange(name, 0, 0, 30), OffsetRange(name, 1, 0, 2)],
        hash_fields=["key", "value"],
    )
    expected = _expected_df(spark, name, 0, *data[0], hashed=True).unionByName(
        _expected_df(spark, name, 1, *data[1], hashed=True)
    )
    assert_df_equality(df, expected, ignore_row_order=True, ignore_nullable=True)


def test_subrange_empty_range_and_range_past_end(spark, cluster, topic):
    name, data = topic
    records, offsets = data[0]
    df = read_ranges(
        spark,
        cluster.config,
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
        nothing = read_ranges(spark, cluster.config, ranges, hash_fields=["key", "value"])
        assert nothing.count() == 0 and "sha256" in nothing.columns


def test_split_ranges_give_the_same_rows(spark, cluster, topic):
    name, _ = topic
    ranges = [OffsetRange(name, 0, 0, 30), OffsetRange(name, 1, 0, 2)]
    planned = plan_partitions(ranges, 7)
    assert all(task.size <= 7 for task in planned)
    assert sum(task.size for task in planned) == 32
    assert len(plan_partitions(ranges, 100, min_partitions=1)) == 1  # small ranges share a task
    whole = read_ranges(spark, cluster.config, ranges, hash_fields=["key", "value", "headers"])
    split = read_ranges(
        spark,
        cluster.config,
        ranges,
        hash_fields=["key", "value", "headers"],
        max_records_per_partition=7,
    )
    assert split.rdd.getNumPartitions() == len(planned)
    assert_df_equality(whole, split, ignore_row_order=True)


def test_headers_and_column_projection(spark, cluster, topic):
    name, _ = topic
    df = read_ranges(
        spark,
        cluster.config,
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


def test_reader_never_joins_or_commits(spark, cluster, topic):
    name, _ = topic
    before = set(kafka.list_groups(kafka.Cluster("c", cluster.config)))
    read_ranges(spark, cluster.config, [OffsetRange(name, 0, 0, 30)]).count()
    after = set(kafka.list_groups(kafka.Cluster("c", cluster.config)))
    assert after == before


def test_unreachable_broker_fails_within_timeout_naming_it(spark):
    from ferry.cli import one_line

    start = time.monotonic()
    with pytest.raises(Exception) as info:
        read_ranges(
            spark,
            {"bootstrap.servers": "127.0.0.1:9"},
            [OffsetRange("gone", 0, 0, 10)],
            cluster="destination",
            timeout_ms=2000,
        ).collect()
    elapsed = time.monotonic() - start
    message = one_line(info.value)
    assert "destination gone[0]" in message and "timed out after 2000 ms" in message, message
    assert elapsed < 20
