"""The one read loop: offset ranges of one cluster read by a plain assigned consumer, the same
on the driver (`ferry.kafka.read`'s small reads, probes, positions) and in the executors'
`ferry-kafka` data source.

What a range yields: the records of `[start, end)` a reader at the cluster's isolation level
sees, in offset order. Offsets without a record (compaction, transaction markers, aborted
records under read_committed, retention) are simply absent. A range ends at its end offset or
at the partition's end, whichever comes first, so a stale high watermark never makes a read
wait. With `to_next_record`, a range also yields the first record at or after its last offset
`end - 1`, wherever it lies (a range ending in a gap reads on to the next record or the
partition's end): `[o, o + 1)` so read is "the first record at or after o".

All partitions are read at once, one range per partition at a time (a partition's next range
follows by a seek, or by reading on through a small gap whose records are dropped), so each
fetch serves every partition; the consumer never joins a group and never commits.

The reconnect rule: a transient error (a dropped connection, a leader change), or no progress
for a quarter of `reader.timeout_ms` (at least 0.5 s), replaces the consumer with a fresh one
that resumes every open partition at the offset after the last record seen. A broker that
dropped its connections answers new ones at once, where the old client may keep waiting on
dead sockets. The read fails only after `reader.timeout_ms` without any progress, with one line
naming the cluster, topic, partition and offset (`KafkaReadError`); any other error fails it
at once, named the same way.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass

from ferry.kafka.cluster import Cluster, ClusterError

_POLL_S = 0.05  # one consume() call waits at most this long
_CONSUME_MAX = 4096  # messages asked of one consume() call
_RENEW_EVERY_S = 0.5  # consumers are replaced at most this often
_BATCH_ROWS = 16_384  # rows per Arrow record batch
_BATCH_BYTES = 32 * 1024 * 1024  # and bytes
# A partition's next range that starts this close (the gap's records, sized like the last one
# read) is reached by reading on and dropping the gap, not by a seek: a seek restarts the
# partition's fetch, a round trip each, and thousands of small ranges (many groups on a long
# partition) spent 28.6 s seeking through 381,000 offsets that reading on covers in 1.6 s.
_READ_THROUGH_BYTES = 256 * 1024
_RECORD_OVERHEAD = 64


class KafkaReadError(ClusterError):
    """A range could not be read; the message names cluster, topic, partition and offset."""


@dataclass(frozen=True)
class OffsetRange:
    topic: str
    partition: int
    start: int
    end: int  # exclusive

    @property
    def size(self) -> int:
        return max(0, self.end - max(self.start, 0))


def total_offsets(ranges: Iterable[OffsetRange]) -> int:
    return sum(r.size for r in ranges)


class _Cursor:
    """Where one partition's read stands: its current range, the ranges still to come, and
    the next offset it wants (records before it were seen already)."""

    __slots__ = ("range", "queue", "next_offset", "to_next")

    def __init__(self, queue: deque[OffsetRange], to_next: Collection[OffsetRange] | bool):
        self.queue = queue
        self.to_next = to_next
        self.range = queue.popleft()
        self.next_offset = self.range.start

    def reads_on(self) -> bool:
        """Whether the current range reads on to the first record at or after its last offset."""
        return self.to_next if isinstance(self.to_next, bool) else self.range in self.to_next

    def advance(self) -> OffsetRange | None:
        self.range = self.queue.popleft() if self.queue else None
        return self.range


class RangeReader:
    """Reads offset ranges of one cluster (`read`); one consumer, kept across reads and
    replaced by a fresh one when it stalls or reports a transient error. Close it (or use it
    as a context manager) when done."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.errors: list[str] = []  # what the client reported, newest last (for messages)
        self.renewals = 0
        self._consumer = None

    def __enter__(self) -> RangeReader:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            try:
                consumer.close()
            except Exception:  # noqa: BLE001 - a consumer on a dead connection may fail to close
                pass

    def _note(self, err: object) -> None:
        text = err.str() if hasattr(err, "str") else str(err)  # a KafkaError's own words
        self.errors = [*self.errors[-4:], text]

    def _assign(self, cursors: dict[tuple[str, int], _Cursor]) -> None:
        from confluent_kafka import TopicPartition

        if self._consumer is None:
            self._consumer = self.cluster.consumer(error_cb=self._note)
        self._consumer.assign(
            [TopicPartition(t, p, c.next_offset) for (t, p), c in sorted(cursors.items())]
        )

    def _renew(self, cursors: dict[tuple[str, int], _Cursor]) -> None:
        """A fresh consumer (new connections) resuming every open partition where it stands."""
        self.close()
        self.renewals += 1
        self._assign(cursors)

    def read(
        self,
        ranges: Iterable[OffsetRange],
        *,
        to_next_record: Collection[OffsetRange] | bool = False,
    ) -> Iterator[tuple[OffsetRange, list]]:
        """Yield (range, messages) as they arrive: each range's confluent-kafka messages in
        offset order, over one or more chunks. `to_next_record` (all ranges, or those given)
        reads on to the first record at or after the range's last offset (module docstring).
        Ranges of one partition are read in offset order; empty ranges yield nothing."""
        from confluent_kafka import KafkaError, TopicPartition

        from ferry.kafka.failures import is_transient_error

        queues: dict[tuple[str, int], deque[OffsetRange]] = {}
        for r in sorted(ranges, key=lambda r: (r.topic, r.partition, r.start, r.end)):
            if r.size:
                clamped = r if r.start >= 0 else OffsetRange(r.topic, r.partition, 0, r.end)
                queues.setdefault((r.topic, r.partition), deque()).append(clamped)
        if not queues:
            return
        cursors = {tp: _Cursor(queue, to_next_record) for tp, queue in queues.items()}
        finished: list[tuple[str, int]] = []
        eof = KafkaError._PARTITION_EOF
        timeout_s = self.cluster.timeout_s
        stall_s = max(_RENEW_EVERY_S, timeout_s / 4)
        self._assign(cursors)
        last_progress = last_renewal = time.monotonic()
        try:
            while cursors:
                # consume() waits until it has num_messages or the poll time passes: ask for
                # no more than the open ranges still hold, so small reads return at once.
                wanted = 0
                for c in cursors.values():
                    wanted += max(1, c.range.end - c.next_offset)
                    if wanted >= _CONSUME_MAX:
                        break
                messages = self._consumer.consume(
                    num_messages=min(wanted, _CONSUME_MAX), timeout=_POLL_S
                )
                chunks: dict[OffsetRange, list] = {}
                moved: set[tuple[str, int]] = set()  # sought elsewhere: the rest is stale
                progressed = transient = False
                # The common record: the partition's previous record was read into its range
                # and this one is the next inside it. It is taken on a fast path that only
                # compares it with that partition's state, held in locals (a dict lookup and
                # a range's hash a record were a third of a large read's time).
                fast: _Cursor | None = None  # whose state the locals hold, None: none
                f_topic, f_partition, f_next, f_last, f_chunk = "", -1, 0, 0, []
                for msg in messages:
                    if fast is not None:
                        if msg.partition() == f_partition and msg.topic() == f_topic:
                            offset = msg.offset()
                            if f_next <= offset < f_last and msg.error() is None:
                                f_chunk.append(msg)
                                f_next = offset + 1
                                continue
                        fast.next_offset = f_next  # the slow path reads the cursor itself
                        fast = None
                    tp = (msg.topic(), msg.partition())
                    cursor = cursors.get(tp)
                    if cursor is None or tp in moved:
                        continue
                    err = msg.error()
                    if err is not None:
                        if err.code() == eof:  # nothing more in this partition
                            del cursors[tp]
                            finished.append(tp)
                            progressed = True
                        elif is_transient_error(err):
                            self._note(err)
                            transient = True
                        else:
                            raise KafkaReadError(
                                f"{self.cluster.name}: error reading {tp[0]}[{tp[1]}] at "
                                f"offset {cursor.next_offset}: {err}"
                            )
                        continue
                    offset = msg.offset()
                    seen_from = cursor.next_offset  # no record lies in [seen_from, offset)
                    if offset < seen_from:
                        continue  # read before a reconnect or a seek
                    while True:
                        r = cursor.range
                        if offset < r.end - 1:
                            f_chunk = chunks.setdefault(r, [])
                            f_chunk.append(msg)
                            cursor.next_offset = offset + 1
                            progressed = True
                            fast, f_topic, f_partition = cursor, tp[0], tp[1]
                            f_next, f_last = offset + 1, r.end - 1
                            break
                        if offset == r.end - 1 or cursor.reads_on():
                            chunks.setdefault(r, []).append(msg)
                        progressed = True
                        following = cursor.advance()
                        if following is None:
                            del cursors[tp]
                            finished.append(tp)
                            break
                        cursor.next_offset = following.start
                        if seen_from <= following.start <= offset:
                            continue  # this record is also the next range's first
                        gap = following.start - offset - 1
                        if gap < 0 or gap * (len(msg) + _RECORD_OVERHEAD) > _READ_THROUGH_BYTES:
                            self._consumer.seek(TopicPartition(tp[0], tp[1], following.start))
                            moved.add(tp)
                        break
                if fast is not None:
                    fast.next_offset = f_next
                if finished:
                    # Stop fetching what is done; paused flags are cleared when the read ends.
                    self._consumer.pause([TopicPartition(t, p) for t, p in finished])
                yield from chunks.items()
                now = time.monotonic()
                if progressed:
                    last_progress = now
                if not cursors:
                    break
                if now - last_progress > timeout_s:
                    raise self._timed_out(cursors)
                if (transient or now - max(last_progress, last_renewal) > stall_s) and (
                    now - last_renewal >= _RENEW_EVERY_S
                ):
                    self._renew(cursors)
                    finished.clear()  # the fresh consumer has only the open partitions
                    last_renewal = now
        finally:
            self._release(finished)

    def _release(self, paused: Sequence[tuple[str, int]]) -> None:
        """Leave the consumer reusable: paused flags outlive an assignment in librdkafka."""
        from confluent_kafka import TopicPartition

        if self._consumer is None:
            return
        try:
            if paused:
                self._consumer.resume([TopicPartition(t, p) for t, p in paused])
            self._consumer.unassign()
        except Exception:  # noqa: BLE001 - a broken consumer is replaced on next use
            self.close()

    def _timed_out(self, cursors: dict[tuple[str, int], _Cursor]) -> KafkaReadError:
        (topic, partition), cursor = min(cursors.items())
        more = f" (and {len(cursors) - 1} more partitions)" if len(cursors) > 1 else ""
        detail = f": {self.errors[-1]}" if self.errors else ""
        return KafkaReadError(
            f"{self.cluster.name}: timed out after {self.cluster.timeout_ms} ms reading "
            f"{topic}[{partition}] at offset {cursor.next_offset}{more}{detail}"
        )


