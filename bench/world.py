"""Building a bench's world: producing it fast (one batched, idempotent producer per
cluster), and committing many stopped groups' offsets at once.

Kafka's watermarks count records, so records may share batches; the producer is idempotent,
so each partition holds its records in the order they were produced even when a request is
retried, and without transactions the offsets are contiguous (record i of a partition is at
offset i). `ferry.testing.produce.produce` does the same one partition at a time and returns
every offset; this is for worlds of many partitions or millions of records, where only the
order matters.
"""

from __future__ import annotations

import time

from confluent_kafka import Producer

from ferry.kafka.cluster import Cluster

Offsets = dict[tuple[str, int], int]

BATCHED = {
    "enable.idempotence": True,
    "linger.ms": 20,
    "queue.buffering.max.messages": 1_000_000,
    "queue.buffering.max.kbytes": 1_048_576,
    "compression.type": "none",
}


class BulkProducer:
    """`produce` records in order; `flush` raises if any was not delivered."""

    def __init__(self, config: dict) -> None:
        self._producer = Producer({**config, **BATCHED})
        self.errors: list[str] = []

    def _done(self, err, msg) -> None:  # noqa: ANN001 - a librdkafka delivery callback
        if err is not None:
            self.errors.append(f"{msg.topic()}[{msg.partition()}]: {err}")

    def produce(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        partition: int,
        timestamp: int | None = None,
    ) -> None:
        kwargs = {} if timestamp is None else {"timestamp": timestamp}
        while True:
            try:
                self._producer.produce(
                    topic, key=key, value=value, partition=partition, on_delivery=self._done,
                    **kwargs,
                )  # fmt: skip
                self._producer.poll(0)
                return
            except BufferError:
                self._producer.poll(0.05)

    def flush(self, timeout_s: float = 300) -> None:
        remaining = self._producer.flush(timeout_s)
        if remaining or self.errors:
            raise SystemExit(
                f"producing the bench world failed: {self.errors[:3]} ({remaining} not delivered)"
            )


def commit_all(cluster: Cluster, groups: dict[str, Offsets]) -> None:
    """Commit every group's source offsets, many requests in flight at once. A request can
    succeed with errors per partition (a fresh cluster answers "coordinator loading" while it
    creates `__consumer_offsets`): those groups are committed again until none is left."""
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

    from ferry.kafka.failures import is_transient_error

    admin = cluster.admin()
    pending = sorted(groups)
    deadline = time.monotonic() + 120
    while pending:
        failed: list[str] = []
        for i in range(0, len(pending), 500):
            futures = {
                g: admin.alter_consumer_group_offsets(
                    [
                        ConsumerGroupTopicPartitions(
                            g, [TopicPartition(t, p, o) for (t, p), o in sorted(groups[g].items())]
                        )
                    ]
                )[g]
                for g in pending[i : i + 500]
            }
            for g, future in futures.items():
                errors = [tp.error for tp in future.result(timeout=60).topic_partitions
                          if tp.error is not None]  # fmt: skip
                if errors:
                    if time.monotonic() > deadline or not all(map(is_transient_error, errors)):
                        raise SystemExit(f"commit for group {g} failed: {errors[0]}")
                    failed.append(g)
        if failed:
            time.sleep(0.5)
        pending = failed
