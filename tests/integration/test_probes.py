"""Timestamp lookups on Apache Kafka: the answer is always the first record at least as new as
the target, whatever the spacing of timestamps, and also where Kafka's own answer is a
transaction marker (markers carry the broker's clock, the records their producer's CreateTime).
"""

from __future__ import annotations

import pytest

from ferry import kafka
from ferry.kafka.cluster import Cluster
from ferry.testing.produce import Record, create_topics, produce, produce_transactions

pytestmark = pytest.mark.integration

BASE = 1_740_000_000_000


def stamps() -> dict[str, list[int]]:
    return {
        "even": [BASE + i for i in range(600)],
        "busy": [BASE + i // 10 for i in range(600)],  # ten records a millisecond
        "bursty": [BASE + (i // 50) * 1000 + i % 50 for i in range(600)],  # bursts, idle gaps
        "skewed": [BASE + i * i for i in range(600)],  # timestamps ever further apart
    }


def test_offsets_for_timestamps_finds_the_first_record_at_least_as_new(cluster, unique):
    layout = stamps()
    topics = {f"{unique}-{name}": ts for name, ts in layout.items()}
    create_topics(cluster.config, {t: 1 for t in topics})
    offsets = {}
    for topic, ts in topics.items():
        offsets[topic] = produce(
            cluster.config, topic, 0, [Record(b"k", f"{i}".encode(), t) for i, t in enumerate(ts)]
        )
    c = Cluster("probe", cluster.config)
    for probe_round in range(12):
        targets, expected = {}, {}
        for topic, ts in topics.items():
            # before everything, exact hits, between records, inside bursts, after everything
            pick = [ts[0] - 5, ts[0], ts[-1], ts[-1] + 1]
            pick += [ts[(probe_round * 53 + j * 97) % len(ts)] + j % 2 for j in range(4)]
            target = pick[probe_round % len(pick)]
            targets[(topic, 0)] = target
            first = next((i for i, t in enumerate(ts) if t >= target), None)
            expected[(topic, 0)] = None if first is None else offsets[topic][first]
        assert kafka.offsets_for_timestamps(c, targets) == expected, probe_round


def test_many_timestamps_of_each_partition_are_looked_up_at_once(cluster, unique):
    """Every target of every partition in one lockstep lookup (one ListOffsets per layer, one
    read per round): each answer is the first record at least as new, as one at a time."""
    layout = stamps()
    topics = {f"{unique}-many-{name}": ts for name, ts in layout.items()}
    create_topics(cluster.config, {t: 1 for t in topics})
    targets, expected = {}, {}
    for topic, ts in topics.items():
        offsets = produce(
            cluster.config, topic, 0, [Record(b"k", f"{i}".encode(), t) for i, t in enumerate(ts)]
        )
        picks = {ts[0] - 5, ts[0], ts[-1], ts[-1] + 1, *(ts[j * 37] + j % 3 for j in range(16))}
        targets[(topic, 0)] = picks
        for target in picks:
            first = next((i for i, t in enumerate(ts) if t >= target), None)
            expected[(topic, 0, target)] = None if first is None else offsets[first]
    c = Cluster("probe", cluster.config)
    assert kafka.offsets_for_many_timestamps(c, targets) == expected


def test_probes_read_at_the_reader_isolation_level(cluster, unique):
    """A record of a transaction still open lies past the last stable offset: a read_committed
    probe does not see it, a read_uncommitted one does (`reader.isolation_level`)."""
    from confluent_kafka import Producer

    topic = f"{unique}-open"
    create_topics(cluster.config, {topic: 1})
    produce(cluster.config, topic, 0, [Record(b"k", b"settled", BASE)])
    producer = Producer({**cluster.config, "transactional.id": f"{topic}-tx", "linger.ms": 0})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, key=b"k", value=b"open", partition=0, timestamp=BASE + 10)
    producer.flush(10)
    try:
        seen = {}
        for level in ("read_committed", "read_uncommitted"):
            c = Cluster("probe", cluster.config, timeout_s=10, isolation_level=level)
            seen[level] = (
                kafka.first_records_at(c, {(topic, 0): 1}),
                kafka.offsets_for_timestamps(c, {(topic, 0): BASE + 5}, {(topic, 0): (0, 2)}),
            )
        assert seen["read_committed"] == ({(topic, 0): None}, {(topic, 0): None})
        assert seen["read_uncommitted"] == ({(topic, 0): (1, BASE + 10)}, {(topic, 0): 1})
    finally:
        producer.abort_transaction(10)


def test_a_marker_newer_than_the_records_is_not_taken_for_a_record(cluster, unique):
    """Kafka answers a lookup with the first offset whose record or marker is at least as new:
    on a transactional topic of older CreateTimes (a replicator's copies), that is a commit
    marker before the record. The lookup still lands on the record."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient, OffsetSpec

    topic = f"{unique}-markers"
    create_topics(cluster.config, {topic: 1})
    records = [Record(b"k", f"{i}".encode(), BASE + i) for i in range(12)]
    got = produce_transactions(cluster.config, topic, 0, [records[:6], records[6:]])
    assert got == [*range(6), *range(7, 13)]  # a marker at 6, another at 13
    target = BASE + 8  # record 8, at offset 9
    tp = TopicPartition(topic, 0)
    admin = AdminClient(cluster.config)  # kept: a destroyed client never answers its futures
    kafka_answer = admin.list_offsets({tp: OffsetSpec.for_timestamp(target)})
    assert kafka_answer[tp].result(timeout=30).offset == 6  # the first marker: a lower bound
    c = Cluster("probe", cluster.config)
    assert kafka.offsets_for_timestamps(c, {(topic, 0): target}) == {(topic, 0): 9}
