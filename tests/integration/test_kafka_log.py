"""Apache Kafka's own log under the real jobs: what the stand-in broker could not do.

- DeleteRecords moving the log start past committed offsets, on the source and on the
  destination, and the lag `groups describe` and `lag-snapshot` report against it;
- a compacted topic cleaned by Kafka's log cleaner (gaps in the offsets, on the source, on
  the destination, or both), migrated across the gaps;
- aborted transactions, which Kafka hides from read_committed readers (records and markers
  take offsets no reader sees), on the source and on the destination.

Every migration is checked by reading the destination back: a read_committed consumer of the
destination starting at the committed offset must see, first, the copy of the first record a
read_committed consumer of the source sees at or after the group's committed offset.
"""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import yaml
from confluent_kafka import Consumer, KafkaError, TopicPartition

from ferry import kafka
from ferry.testing.brokers import start_broker
from ferry.testing.produce import (
    Record,
    commit_offsets,
    create_topics,
    delete_records,
    produce,
    produce_transactions,
)

from .jobrunner import run_job, write_migrate_config

# Clusters of its own (a log cleaner that looks for work every 100 ms): `make test-slow`.
pytestmark = [pytest.mark.integration, pytest.mark.slow]

BASE = 1_760_000_000_000
STEP_MS = 100  # records 100 ms apart: a 2 s window holds about 20 of them
MATCHING = {"window_before_ms": 2000, "window_after_ms": 2000}
READER = {"timeout_ms": 15000}

Visible = tuple[int, bytes | None, bytes | None, int]  # (offset, key, value, timestamp)


def records(tag: str, n: int, start: int = 0) -> list[Record]:
    return [
        Record(f"k{i % 5}".encode(), f"{tag}-{i}".encode(), BASE + i * STEP_MS)
        for i in range(start, start + n)
    ]


def visible(config: dict, topic: str, start: int = 0, partition: int = 0) -> list[Visible]:
    """Every record a read_committed consumer of the partition sees from `start` to its end
    (an independent plain consumer, not Ferry's reader)."""
    consumer = Consumer(
        {
            **config,
            "group.id": "test-read-back",
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "log_level": 0,
        }
    )
    consumer.assign([TopicPartition(topic, partition, start)])
    seen: list[Visible] = []
    deadline = time.monotonic() + 30
    try:
        while True:
            assert time.monotonic() < deadline, f"reading {topic}[{partition}] timed out"
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    return seen
                raise AssertionError(f"reading {topic}[{partition}]: {msg.error()}")
            seen.append((msg.offset(), msg.key(), msg.value(), msg.timestamp()[1]))
    finally:
        consumer.close()


def next_record(config: dict, topic: str, offset: int) -> tuple | None:
    """(key, value) of the first record a read_committed consumer sees at or after `offset`."""
    rest = visible(config, topic, offset)
    return rest[0][1:3] if rest else None


def committed(broker, group: str) -> dict:
    return kafka.committed_offsets(kafka.Cluster("c", broker.config), [group])[group]


def plan_rows(result) -> dict[str, dict]:
    """group → its (only) plan row, from `migrate -o json`."""
    return {r["group"]: r for r in json.loads(result.stdout)}


def assert_lands_exactly(src, dst, src_topic: str, dst_topic: str, group: str, c: int) -> None:
    """The destination group resumes at the copy of the source group's next record."""
    [(key, offset)] = committed(dst, group).items()
    assert key == (dst_topic, 0), group
    assert next_record(dst.config, dst_topic, offset) == next_record(src.config, src_topic, c), (
        group,
        c,
        offset,
    )


# -- DeleteRecords -------------------------------------------------------------------------


