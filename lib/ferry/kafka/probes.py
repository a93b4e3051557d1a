"""Single records read on the driver: the first record at or after an offset, and the first
offset at or after a timestamp — the broker's answer to the latter taken only as a lower bound
and verified by reading.

Probes read with the one read loop (`ferry.kafka.reader`): the cluster's isolation level, a
fresh consumer after a dropped connection or a stall, and a failure only after
`reader.timeout_ms` without progress, naming the partition.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor

from ferry.kafka.cluster import Cluster
from ferry.kafka.log_offsets import timestamp_offsets, watermarks
from ferry.kafka.reader import OffsetRange, RangeReader
from ferry.keys import TopicPartitionKey

Position = tuple[str, int, int]  # topic, partition, and an offset or a timestamp ms
PROBE_READERS = 8  # consumers reading a lookup round's layers side by side


def first_records_at(
    cluster: Cluster,
    positions: Mapping[TopicPartitionKey, int],
    reader: RangeReader | None = None,
) -> dict[TopicPartitionKey, tuple[int, int] | None]:
    """For each partition, (offset, timestamp ms) of the first record at or after the given
    offset, or None when the partition has nothing there. All partitions at once, with
    `reader` when given (its consumer is kept for the next probes) or a reader of its own."""
    found = first_records_after(cluster, [(t, p, o) for (t, p), o in positions.items()], reader)
    return {(t, p): found[(t, p, o)] for (t, p), o in positions.items()}


def first_records_after(
    cluster: Cluster,
    positions: Iterable[Position],
    reader: RangeReader | Sequence[RangeReader] | None = None,
) -> dict[Position, tuple[int, int] | None]:
    """`first_records_at` for any number of offsets per partition, keyed by (topic,
    partition, offset): one read per layer (a partition's i-th offset in the i-th read, every
    partition in each), the layers shared out over `reader` (one or several, each read by a
    thread of its own; a reader of its own when none). One read of them all would read on
    through the records between a partition's probes (the read loop's choice for ranges,
    whose records are all wanted): 1,278 probes on 64 partitions of 10,000 records took 2-5x
    longer so; and a layer is a fetch round trip, so several readers overlap them."""
    wanted = set(positions)
    found: dict[Position, tuple[int, int] | None] = dict.fromkeys(wanted)
    if not wanted:
        return found
    per_tp: dict[tuple[str, int], list[int]] = {}
    for t, p, o in sorted(wanted):
        per_tp.setdefault((t, p), []).append(o)
    depth = max(len(offsets) for offsets in per_tp.values())
    layers = [
        [OffsetRange(t, p, o[i], o[i] + 1) for (t, p), o in per_tp.items() if i < len(o)]
        for i in range(depth)
    ]
    own = reader is None
    readers = [RangeReader(cluster)] if reader is None else (
        [reader] if isinstance(reader, RangeReader) else list(reader))  # fmt: skip

    def read_share(n: int) -> None:
        for layer in layers[n :: len(readers)]:
            for r, messages in readers[n].read(layer, to_next_record=True):
                msg = messages[0]
                found[(r.topic, r.partition, r.start)] = (msg.offset(), msg.timestamp()[1])

    try:
        if len(readers) == 1 or depth == 1:
            read_share(0)
        else:
            with ThreadPoolExecutor(max_workers=len(readers)) as pool:
                for done in [pool.submit(read_share, n) for n in range(len(readers))]:
                    done.result()  # a failed read raises here
    finally:
        if own:
            readers[0].close()
    return found


def _interpolate(lo: int, hi: int, lo_ts: int, hi_ts: int, target: int) -> int:
    """Where the first record at least as new as `target` should be, if timestamps grow
    evenly between lo (just after a record at lo_ts) and hi (a record at hi_ts): aimed half a
    millisecond early, so it lands at the start of the target's millisecond."""
    if hi_ts <= lo_ts:
        return (lo + hi) // 2
    fraction = (target - 0.5 - lo_ts) / (hi_ts - lo_ts)
    return min(hi - 1, max(lo, lo + int(fraction * (hi - lo))))


def offsets_for_timestamps(
    cluster: Cluster,
    targets: Mapping[TopicPartitionKey, int],
    bounds: Mapping[TopicPartitionKey, tuple[int, int]] | None = None,
) -> dict[TopicPartitionKey, int | None]:
    """Offset of the first record whose timestamp is >= the target, or None when no record is
    that new (callers use log end then, like kafka-consumer-groups): one target per
    partition (`offsets_for_many_timestamps`)."""
    found = offsets_for_many_timestamps(cluster, {k: [ts] for k, ts in targets.items()}, bounds)
    return {(t, p): found[(t, p, ts)] for (t, p), ts in targets.items()}


