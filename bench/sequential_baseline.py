"""The baseline for bench/migrate_bench.py: Ferry's matching done the straightforward way.

One group partition at a time with plain confluent-kafka: read the records before the
committed offset, find the destination window with a timestamp lookup, read it,
hash, and rank identical candidates by their neighbours — the same decisions `migrate` makes,
without Spark, batching or shared reads.
"""

from __future__ import annotations

from confluent_kafka import Consumer, KafkaError, TopicPartition

from ferry import kafka
from ferry.hashing import record_hasher
from ferry.kafka.cluster import Cluster
from ferry.migrate.ranges import merge_intervals

HASH = record_hasher(["key", "value"])


def _consumer(cluster: Cluster) -> Consumer:
    return Consumer(
        {
            **cluster.conf,
            "group.id": "baseline",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )


def read(consumer: Consumer, topic: str, partition: int, start: int, end: int) -> list[tuple]:
    """(offset, timestamp, sha256) for offsets [start, end)."""
    if end <= start:
        return []
    consumer.assign([TopicPartition(topic, partition, start)])
    out = []
    while True:
        msg = consumer.poll(1.0)
        if msg is None:
            continue
        if msg.error():
            if msg.error().code() == KafkaError._PARTITION_EOF:
                break
            raise RuntimeError(msg.error())
        if msg.offset() >= end:
            break
        out.append((msg.offset(), msg.timestamp()[1], HASH(msg.key(), msg.value(), None)))
        if msg.offset() >= end - 1:
            break
    return out


def _common_prefix(a: list, b: list) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def sequential_migrate(src: Cluster, dst: Cluster, groups: dict, context: int, window_ms: int):
    """(group, topic, partition) -> destination offset or None."""
    k = context
    sc, dc = _consumer(src), _consumer(dst)
    result = {}
    try:
        for group, offsets in sorted(groups.items()):
            for (topic, partition), c in sorted(offsets.items()):
                ((ls, le),) = kafka.watermarks(src, [(topic, partition)]).values()
                records = read(sc, topic, partition, max(ls, c - 2 * (k + 1)), min(le, c + k + 1))
                before = [r for r in records if r[0] < c]
                after = [r for r in records if r[0] >= c]
                if not before:
                    result[(group, topic, partition)] = None
                    continue
                anchor = before[-1]
                src_before = [r[2] for r in reversed(before[:-1])][:k]
                src_after = [r[2] for r in after][:k]
                bounds = kafka.watermarks(dst, [(topic, partition)])
                lo = kafka.offsets_for_timestamps(
                    dst, {(topic, partition): anchor[1] - window_ms}, bounds
                )
                hi = kafka.offsets_for_timestamps(
                    dst, {(topic, partition): anchor[1] + window_ms + 1}, bounds
                )
                dls, dle = bounds[(topic, partition)]
                first = lo[(topic, partition)] if lo[(topic, partition)] is not None else dle
                last = hi[(topic, partition)] if hi[(topic, partition)] is not None else dle
                window = read(
                    dc, topic, partition, max(dls, first - 2 * (k + 1)), min(dle, last + k + 1)
                )
                scored = []
                for i, rec in enumerate(window):
                    if rec[2] != anchor[2] or abs(rec[1] - anchor[1]) > window_ms:
                        continue
                    dst_before = [r[2] for r in reversed(window[max(0, i - k) : i])]
                    dst_after = [r[2] for r in window[i + 1 : i + 1 + k]]
                    scored.append(
                        (
                            _common_prefix(src_before, dst_before),
                            _common_prefix(src_after, dst_after),
                            rec[0],
                        )
                    )
                scored.sort(reverse=True)
                if not scored or (len(scored) > 1 and scored[0][:2] == scored[1][:2]):
                    result[(group, topic, partition)] = None
                else:
                    result[(group, topic, partition)] = scored[0][2] + 1
    finally:
        sc.close()
        dc.close()
    return result


def raw_read(
    src: Cluster, dst: Cluster, groups: dict, context: int, window_records: int, shift: int
) -> int:
    """Read, once and with one consumer per cluster, the records a migration of this world
    needs (source around each committed offset; destination windows, which in the bench world
    are `window_records` either side of the replicated position `c - shift`); returns how many
    records were read: the floor any implementation pays for the data itself."""
    k = context
    needs: dict = {}
    for offsets in groups.values():
        for tp, c in offsets.items():
            needs.setdefault(tp, []).append(c)
    n = 0
    for cluster, spans in (
        (src, lambda c: (c - 2 * (k + 1), c + k + 1)),
        (
            dst,
            lambda c: (
                c - shift - window_records - 2 * (k + 1),
                c - shift + window_records + k + 1,
            ),
        ),
    ):
        consumer = _consumer(cluster)
        bounds = kafka.watermarks(cluster, needs)
        try:
            for (topic, partition), cs in sorted(needs.items()):
                lo, hi = bounds[(topic, partition)]
                ivs = [(max(lo, a), min(hi, b)) for a, b in map(spans, cs)]
                for s, e in merge_intervals(ivs):
                    n += len(read(consumer, topic, partition, s, e))
        finally:
            consumer.close()
    return n
