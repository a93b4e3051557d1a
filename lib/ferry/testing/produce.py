"""Produce test data in order, and commit offsets for test groups, on the local Apache Kafka
clusters (`ferry.testing.brokers`).

Producers are idempotent, so records land in the order given even when a request is retried
(a fresh topic's first requests often are, while its leader is elected).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import pairwise

Header = tuple[str, bytes | None]


@dataclass(frozen=True)
class Record:
    key: bytes | None
    value: bytes | None
    timestamp_ms: int | None = None
    headers: Sequence[Header] = field(default_factory=tuple)


def create_topics(
    config: Mapping[str, str],
    topics: Mapping[str, int],
    *,
    replication_factor: int = -1,
    topic_config: Mapping[str, str] | None = None,
    replicas: Mapping[str, Sequence[Sequence[int]]] | None = None,
) -> None:
    """Create topics (name → partition count); existing topics are left alone.

    Replicated as the cluster's `default.replication.factor` says (one node: 1, three: 3)
    unless `replication_factor` is given. `topic_config` sets topic settings
    (`cleanup.policy`, `segment.ms`, ...). `replicas` places a topic's partitions (topic →
    one list of node ids per partition, the preferred leader first; the partition count is
    then the number of lists)."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient(dict(config))
    existing = set(admin.list_topics(timeout=10).topics)
    settings = dict(topic_config or {})
    placed = replicas or {}
    new = [
        NewTopic(
            name,
            len(placed[name]),
            replica_assignment=[list(r) for r in placed[name]],
            config=dict(settings),
        )
        if name in placed
        else NewTopic(name, count, replication_factor, config=dict(settings))
        for name, count in topics.items()
        if name not in existing
    ]
    if not new:
        return
    _create(admin, new)
    _wait_for_leaders(admin, {t.topic: t.num_partitions for t in new})


def _create(admin, new: list, timeout_s: float = 30) -> None:  # noqa: ANN001
    """CreateTopics, retried on transient errors (a cluster whose node was just restarted
    can drop the request's connection); a topic the lost attempt did create counts."""
    from confluent_kafka import KafkaError

    from ferry.kafka.failures import is_transient

    deadline = time.monotonic() + timeout_s
    pending, attempt = list(new), 0
    while pending:
        failed = []
        futures = admin.create_topics(pending, operation_timeout=10)
        for topic in pending:
            try:
                futures[topic.topic].result()
            except Exception as exc:  # noqa: BLE001 - classified below
                err = exc.args[0] if exc.args else None
                exists = getattr(err, "code", lambda: None)() == KafkaError.TOPIC_ALREADY_EXISTS
                if exists and attempt > 0:
                    continue
                if not is_transient(exc) or time.monotonic() > deadline:
                    raise
                failed.append(topic)
        pending, attempt = failed, attempt + 1
        if pending:
            time.sleep(0.5)


def _wait_for_leaders(admin, topics: Mapping[str, int], timeout_s: float = 30) -> None:  # noqa: ANN001
    """Until every partition of the new topics has a leader in the metadata: a topic is
    created by the controller and reaches the brokers a moment later."""
    deadline = time.monotonic() + timeout_s
    while True:
        meta = admin.list_topics(timeout=10).topics
        ready = all(
            name in meta
            and len(meta[name].partitions) == count
            and all(p.leader >= 0 for p in meta[name].partitions.values())
            for name, count in topics.items()
        )
        if ready:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"topics {sorted(topics)} have no leaders after {timeout_s:g}s")
        time.sleep(0.05)


def produce(
    config: Mapping[str, str],
    topic: str,
    partition: int,
    records: Iterable[Record],
    max_in_flight: int = 5,
) -> list[int]:
    """Produce records in order to one partition; returns their offsets, in record order.
    The producer is idempotent, so retries keep the order; the offsets are checked to grow in
    record order all the same, and an error is raised otherwise."""
    from confluent_kafka import Producer

    producer = Producer(
        {
            **config,
            "linger.ms": 5,
            "max.in.flight.requests.per.connection": max_in_flight,
            "enable.idempotence": True,
            "message.max.bytes": 8_000_000,
        }
    )
    offsets: list[int] = []
    errors: list[str] = []

    def on_delivery(index: int):  # noqa: ANN202 - a librdkafka callback for one record
        def done(err, msg) -> None:  # noqa: ANN001
            if err is not None:
                errors.append(str(err))
            else:
                offsets[index] = msg.offset()

        return done

    for record in records:
        kwargs = {}
        if record.timestamp_ms is not None:
            kwargs["timestamp"] = record.timestamp_ms
        if record.headers:
            kwargs["headers"] = list(record.headers)
        offsets.append(-1)
        callback = on_delivery(len(offsets) - 1)
        while True:
            try:
                producer.produce(
                    topic,
                    key=record.key,
                    value=record.value,
                    partition=partition,
                    on_delivery=callback,
                    **kwargs,
                )
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    remaining = producer.flush(120)
    if errors or remaining:
        raise RuntimeError(
            f"produce to {topic}[{partition}] failed: {errors[:3]} ({remaining} left)"
        )
    if (offsets and offsets[0] < 0) or any(b <= a for a, b in pairwise(offsets)):
        raise RuntimeError(f"produce to {topic}[{partition}]: records landed out of order")
    return offsets


