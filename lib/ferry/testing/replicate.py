"""A test-side replicator, only for what real MirrorMaker 2 cannot stage: identical records of
one millisecond spread over other partitions or copied twice (MM2 copies a run of them as it
is, in order: the demo stages that with MM2), timestamps rewritten (log-append time), a
destination with another partition count (re-partitioned records), records reordered.
Everything MM2 can stage is staged with MM2 itself (`ferry.testing.mm2`,
tests/integration/test_mm2.py, `make demo`). Its readers (`read_all`, `end_offsets`,
`committed_offsets`, `consume_from_committed`) are plain consumers every test uses.

It re-partitions a topic like MirrorMaker 2 or Confluent Replicator copying into a destination
topic with another partition count.

Keyed records go where the Java client's default partitioner puts them (`murmur2(key)`, made
positive, modulo the partition count); records without a key go round-robin. Timestamps
(CreateTime) and headers are kept. Each destination partition is produced by one idempotent
producer (`ferry.testing.produce.produce`, batched) with one request in flight, so a
destination partition holds its records in exactly the order the replicator copied them; the
offsets come from the delivery reports, whatever the batches.

`replicate` returns where every source record landed, so tests and benches can compute the
exact answer a reconciliation must give.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from ferry.testing.produce import Header, Record, produce

Location = tuple[int, int]  # (partition, offset)

_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


@dataclass(frozen=True)
class SourceRecord:
    """One record as read back from a topic."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp_ms: int
    headers: tuple[Header, ...] = field(default_factory=tuple)

    @property
    def content(self) -> tuple[bytes | None, bytes | None, int]:
        """(key, value, timestamp): what a consumer can tell records apart by."""
        return (self.key, self.value, self.timestamp_ms)


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 (`org.apache.kafka.common.utils.Utils.murmur2`), as a signed 32-bit
    int like the Java function returns."""
    length = len(data)
    h = (0x9747B28C ^ length) & _MASK
    n4 = length // 4
    for i in range(n4):
        j = i * 4
        k = data[j] | (data[j + 1] << 8) | (data[j + 2] << 16) | (data[j + 3] << 24)
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = (h * _M) & _MASK
        h ^= k
    rest = length % 4
    tail = length & ~3
    if rest == 3:
        h ^= data[tail + 2] << 16
    if rest >= 2:
        h ^= data[tail + 1] << 8
    if rest >= 1:
        h ^= data[tail]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def destination_partition(key: bytes | None, n_partitions: int, counter: int) -> int:
    """The partition the Java client's default partitioner picks for `key` among
    `n_partitions`: `(murmur2(key) & 0x7fffffff) % n`. A null key goes round-robin: `counter`
    is how many null-key records were placed before this one."""
    if key is None:
        return counter % n_partitions
    return (murmur2(key) & 0x7FFFFFFF) % n_partitions


def _partitions(config: Mapping[str, str], topic: str, timeout_s: float) -> list[int]:
    from confluent_kafka.admin import AdminClient

    metadata = AdminClient(dict(config)).list_topics(topic, timeout=timeout_s)
    described = metadata.topics.get(topic)
    if described is None or described.error is not None or not described.partitions:
        raise RuntimeError(f"topic {topic} not found: {described and described.error}")
    return sorted(described.partitions)


def _consumer(config: Mapping[str, str]):  # noqa: ANN202 - a confluent Consumer
    from confluent_kafka import Consumer

    return Consumer(
        {
            **config,
            # Only assign() is used: the consumer never joins this group nor commits.
            "group.id": f"ferry-testing-reader-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "earliest",
            "fetch.wait.max.ms": 100,
        }
    )


def _read(
    config: Mapping[str, str],
    topic: str,
    starts: Mapping[int, int],
    timeout_s: float,
) -> list[SourceRecord]:
    """Records of `topic` from each partition's start offset up to its high watermark."""
    from confluent_kafka import OFFSET_BEGINNING, TopicPartition

    consumer = _consumer(config)
    try:
        ends = {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout_s)
            for p in starts
        }
        assign, todo = [], {}
        for p, start in starts.items():
            low, high = ends[p]
            begin = low if start < 0 else max(start, low)
            if begin < high:
                offset = OFFSET_BEGINNING if start < 0 else begin
                assign.append(TopicPartition(topic, p, offset))
                todo[p] = high
        out: list[SourceRecord] = []
        if not assign:
            return out
        consumer.assign(assign)
        deadline = time.monotonic() + timeout_s
        while todo:
            if time.monotonic() > deadline:
                raise TimeoutError(f"reading {topic}: partitions {sorted(todo)} not read to end")
            batch = consumer.consume(1000, 0.5)
            if not batch:  # a transaction marker can be a partition's last offset
                for tp in consumer.position([TopicPartition(topic, p) for p in todo]):
                    if tp.offset >= todo[tp.partition]:
                        del todo[tp.partition]
            for msg in batch:
                if msg.error() is not None:
                    raise RuntimeError(f"reading {topic}: {msg.error()}")
                p, offset = msg.partition(), msg.offset()
                high = todo.get(p)
                if high is None or offset >= high:
                    continue
                _, ts = msg.timestamp()
                out.append(
                    SourceRecord(p, offset, msg.key(), msg.value(), ts, tuple(msg.headers() or ()))
                )
                if offset + 1 >= high:
                    del todo[p]
                deadline = time.monotonic() + timeout_s
        out.sort(key=lambda r: (r.partition, r.offset))
        return out
    finally:
        consumer.close()