def test_delete_records_moves_the_log_start_under_committed_offsets(
    clusters, tmp_path, unique, spark
):
    """Source: DeleteRecords moved `s` to offset 50 under groups committed at 30 (below), 50
    (at) and 70 (above). Below the log start the group resumes at the log start's copy: the
    records it had not read are gone from the source, and the first record it can still
    read is the log start's — where Kafka's consumer resets to (auto.offset.reset=earliest),
    where `kafka-consumer-groups --reset-offsets` and `groups reset` clamp to, and the record
    `groups describe` takes the time lag from. Nothing that still exists on the source is
    skipped; never the destination's log end.

    Destination: the replica of `d1`, `d2`, `d3` had its log start moved to 28, 30 and 40
    under groups committed at 30. 28: the anchor (record 29) and the next record survive,
    exact. 30: the last consumed record's copy is gone, so the position cannot be verified:
    unresolved, nothing committed. 40: the group's next ten records are gone from the
    destination: no offset is exact, nothing committed (never the log start, which would
    silently skip them)."""
    src, dst = clusters
    topics = {name: f"{unique}-{name}" for name in ("s", "d1", "d2", "d3")}
    create_topics(src.config, {t: 1 for t in topics.values()})
    create_topics(dst.config, {t: 1 for t in topics.values()})
    for name, topic in topics.items():
        recs = records(name, 100)
        produce(src.config, topic, 0, recs)
        produce(dst.config, topic, 0, recs)  # a replica from offset 0: the same offsets
    s = topics["s"]
    assert delete_records(src.config, {(s, 0): 50}) == {(s, 0): 50}
    moved = {(topics["d1"], 0): 28, (topics["d2"], 0): 30, (topics["d3"], 0): 40}
    assert delete_records(dst.config, moved) == moved
    groups = {
        f"{unique}-below": (s, 30),
        f"{unique}-at": (s, 50),
        f"{unique}-above": (s, 70),
        f"{unique}-d1": (topics["d1"], 30),
        f"{unique}-d2": (topics["d2"], 30),
        f"{unique}-d3": (topics["d3"], 30),
    }
    for group, (topic, offset) in groups.items():
        commit_offsets(src.config, group, {(topic, 0): offset})
    config = write_migrate_config(
        tmp_path, src, dst, unique, matching=MATCHING, reader=READER
    )

    run = run_job("migrate", "--config", config, "--execute", "-o", "json", "--quiet")
    assert run.code == 1, run.stderr  # d2 and d3 are unresolved
    rows = plan_rows(run)
    expected = {  # group: (status, destination offset)
        f"{unique}-below": ("MATCHED_NEXT", 50),
        f"{unique}-at": ("MATCHED_NEXT", 50),
        f"{unique}-above": ("MATCHED", 70),
        f"{unique}-d1": ("MATCHED", 30),
    }
    for group, (status, offset) in expected.items():
        row = rows[group]
        assert (row["status"], row["destination_offset"]) == (status, offset), row
        assert row["group_status"] == "COMMITTED", row
        topic, c = groups[group]
        assert committed(dst, group) == {(topic, 0): offset}, group
        assert_lands_exactly(src, dst, topic, topic, group, c)
    for group in (f"{unique}-d2", f"{unique}-d3"):
        row = rows[group]
        assert row["group_status"] == "UNRESOLVED", row
        assert row["status"] == "NOT_FOUND" and row["destination_offset"] is None, row
        assert committed(dst, group) == {}, f"{group} was committed below the log start"

    # Lag against the moved log start, as kafka-consumer-groups counts it (log end −
    # committed offset), and time lag from the first record a consumer can still read.
    lag_config = tmp_path / "lag.yaml"
    lag_config.write_text(
        yaml.safe_dump(
            {
                "cluster": {"bootstrap.servers": src.bootstrap},
                "reader": READER,
                "history": {"path": str(tmp_path / "history")},
            }
        )
    )
    pattern = f"{unique}-(below|at|above)"
    stamp = {c: BASE + max(c, 50) * STEP_MS for c in (30, 50, 70)}  # the next readable record
    before = int(time.time() * 1000)
    described = run_job(
        "groups", "describe", "--config", lag_config, "--group", pattern, "-o", "json", "--quiet"
    )
    snapshot = run_job("lag-snapshot", "--config", lag_config, "--group", pattern, "--quiet")
    after = int(time.time() * 1000)
    assert described.code == 0, described.stderr
    assert snapshot.code == 0, snapshot.stderr
    from ferry.lag import history

    snapshot_rows = [
        r.asDict() for r in history.read_history(spark, str(tmp_path / "history")).collect()
    ]
    described_rows = [p for g in json.loads(described.stdout) for p in g["partitions"]]
    for source, rows_of in (("describe", described_rows), ("lag-snapshot", snapshot_rows)):
        assert len(rows_of) == 3, (source, rows_of)
        for row in rows_of:
            c = groups[row["group"]][1]
            where = (source, row["group"])
            assert row["committed_offset"] == c, where
            assert (row["log_start_offset"], row["log_end_offset"]) == (50, 100), where
            assert row["lag"] == 100 - c, where
            assert before - stamp[c] <= row["time_lag_ms"] <= after - stamp[c], where


# -- compaction by the log cleaner ---------------------------------------------------------

# A cleaner that looks for work every 100 ms (Kafka's default: 15 s).
CLEANER = {"log.cleaner.backoff.ms": "100"}
COMPACTED = {
    "cleanup.policy": "compact",
    "segment.ms": "100",  # a batch appended after 100 ms starts a new segment
    "min.cleanable.dirty.ratio": "0.01",
    "min.compaction.lag.ms": "0",
}
N_COMPACTED = 90
SHIFT = 6  # the destination of `both` is a copy of the source from offset 6