def produce_transactions(
    config: Mapping[str, str],
    topic: str,
    partition: int,
    transactions: Iterable[Sequence[Record]],
    commit: bool = True,
) -> list[int]:
    """Produce each sequence of records as one transaction, committed or aborted; returns the
    offsets the records got. Every transaction leaves a marker offset behind it."""
    from confluent_kafka import Producer

    producer = Producer(
        {
            **config,
            "transactional.id": f"{topic}-{partition}-tx",
            "linger.ms": 5,
        }
    )
    offsets: list[int] = []
    producer.init_transactions(30)
    for records in transactions:
        producer.begin_transaction()
        for r in records:
            producer.produce(
                topic,
                key=r.key,
                value=r.value,
                partition=partition,
                timestamp=r.timestamp_ms or 0,
                on_delivery=lambda err, msg: offsets.append(msg.offset()) if err is None else None,
            )
            producer.flush(30)
        (producer.commit_transaction if commit else producer.abort_transaction)(30)
    return offsets


def delete_records(
    config: Mapping[str, str], before: Mapping[tuple[str, int], int]
) -> dict[tuple[str, int], int]:
    """DeleteRecords: move each partition's log start up to the offset given (records before
    it are gone, as retention or an operator's `kafka-delete-records` leaves them); returns
    the log start each partition reports afterwards."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(dict(config))  # kept referenced until every future is answered
    asked = [TopicPartition(t, p, o) for (t, p), o in sorted(before.items())]
    futures = admin.delete_records(asked, operation_timeout=10)
    return {
        (tp.topic, tp.partition): future.result(timeout=30).low_watermark
        for tp, future in futures.items()
    }


def commit_offsets(
    config: Mapping[str, str], group: str, offsets: Mapping[tuple[str, int], int]
) -> None:
    """Commit offsets for a group that has no running members (like a stopped consumer)."""
    from confluent_kafka import ConsumerGroupTopicPartitions, KafkaError, TopicPartition
    from confluent_kafka.admin import AdminClient

    from ferry.kafka.failures import is_transient_error

    admin = AdminClient(dict(config))
    request = ConsumerGroupTopicPartitions(
        group, [TopicPartition(t, p, o) for (t, p), o in sorted(offsets.items())]
    )
    # A fresh cluster creates __consumer_offsets on the first commit: meanwhile the request can
    # go unanswered, or be answered "coordinator loading" per partition (the request itself
    # succeeds). Either is retried, with short attempts, until the commit took.
    deadline = time.monotonic() + 60
    while True:
        try:
            answer = admin.alter_consumer_group_offsets([request], request_timeout=10)[group]
            answer = answer.result(timeout=15)
            errors = [tp.error for tp in answer.topic_partitions if tp.error is not None]
        except Exception as exc:  # noqa: BLE001 - a timeout or transport error: sent again
            errors = [exc]
        if not errors:
            return
        transient = all(not isinstance(e, KafkaError) or is_transient_error(e) for e in errors)
        if time.monotonic() > deadline or not transient:
            raise RuntimeError(f"commit for group {group} failed: {errors[0]}")
        admin = AdminClient(dict(config))
        time.sleep(0.2)


def read_committed(
    config: Mapping[str, str], group: str, topic_prefix: str
) -> dict[tuple[str, int], int]:
    """`group`'s committed offsets on the topics whose names start with `topic_prefix`, read by
    a consumer that never joins the group: an oracle independent of Ferry's own reads. Asked
    again while the coordinator moves or loads (a fresh cluster, a busy one) for two minutes:
    a consumer reports NOT_COORDINATOR where an AdminClient's offset fetch crashes the process
    (librdkafka issue 5040)."""
    from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

    moving = (
        KafkaError.NOT_COORDINATOR,
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
    )
    consumer = Consumer({**config, "group.id": group, "enable.auto.commit": False})
    try:
        topics = consumer.list_topics(timeout=30).topics
        asked = [
            TopicPartition(name, p)
            for name, topic in topics.items()
            if name.startswith(topic_prefix)
            for p in topic.partitions
        ]
        deadline = time.monotonic() + 120
        while True:
            try:
                answer = consumer.committed(asked, timeout=30)
                break
            except KafkaException as exc:
                if exc.args[0].code() not in moving or time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
    finally:
        consumer.close()
    return {(tp.topic, tp.partition): tp.offset for tp in answer if tp.offset >= 0}