# -- records as Arrow ---------------------------------------------------------------------


def _headers(headers) -> list[dict] | None:  # noqa: ANN001
    return [{"key": k, "value": v} for k, v in headers] if headers else None


# How each output column is taken from a list of confluent-kafka messages. Whole columns at
# once: a comprehension per column costs far less than a branch per field per record.
_COLUMN_BUILDERS = {
    "topic": lambda msgs, _h: [m.topic() for m in msgs],
    "partition": lambda msgs, _h: [m.partition() for m in msgs],
    "offset": lambda msgs, _h: [m.offset() for m in msgs],
    "timestamp": lambda msgs, _h: [
        ts * 1000 if kind else None for kind, ts in (m.timestamp() for m in msgs)
    ],
    "timestamp_type": lambda msgs, _h: [m.timestamp()[0] - 1 for m in msgs],
    "key": lambda msgs, _h: [m.key() for m in msgs],
    "value": lambda msgs, _h: [m.value() for m in msgs],
    "headers": lambda msgs, _h: [_headers(m.headers()) for m in msgs],
    "sha256": lambda msgs, hasher: [hasher(m.key(), m.value(), m.headers()) for m in msgs],
}
COLUMNS = tuple(_COLUMN_BUILDERS)
_PER_RANGE = frozenset({"topic", "partition"})  # the same for every record of a chunk
NOT_NULL = frozenset({"topic", "partition", "offset"})