def compacted_records() -> list[Record]:
    """Every third record has a key of its own (kept by compaction); the others share two
    hot keys (only their last records are kept): two-offset gaps all along the log."""
    out = []
    for i in range(N_COMPACTED):
        key = f"own-{i}" if i % 3 == 0 else f"hot-{i % 2}"
        out.append(Record(key.encode(), f"c-{i}".encode(), BASE + i * STEP_MS))
    return out


def survivors(recs: list[Record], first_offset: int = 0) -> list[int]:
    """Offsets compaction keeps: the last record of every key."""
    last = {r.key: first_offset + i for i, r in enumerate(recs)}
    return sorted(last.values())


def roll_and_wait_for_cleaning(config: dict, topic: str, expected: list[int]) -> list[Visible]:
    """Close the segments holding the records (a later append starts a new segment), then
    wait until Kafka's log cleaner has compacted them: exactly `expected` and the roller
    record are left."""
    time.sleep(0.3)
    [roller] = produce(config, topic, 0, [Record(b"roller", b"roller", BASE + 10**6)])
    deadline = time.monotonic() + 90
    while True:
        seen = visible(config, topic)
        if [r[0] for r in seen] == [*expected, roller]:
            return seen
        assert time.monotonic() < deadline, (
            f"the log cleaner did not compact {topic}: {len(seen)} records left"
        )
        time.sleep(0.5)


@pytest.fixture(scope="module")
def compacting():
    """Two clusters (source, destination) whose log cleaners look for work every 100 ms."""
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = [
            pool.submit(start_broker, name, settings=CLEANER)
            for name in ("compact-source", "compact-destination")
        ]
    brokers = [f.result() for f in futures if f.exception() is None]
    try:
        assert len(brokers) == 2, [f.exception() for f in futures]
        yield tuple(brokers)
    finally:
        for broker in brokers:
            broker.stop()


