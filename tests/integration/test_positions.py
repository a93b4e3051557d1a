"""Next records and time lag at committed positions on a real local broker, where offsets are
missing: transaction markers (commit and abort), aborted records under read_committed, a
partition ending in a marker, positions at the log end.

Transaction markers are offsets without a record, as compaction gaps are (a compacted topic
cleaned by Kafka's log cleaner is tested in test_kafka_log.py). What a reader sees is taken
from a plain consumer reading the whole partition at each isolation level.
"""

from __future__ import annotations

import textwrap
import time

import pytest
from confluent_kafka import Consumer, KafkaError, TopicPartition

from ferry import kafka
from ferry.groups import positions
from ferry.kafka.cluster import Cluster
from ferry.lag import history
from ferry.testing.produce import (
    Record,
    commit_offsets,
    create_topics,
    produce,
    produce_transactions,
)

from .jobrunner import run_job

pytestmark = pytest.mark.integration

BASE = int(time.time() * 1000) - 3_600_000
ISOLATION_LEVELS = ("read_committed", "read_uncommitted")


def transaction(config: dict, topic: str, partition: int, stamps: list[int], commit: bool):
    """One transaction of one-record batches; returns the offsets its records got."""
    records = [Record(None, b"tx", ts) for ts in stamps]
    return produce_transactions(config, topic, partition, [records], commit)


@pytest.fixture(scope="module")
def world(cluster):
    """Partition 0: plain, committed transaction, aborted transaction, plain, committed
    transaction last (the log ends in its commit marker). Partition 1: plain records only.
    Record at offset o is stamped BASE + o seconds."""
    topic = f"pos{int(time.time() * 1000) % 10**8}"
    create_topics(cluster.config, {topic: 2})
    committed: list[int] = []  # offsets a read_committed reader sees
    aborted: list[int] = []

    def plain(partition: int, count: int) -> list[int]:
        start = produced_end(cluster, topic, partition)
        stamps = [BASE + (start + i) * 1000 for i in range(count)]
        return produce(cluster.config, topic, partition, [Record(None, b"p", ts) for ts in stamps])

    def tx(count: int, commit: bool) -> list[int]:
        start = produced_end(cluster, topic, 0)
        stamps = [BASE + (start + i) * 1000 for i in range(count)]
        offsets = transaction(cluster.config, topic, 0, stamps, commit)
        # The coordinator writes the marker after the commit (or abort) returns: wait for it,
        # or the next stamps are computed from an end without it (one second off each).
        deadline = time.monotonic() + 30
        while produced_end(cluster, topic, 0) < offsets[-1] + 2:
            assert time.monotonic() < deadline, "the transaction marker never landed"
            time.sleep(0.05)
        return offsets

    committed += plain(0, 4)
    committed += tx(3, commit=True)
    aborted += tx(2, commit=False)
    committed += plain(0, 2)
    committed += tx(2, commit=True)
    end = produced_end(cluster, topic, 0)
    # Markers take offsets: everything below the end that is no record is a marker.
    markers = sorted(set(range(end)) - set(committed) - set(aborted))
    assert len(markers) == 3 and markers[-1] == end - 1, (committed, aborted, markers)
    visible = {level: read_all(cluster, topic, level) for level in ISOLATION_LEVELS}
    assert set(visible["read_committed"]) >= set(committed), visible
    assert visible["read_uncommitted"] == sorted(committed + aborted), visible
    spread = plain(1, 30)
    return {
        "topic": topic,
        "end": end,
        "visible": visible,
        "markers": markers,
        "aborted": aborted,
        "spread": spread,
    }