def read_all(config: Mapping[str, str], topic: str, timeout_s: float = 30) -> list[SourceRecord]:
    """Every record of every partition of `topic`, up to the high watermarks read first, in
    (partition, offset) order. A plain assigned consumer: no group is joined or committed."""
    return _read(config, topic, {p: -1 for p in _partitions(config, topic, timeout_s)}, timeout_s)


def end_offsets(config: Mapping[str, str], topic: str, timeout_s: float = 10) -> dict[int, int]:
    """partition → high watermark."""
    from confluent_kafka import TopicPartition

    consumer = _consumer(config)
    try:
        return {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout_s)[1]
            for p in _partitions(config, topic, timeout_s)
        }
    finally:
        consumer.close()


def copy_order(
    records: Sequence[SourceRecord],
    order: str = "time",
    steps: Iterable[tuple[int, int]] | None = None,
    copy_rest: bool = True,
) -> list[SourceRecord]:
    """The order a replicator copies `records` in.

    "time": by (timestamp, partition, offset), as if every source partition were copied as it
    was written. "uneven": each source partition in its own order, the partitions unevenly:
    `steps` is a list of (partition, up_to_offset) — copy that partition's records before
    `up_to_offset` that are not copied yet — then, when `copy_rest`, whatever is left,
    partition by partition. Without steps: partition by partition.
    """
    if order == "time":
        return sorted(records, key=lambda r: (r.timestamp_ms, r.partition, r.offset))
    if order != "uneven":
        raise ValueError(f"unknown copy order {order!r} (time or uneven)")
    by_partition: dict[int, list[SourceRecord]] = {}
    for r in sorted(records, key=lambda r: (r.partition, r.offset)):
        by_partition.setdefault(r.partition, []).append(r)
    cursor = dict.fromkeys(by_partition, 0)
    out: list[SourceRecord] = []
    for partition, up_to in steps or ():
        rows = by_partition.get(partition, [])
        i = cursor.get(partition, 0)
        while i < len(rows) and rows[i].offset < up_to:
            out.append(rows[i])
            i += 1
        cursor[partition] = i
    if copy_rest or not steps:
        for partition in sorted(by_partition):
            out.extend(by_partition[partition][cursor[partition] :])
    return out