def test_compacted_topics_migrate_across_cleaner_gaps(compacting, tmp_path, unique):
    """`both`: source and destination compacted by their cleaners (the destination a copy
    from source offset 6, so the offsets and the gaps differ by 6). `src-only`: the source
    compacted, the destination a contiguous copy of what was left (a replicator started
    after the cleaning). Groups committed inside a gap, on the first record after one, right
    after a record followed by one, and at 0: each must resume at the copy of the first record
kept after its committed offset."""
    src, dst = compacting
    both, src_only = f"{unique}-both", f"{unique}-src-only"
    create_topics(src.config, {both: 1, src_only: 1}, topic_config=COMPACTED)
    create_topics(dst.config, {both: 1}, topic_config=COMPACTED)
    create_topics(dst.config, {src_only: 1})
    recs = compacted_records()
    kept = survivors(recs)
    produce(src.config, both, 0, recs)
    produce(src.config, src_only, 0, recs)
    produce(dst.config, both, 0, recs[SHIFT:])
    with ThreadPoolExecutor(max_workers=3) as pool:
        waits = [
            pool.submit(roll_and_wait_for_cleaning, src.config, both, kept),
            pool.submit(roll_and_wait_for_cleaning, src.config, src_only, kept),
            pool.submit(roll_and_wait_for_cleaning, dst.config, both, survivors(recs[SHIFT:])),
        ]
        left = [w.result() for w in waits]
    left_src, left_dst = left[0], left[2]
    # What the cleaner left has gaps: offsets without a record, on both clusters.
    assert len(left_src) < left_src[-1][0] + 1 and len(left_dst) < left_dst[-1][0] + 1
    produce(dst.config, src_only, 0, [Record(k, v, ts) for _, k, v, ts in left[1]])

    mid = kept[len(kept) // 2]  # a record kept between two gaps (own key, i % 3 == 0)
    assert mid + 1 not in kept and mid + 3 in kept and mid + 4 not in kept
    positions = {
        "in-gap": mid + 2,  # next record mid + 3; last consumed mid
        "after-gap": mid + 3,  # on the first record after a gap
        "before-gap": mid + 1,  # right after a kept record, on a gap
        "next-gap": mid + 4,  # last consumed mid + 3, next mid + 6
        "start": 0,
    }
    groups = {}
    for topic in (both, src_only):
        for name, c in positions.items():
            if topic == both and name == "start":
                continue  # record 0 was never copied there: that group is NOT_FOUND
            group = f"{topic}-{name}"
            groups[group] = (topic, c)
            commit_offsets(src.config, group, {(topic, 0): c})
    # Every group's next record follows a gap on the source, except at 0.
    for _topic, c in groups.values():
        assert c == 0 or c - 1 not in kept or c not in kept
    config = write_migrate_config(
        tmp_path, src, dst, unique, matching=MATCHING, reader=READER
    )

    run = run_job("migrate", "--config", config, "--execute", "-o", "json", "--quiet")
    assert run.code == 0, run.stderr
    rows = plan_rows(run)
    dst_offsets = {
        both: {o: o - SHIFT for o in kept},  # the source offset's copy
        src_only: {o: i for i, o in enumerate(kept)},
    }
    for group, (topic, c) in groups.items():
        row = rows[group]
        assert row["group_status"] == "COMMITTED", row
        before = [o for o in kept if o < c]
        if before:  # the record after the last consumed one's copy
            expected = dst_offsets[topic][before[-1]] + 1
            assert row["status"] == "MATCHED", row
        else:  # consumed nothing: the next record's copy
            expected = dst_offsets[topic][kept[0]]
            assert row["status"] == "MATCHED_NEXT", row
        assert committed(dst, group) == {(topic, 0): expected}, (group, c)
        assert_lands_exactly(src, dst, topic, topic, group, c)


# -- aborted transactions under read_committed ---------------------------------------------


def _abort_on_destination(config: dict, topic: str, n: int) -> list[int]:
    """An aborted transaction of n records of the destination's own (never on the source)."""
    junk = [Record(b"junk", f"junk-{i}".encode(), BASE + 2 * STEP_MS) for i in range(n)]
    return produce_transactions(config, topic, 0, [junk], commit=False)


def test_aborted_transactions_are_skipped_exactly(clusters, tmp_path, unique):
    """Source: plain records, two aborted transactions (records in batches of their own,
    then an abort marker each), a committed transaction, plain records. A read_committed
    reader sees neither the aborted records nor the markers. The destination holds what such
    a reader of the source sees, with an aborted transaction of its own between the copies
    of the last record before the aborted ones and the first after them."""
    src, dst = clusters
    topic = f"{unique}-tx"
    create_topics(src.config, {topic: 1})
    create_topics(dst.config, {topic: 1})
    plain = records("p", 20)
    head = produce(src.config, topic, 0, plain[:10])
    aborted1 = produce_transactions(src.config, topic, 0, [records("a1", 4, 10)], commit=False)
    aborted2 = produce_transactions(src.config, topic, 0, [records("a2", 3, 10)], commit=False)
    tx = produce_transactions(src.config, topic, 0, [records("t", 3, 10)], commit=True)
    tail = produce(src.config, topic, 0, plain[10:])
    # Each transaction is followed by its marker offset.
    assert head == list(range(10)) and aborted1 == [10, 11, 12, 13]
    assert aborted2 == [15, 16, 17] and tx == [19, 20, 21] and tail[0] == 23
    seen = visible(src.config, topic)
    assert [r[0] for r in seen] == [*head, *tx, *tail], "aborted records were read"

    copies = [Record(k, v, ts) for _, k, v, ts in seen]
    produce(dst.config, topic, 0, copies[:10])  # copies of offsets 0..9 at 0..9
    assert _abort_on_destination(dst.config, topic, 2) == [10, 11]  # marker at 12
    produce(dst.config, topic, 0, copies[10:])  # the rest from 13 on
    dst_of = {r[0]: (i if i < 10 else i + 3) for i, r in enumerate(seen)}

    positions = {
        "after-aborted": 10,  # the first aborted record: next record 19, after both aborts
        "mid-aborted": 12,
        "on-marker": 14,  # the first abort marker
        "on-commit-marker": 22,
        "in-tx": 20,
        "past-markers": 19,  # on the first record after them: last consumed is 9
        "start": 0,
    }
    groups = {f"{unique}-{name}": c for name, c in positions.items()}
    for group, c in groups.items():
        commit_offsets(src.config, group, {(topic, 0): c})
    config = write_migrate_config(
        tmp_path, src, dst, unique, matching=MATCHING, reader=READER
    )
    run = run_job("migrate", "--config", config, "--execute", "-o", "json", "--quiet")
    assert run.code == 0, run.stderr
    rows = plan_rows(run)
    for group, c in groups.items():
        before = [r[0] for r in seen if r[0] < c]
        expected = dst_of[before[-1]] + 1 if before else 0
        row = rows[group]
        assert (row["group_status"], row["destination_offset"]) == ("COMMITTED", expected), row
        assert committed(dst, group) == {(topic, 0): expected}, group
        assert_lands_exactly(src, dst, topic, topic, group, c)
    # Three groups resume on the destination's aborted record 10: its reader skips to 13.
    assert next_record(dst.config, topic, 10) == seen[10][1:3]