def read_all(cluster, topic: str, isolation: str) -> list[int]:
    """Offsets a plain consumer at this isolation level reads from partition 0."""
    consumer = Consumer(
        {
            **cluster.config,
            "group.id": f"{topic}-probe",
            "isolation.level": isolation,
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
        }
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    seen = []
    try:
        while True:
            msg = consumer.poll(10)
            assert msg is not None, "timed out reading the transactional partition"
            if msg.error() is not None:
                assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
                return seen
            seen.append(msg.offset())
    finally:
        consumer.close()


def produced_end(cluster, topic: str, partition: int) -> int:
    bounds = kafka.watermarks(Cluster("c", cluster.config), [(topic, partition)])
    return bounds[(topic, partition)][1]


def expected_next(visible: list[int], position: int) -> tuple[int, int] | None:
    after = [o for o in visible if o >= position]
    return (after[0], BASE + after[0] * 1000) if after else None


def read_each(cluster: Cluster, wanted: set) -> dict:
    """The reference: each position's first record read on its own (one probe per position,
    one position per partition at a time)."""
    out = {}
    pending = sorted(wanted)
    while pending:
        round_ = {}
        for t, p, o in pending:
            round_.setdefault((t, p), o)
        for (t, p), found in kafka.first_records_at(cluster, round_).items():
            out[(t, p, round_[(t, p)])] = found
        pending = [w for w in pending if w not in out]
    return out


@pytest.mark.parametrize("isolation", ISOLATION_LEVELS)
@pytest.mark.parametrize(
    "max_gap, driver_max_offsets",
    [(1_000, 250_000), (0, 250_000), (2, 0)],
    ids=["one-span-driver", "span-per-position-driver", "small-spans-spark"],
)
def test_every_position_finds_the_first_visible_record_at_or_after_it(
    spark, cluster, world, isolation, max_gap, driver_max_offsets
):
    topic, end = world["topic"], world["end"]
    c = Cluster(
        "c",
        cluster.config,
        timeout_s=10,
        isolation_level=isolation,
        driver_max_offsets=driver_max_offsets,
    )
    wanted = {(topic, 0, o) for o in range(end)} | {(topic, 1, o) for o in (0, 1, 14, 28, 29)}
    found = positions.next_records(spark, c, wanted, max_gap=max_gap)
    visible = {0: world["visible"][isolation], 1: world["spread"]}
    expected = {(t, p, o): expected_next(visible[p], o) for t, p, o in wanted}
    assert found == expected
    # The same as reading each position on its own.
    assert found == read_each(c, wanted)


def test_snapshot_time_lag_at_markers_aborted_records_and_log_end(spark, cluster, world, tmp_path):
    topic, end = world["topic"], world["end"]
    commit_marker, abort_marker, last_marker = world["markers"]
    at = {  # group -> committed offset on partition 0
        "first": 0,
        "commit-marker": commit_marker,  # next record is the first after the marker
        "aborted": world["aborted"][0],  # on Apache Kafka: skipped up to after the abort
        "abort-marker": abort_marker,
        "last-marker": last_marker,  # nothing visible after it: caught up, time lag 0
        "log-end": end,
    }
    prefix = f"{topic}-g"
    for name, offset in at.items():
        commit_offsets(cluster.config, f"{prefix}-{name}", {(topic, 0): offset, (topic, 1): 7})
    config = tmp_path / "lag.yaml"
    config.write_text(
        textwrap.dedent(
            f"""\
            cluster:
              bootstrap.servers: {cluster.bootstrap}
            reader:
              timeout_ms: 10000
            history:
              path: {tmp_path / "history"}
            """
        )
    )
    result = run_job("lag-snapshot", "--config", config, "--group", f"{prefix}-.*")
    assert result.code == 0, result.stderr
    assert "snapshot of 6 groups: 12 group partitions over 2 partitions" in result.stderr
    assert "reading the next record of 6 positions: 2 spans over 2 partitions" in result.stderr
    history_df = history.read_history(spark, str(tmp_path / "history"))
    rows = [r.asDict() for r in history_df.collect()]
    assert len(rows) == 12
    visible = world["visible"]["read_committed"]
    for row in rows:
        name = row["group"][len(prefix) + 1 :]
        snapshot_ms = round(row["snapshot_time"].timestamp() * 1000)
        if row["partition"] == 1:
            assert row["time_lag_ms"] == snapshot_ms - (BASE + 7 * 1000), name
            continue
        record = expected_next(visible, at[name])
        want = 0 if record is None else snapshot_ms - record[1]
        assert (row["committed_offset"], row["lag"]) == (at[name], end - at[name]), name
        assert row["time_lag_ms"] == want, name
    assert {r["group"][len(prefix) + 1 :] for r in rows if r["time_lag_ms"] == 0} == {
        "last-marker",
        "log-end",
    }