def plan_destination(
    ordered: Sequence[SourceRecord],
    n_dst_partitions: int,
    partitioner: Callable[[bytes | None, int, int], int] = destination_partition,
) -> dict[int, list[SourceRecord]]:
    """destination partition → the records it receives, in copy order."""
    per_partition: dict[int, list[SourceRecord]] = {q: [] for q in range(n_dst_partitions)}
    null_keys = 0
    for r in ordered:
        q = partitioner(r.key, n_dst_partitions, null_keys)
        if r.key is None:
            null_keys += 1
        per_partition[q].append(r)
    return per_partition


def replicate(
    src_config: Mapping[str, str],
    src_topic: str,
    dst_config: Mapping[str, str],
    dst_topic: str,
    n_dst_partitions: int,
    order: str = "time",
    steps: Iterable[tuple[int, int]] | None = None,
    copy_rest: bool = True,
    records: Sequence[SourceRecord] | None = None,
    threads: int = 8,
    max_in_flight: int = 1,
) -> dict[Location, Location]:
    """Copy `src_topic` (all of it, or `records` read from it before) into `dst_topic`, which
    has `n_dst_partitions` partitions and exists already, in `order` (see `copy_order`);
    returns (src_partition, src_offset) → (dst_partition, dst_offset) for every record copied.

    Each destination partition is produced by its own idempotent producer, batched, with
    `max_in_flight` requests in flight (`ferry.testing.produce.produce` checks that the order
    held), so its order is the copy order;
    `threads` partitions are produced at a time.
    """
    if records is None:
        records = read_all(src_config, src_topic)
    ordered = copy_order(records, order, steps, copy_rest)
    per_partition = plan_destination(ordered, n_dst_partitions)

    def copy(q: int) -> list[tuple[Location, Location]]:
        rows = per_partition[q]
        if not rows:
            return []
        offsets = produce(
            dst_config,
            dst_topic,
            q,
            [Record(r.key, r.value, r.timestamp_ms, r.headers) for r in rows],
            max_in_flight,
        )
        if len(offsets) != len(rows):
            raise RuntimeError(f"{dst_topic}[{q}]: {len(offsets)} offsets for {len(rows)} rows")
        return [((r.partition, r.offset), (q, o)) for r, o in zip(rows, offsets, strict=True)]

    mapping: dict[Location, Location] = {}
    with ThreadPoolExecutor(max(1, min(threads, n_dst_partitions))) as pool:
        for pairs in pool.map(copy, range(n_dst_partitions)):
            mapping.update(pairs)
    return mapping


def committed_offsets(
    config: Mapping[str, str], group: str, topic: str | None = None, timeout_s: float = 10
) -> dict[tuple[str, int], int]:
    """(topic, partition) → committed offset of `group`, read with the admin API (the group
    is not joined); partitions without a committed offset are left out."""
    from confluent_kafka import ConsumerGroupTopicPartitions
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(dict(config))
    futures = admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group)], request_timeout=timeout_s
    )
    out: dict[tuple[str, int], int] = {}
    for future in futures.values():
        for tp in future.result().topic_partitions or ():
            if tp.error is None and tp.offset >= 0 and (topic is None or tp.topic == topic):
                out[(tp.topic, tp.partition)] = tp.offset
    return out


def consume_from_committed(
    config: Mapping[str, str],
    group: str,
    topic: str,
    uncommitted: str = "earliest",
    timeout_s: float = 30,
) -> list[SourceRecord]:
    """What a consumer of `group` started now would read from `topic`: every partition from
    the group's committed offset to its high watermark. The committed offsets are read with
    the admin API and the partitions assigned, so the group is never joined and stays Empty.
    A partition without a committed offset starts at its beginning (`uncommitted="earliest"`)
    or its end ("latest")."""
    committed = committed_offsets(config, group, topic, timeout_s)
    starts: dict[int, int] = {}
    ends = end_offsets(config, topic, timeout_s)
    for p, high in ends.items():
        start = committed.get((topic, p))
        if start is None:
            start = -1 if uncommitted == "earliest" else high
        starts[p] = start
    return _read(config, topic, starts, timeout_s)