def offsets_for_many_timestamps(
    cluster: Cluster,
    targets: Mapping[TopicPartitionKey, Iterable[int]],
    bounds: Mapping[TopicPartitionKey, tuple[int, int]] | None = None,
) -> dict[Position, int | None]:
    """For each (topic, partition, timestamp ms) of `targets` (timestamps per partition), the
    offset of the first record whose timestamp is >= it, or None when no record is that new.

    The broker's ListOffsets answer is only trusted as a lower bound, on Apache Kafka too: it
    is the first offset whose record *or transaction marker* is at least as new, and a marker
    carries the broker's clock while the records around it carry their producer's CreateTime
    (a replicator's copies keep the source's, older by the replication lag), so on a
    transactional topic the answer can be a marker well before the first record that new.
    Round one reads at the answer, which confirms an exact answer with one read; otherwise
    the answer is narrowed by a search over single-record reads, and confirmed by reading the
    records it lands on. Every lookup runs in lockstep: one ListOffsets request per broker per
    layer (the protocol takes one timestamp per partition), all in flight together, then
    each round's probes read with one consumer (`first_records_after`). Assumes timestamps
    that mostly grow with offsets (LogAppendTime, or CreateTime from in-order producers);
    with badly shuffled CreateTime, widen the matching windows.
    """
    keys = sorted({(t, p, ts) for (t, p), stamps in targets.items() for ts in stamps})
    if not keys:
        return {}
    bounds = dict(bounds or watermarks(cluster, {(t, p) for t, p, _ in keys}))
    answers = timestamp_offsets(cluster, keys)
    lo: dict[Position, int] = {}
    hi: dict[Position, int] = {}
    for key in keys:
        answer = answers.get(key)
        start, end = bounds[key[:2]]
        # The broker's answer bounds the search from below; -1 means "no such record".
        lo[key] = max(start, answer) if answer is not None and answer >= 0 else start
        hi[key] = end
    lo_ts: dict[Position, int] = {}  # timestamp of a record before lo (older)
    hi_ts: dict[Position, int] = {}  # timestamp of the first record at or after hi
    bisect_next: set[Position] = set()
    # what the probe that last set hi found: the first record at or after hi, or None
    at_hi: dict[Position, tuple[int, int] | None] = {}
    depth = max(Counter(key[:2] for key in keys).values())
    readers = [RangeReader(cluster) for _ in range(min(PROBE_READERS, depth))]
    try:
        # Invariant: records before lo[key] are older than the target; the first record at or
        # after hi[key] is at least as new as the target, or there is none.
        # Round one reads at the broker's answer itself: an exact answer is confirmed there.
        # Round two reads the last record, so that later rounds can interpolate between
        # timestamps (a few rounds where a binary search takes twenty);
        # a round that interpolated and did not halve the interval is followed by a bisection.
        rounds = 0
        while True:
            probes: dict[Position, int] = {}
            interpolated: set[Position] = set()
            for k in keys:
                if lo[k] >= hi[k]:
                    continue
                if rounds == 0:
                    probes[k] = lo[k]
                elif k not in hi_ts and hi[k] == bounds[k[:2]][1] and rounds == 1:
                    probes[k] = hi[k] - 1
                elif k in lo_ts and k in hi_ts and k not in bisect_next:
                    probes[k] = _interpolate(lo[k], hi[k], lo_ts[k], hi_ts[k], k[2])
                    interpolated.add(k)
                else:
                    probes[k] = (lo[k] + hi[k]) // 2
            if not probes:
                break
            widths = {k: hi[k] - lo[k] for k in probes}
            rounds += 1
            seen = first_records_after(cluster, {(t, p, o) for (t, p, _), o in probes.items()},
                                       readers)  # fmt: skip
            for key, mid in probes.items():
                record = seen.get((key[0], key[1], mid))
                if record is None or record[1] >= key[2]:
                    hi[key] = mid  # the first record at or after mid is new enough (or absent)
                    at_hi[key] = record
                    if record is not None:
                        hi_ts[key] = record[1]
                else:
                    lo[key] = record[0] + 1
                    lo_ts[key] = record[1]
                if key in interpolated and 2 * (hi[key] - lo[key]) > widths[key]:
                    bisect_next.add(key)
                else:
                    bisect_next.discard(key)
        # lo == hi now, and the probe that set hi read the answer already (the first record at
        # or after hi, or none). Only where nothing probed hi, or shuffled timestamps pushed lo
        # past it, is the record at lo read to confirm (it may be a gap, so read forward).
        unsure = {k for k in keys if lo[k] != hi[k] or k not in at_hi}
        confirm = first_records_after(
            cluster,
            {(k[0], k[1], lo[k]) for k in unsure if lo[k] < bounds[k[:2]][1]},
            readers,
        )
    finally:
        for reader in readers:
            reader.close()
    result: dict[Position, int | None] = {}
    for key in keys:
        record = confirm.get((key[0], key[1], lo[key])) if key in unsure else at_hi[key]
        result[key] = record[0] if record is not None and record[1] >= key[2] else None
    return result