def arrow_schema(columns: Sequence[str]):  # noqa: ANN201 - pyarrow imported lazily
    """The Arrow schema of the given output columns (Spark's Kafka source types, plus
    `sha256`)."""
    import pyarrow as pa

    types = {
        "topic": pa.string(),
        "partition": pa.int32(),
        "offset": pa.int64(),
        "timestamp": pa.timestamp("us", tz="UTC"),
        "timestamp_type": pa.int32(),
        "key": pa.binary(),
        "value": pa.binary(),
        "headers": pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())])),
        "sha256": pa.binary(),
    }
    return pa.schema([pa.field(c, types[c], c not in NOT_NULL) for c in columns])


def arrow_batches(
    reader: RangeReader,
    ranges: Iterable[OffsetRange],
    columns: Sequence[str],
    *,
    hash_fields: Sequence[str] = (),
    ignore_headers: Sequence[str] = (),
    to_next_record: Collection[OffsetRange] | bool = False,
) -> Iterator:
    """The ranges' records as Arrow record batches of `columns` (bounded in rows and bytes);
    `sha256` needs `hash_fields` (see ferry.hashing)."""
    import pyarrow as pa

    from ferry.hashing import record_hasher

    hasher = record_hasher(hash_fields, ignore_headers) if hash_fields else None
    schema = arrow_schema(columns)
    pending: list = []
    ranges_of: list[tuple[OffsetRange, int]] = []  # each chunk's range and size, in order
    size = 0

    def take() -> pa.RecordBatch:
        nonlocal pending, ranges_of, size
        msgs, chunks, pending, ranges_of, size = pending, ranges_of, [], [], 0
        values = {}
        for c in columns:
            if c in _PER_RANGE:  # a chunk is one partition's: its range names it
                values[c] = column = []
                for r, n in chunks:
                    column += [getattr(r, c)] * n
            else:
                values[c] = _COLUMN_BUILDERS[c](msgs, hasher)
        return pa.RecordBatch.from_pydict(values, schema=schema)

    for r, messages in reader.read(ranges, to_next_record=to_next_record):
        pending += messages
        ranges_of.append((r, len(messages)))
        size += sum(map(len, messages)) + 64 * len(messages)  # len(): the value's
        if len(pending) >= _BATCH_ROWS or size >= _BATCH_BYTES:
            yield take()
    if pending:
        yield take()
