"""Single records read on the driver (the first record at or after an offset), and the first
offset at or after a timestamp (Kafka's ListOffsets answer).

Probes read with the one read loop (`ferry.kafka.reader`): the cluster's isolation level, a
fresh consumer after a dropped connection or a stall, and a failure only after
`reader.timeout_ms` without progress, naming the partition.
"""

from __future__ import annotations

from collections.abc import Mapping

from ferry.kafka.admin import TopicPartitionKey, list_offsets
from ferry.kafka.cluster import Cluster
from ferry.kafka.reader import OffsetRange, RangeReader


def first_records_at(
    cluster: Cluster,
    positions: Mapping[TopicPartitionKey, int],
    reader: RangeReader | None = None,
) -> dict[TopicPartitionKey, tuple[int, int] | None]:
    """For each partition, (offset, timestamp ms) of the first record at or after the given
    offset, or None when the partition has nothing there. All partitions at once, with
    `reader` when given (its consumer is kept for the next probes) or a reader of its own."""
    if not positions:
        return {}
    found: dict[TopicPartitionKey, tuple[int, int] | None] = dict.fromkeys(positions)
    own = reader is None
    reader = reader or RangeReader(cluster)
    try:
        ranges = [OffsetRange(t, p, o, o + 1) for (t, p), o in positions.items()]
        for r, messages in reader.read(ranges, to_next_record=True):
            msg = messages[0]
            found[(r.topic, r.partition)] = (msg.offset(), msg.timestamp()[1])
    finally:
        if own:
            reader.close()
    return found


def offsets_for_timestamps(
    cluster: Cluster,
    targets: Mapping[TopicPartitionKey, int],
    bounds: Mapping[TopicPartitionKey, tuple[int, int]] | None = None,
) -> dict[TopicPartitionKey, int | None]:
    """Offset of the first record whose timestamp is >= the target, or None when no record is
    that new (callers use log end then, like kafka-consumer-groups).

    Kafka's own answer (ListOffsets by timestamp, KIP-79), asked at the reader's isolation
    level, so a read_committed lookup ends at the last stable offset as a read_committed read
    does. Kafka answers from its time index: the first offset, in offset order, whose record
    is at least as new, which is exact for LogAppendTime and in-order CreateTime. The answer
    may be an offset a reader skips (an aborted record): reading from it yields the first
    record it would see. `bounds` (the watermarks) is accepted for callers that have them at
    hand; Kafka's answer needs none."""
    from confluent_kafka.admin import OffsetSpec

    del bounds
    if not targets:
        return {}
    answers = list_offsets(
        cluster, "timestamp", {k: OffsetSpec.for_timestamp(ts) for k, ts in targets.items()}
    )
    return {k: (a if a is not None and a >= 0 else None) for k, a in answers.items()}
