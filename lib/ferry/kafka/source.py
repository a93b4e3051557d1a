"""Kafka offset ranges as a Spark DataFrame: the `ferry-kafka` Python Data Source.

Spark's own Kafka connector needs a Maven jar; this source needs only confluent-kafka, so it
runs wherever PySpark does. It reads exactly the requested `(topic, partition, start, end)`
ranges (end exclusive) with a plain assigned consumer: it never joins a group and never
commits. Records missing inside a range (compaction, transaction markers, retention) are
simply absent. A range ends at its end offset or at the partition's end, whichever comes
first, so a stale high watermark never makes a task wait.

Options (all strings, as Spark passes them):
    kafka.<property>          librdkafka client properties (kafka.bootstrap.servers, SASL...)
    ranges                    JSON list of [topic, partition, start, end]
    cluster                   a name for error messages (default: bootstrap servers)
    maxRecordsPerPartition    split ranges so no task reads more offsets (default 50000)
    minPartitions             small ranges share a task while there are at least this many
                              tasks (default 1; read_ranges passes 2 × default parallelism)
    timeoutMs                 fail a task that makes no progress for this long (default 30000)
    isolationLevel            read_committed (default) or read_uncommitted; a
                              kafka.isolation.level property, when given, wins
    hash                      comma list of key,value,headers: adds a `sha256` column
                              (see ferry.hashing for the encoding)
    hashIgnoreHeaders         JSON list of header names left out of the hash
    columns                   comma list: output only these columns (less data to move)

Output schema: the columns of Spark's own Kafka source where concepts overlap, plus `sha256`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

SOURCE_NAME = "ferry-kafka"
DEFAULT_MAX_RECORDS = 50_000
DEFAULT_TIMEOUT_MS = 30_000
_BATCH_ROWS = 4096
_BATCH_BYTES = 32 * 1024 * 1024

HEADER_TYPE = ArrayType(
    StructType([StructField("key", StringType()), StructField("value", BinaryType())])
)
FULL_SCHEMA = StructType(
    [
        StructField("topic", StringType(), False),
        StructField("partition", IntegerType(), False),
        StructField("offset", LongType(), False),
        StructField("timestamp", TimestampType(), True),
        StructField("timestamp_type", IntegerType(), True),
        StructField("key", BinaryType(), True),
        StructField("value", BinaryType(), True),
        StructField("headers", HEADER_TYPE, True),
        StructField("sha256", BinaryType(), True),
    ]
)
STANDARD_COLUMNS = tuple(f.name for f in FULL_SCHEMA.fields if f.name != "sha256")


class KafkaReadError(RuntimeError):
    """A range could not be read; the message names cluster, topic and partition."""


@dataclass(frozen=True)
class OffsetRange:
    topic: str
    partition: int
    start: int
    end: int  # exclusive


@dataclass
class RangePartition(InputPartition):
    """One Spark task: read these offset ranges, one after the other, with one consumer."""

    ranges: list[OffsetRange]

    def __init__(self, ranges: list[OffsetRange]) -> None:
        super().__init__(None)
        self.ranges = ranges

    @property
    def size(self) -> int:
        return sum(r.end - r.start for r in self.ranges)


def plan_partitions(
    ranges: Sequence[OffsetRange], max_records: int, min_partitions: int = 1
) -> list[RangePartition]:
    """Plan tasks: a range larger than `max_records` offsets is split; small ranges share a
    task (Spark's per-task cost would otherwise dwarf reading a few records) while there are
    still at least `min_partitions` tasks. Empty ranges vanish."""
    pieces: list[OffsetRange] = []
    for r in ranges:
        start = max(r.start, 0)
        while start < r.end:
            end = min(start + max_records, r.end)
            pieces.append(OffsetRange(r.topic, r.partition, start, end))
            start = end
    total = sum(p.end - p.start for p in pieces)
    cap = min(max_records, max(1, -(-total // max(1, min_partitions))))
    planned: list[RangePartition] = []
    current: list[OffsetRange] = []
    size = 0
    for piece in sorted(pieces, key=lambda p: (p.topic, p.partition, p.start)):
        n = piece.end - piece.start
        if current and size + n > cap:
            planned.append(RangePartition(current))
            current, size = [], 0
        current.append(piece)
        size += n
    if current:
        planned.append(RangePartition(current))
    return planned


def output_schema(options: Mapping[str, str]) -> StructType:
    wanted = [c.strip() for c in options.get("columns", "").split(",") if c.strip()]
    columns = list(wanted or STANDARD_COLUMNS)
    if options.get("hash") and "sha256" not in columns:
        columns.append("sha256")
    unknown = [c for c in columns if c not in FULL_SCHEMA.fieldNames()]
    if unknown:
        raise ValueError(f"{SOURCE_NAME}: unknown columns {unknown}")
    if "sha256" in columns and not options.get("hash"):
        raise ValueError(f"{SOURCE_NAME}: column sha256 needs the hash option")
    return StructType([FULL_SCHEMA[c] for c in columns])


class KafkaRangesDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> StructType:
        return output_schema(self.options)

    def reader(self, schema: StructType) -> DataSourceReader:
        return KafkaRangesReader(dict(self.options), schema)


class KafkaRangesReader(DataSourceReader):
    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        self.client_conf = {
            k[len("kafka.") :]: v for k, v in options.items() if k.startswith("kafka.")
        }
        if "bootstrap.servers" not in self.client_conf:
            raise ValueError(f"{SOURCE_NAME}: option kafka.bootstrap.servers is required")
        self.cluster = options.get("cluster") or self.client_conf["bootstrap.servers"]
        self.ranges = [
            OffsetRange(t, int(p), int(s), int(e))
            for t, p, s, e in json.loads(options.get("ranges", "[]"))
        ]
        self.max_records = int(
            options.get(
                "maxrecordsperpartition", options.get("maxRecordsPerPartition", DEFAULT_MAX_RECORDS)
            )
        )
        self.timeout_ms = int(
            options.get("timeoutms", options.get("timeoutMs", DEFAULT_TIMEOUT_MS))
        )
        self.hash_fields = [f for f in options.get("hash", "").split(",") if f]
        self.ignore_headers = json.loads(
            options.get("hashignoreheaders", options.get("hashIgnoreHeaders", "[]"))
        )
        self.min_partitions = int(options.get("minpartitions", options.get("minPartitions", 1)))
        self.isolation_level = options.get(
            "isolationlevel", options.get("isolationLevel", "read_committed")
        )
        self.columns = [f.name for f in schema.fields]
        self.schema = schema

    def partitions(self) -> list[RangePartition]:
        # With no tasks Spark would call read() once with its own bare InputPartition; one task
        # with nothing to read keeps read() on the one code path.
        return plan_partitions(self.ranges, self.max_records, self.min_partitions) or [
            RangePartition([])
        ]

    def consumer_conf(self, error_cb) -> dict:  # noqa: ANN001
        """The reading consumer's properties: the cluster's, plus what a plain assigned reader
        needs. Client properties given for the cluster win over Ferry's defaults."""
        conf = {
            **self.client_conf,
            "group.id": "ferry-range-reader",  # required by librdkafka; never joined or committed
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
            "error_cb": error_cb,
        }
        conf.setdefault("isolation.level", self.isolation_level)
        # A range often ends at the partition's end; answer EOF quickly instead of waiting.
        conf.setdefault("fetch.wait.max.ms", 50)
        conf.setdefault("fetch.max.bytes", 64 * 1024 * 1024)
        conf.setdefault("log_level", 0)
        return conf

    def read(self, partition: RangePartition) -> Iterator:
        # Imported here so the reader pickles without the client library on the driver path.
        import pyarrow as pa

        from ferry.hashing import record_hasher

        hasher = record_hasher(self.hash_fields, self.ignore_headers) if self.hash_fields else None
        arrow_schema = _arrow_schema(self.schema)
        batch = _Batch(self.columns, hasher)
        client = _ReconnectingConsumer(self)
        try:
            for offset_range in partition.ranges:
                for _ in self._read_range(client, offset_range, batch):
                    yield pa.RecordBatch.from_pydict(batch.take(), schema=arrow_schema)
        finally:
            client.close()
        if batch.rows:
            yield pa.RecordBatch.from_pydict(batch.take(), schema=arrow_schema)

    def _read_range(self, client: _ReconnectingConsumer, r: OffsetRange, batch) -> Iterator[None]:  # noqa: ANN001
        """Append the range's records to `batch`; yields whenever the batch should be flushed.

        Retries: a transient error, or a stall of a quarter of the timeout, replaces the
        consumer with a fresh one that resumes at the next offset not yet read (a broker that
        dropped its connections answers new ones at once). Only `timeout_ms` without any
        progress fails the task, so a lost cluster still fails within the reader timeout."""
        from confluent_kafka import KafkaError

        from ferry.kafka.admin import is_transient_error

        where = f"{self.cluster} {r.topic}[{r.partition}]"
        next_offset = r.start
        client.assign(r.topic, r.partition, next_offset)
        last_progress = last_attempt = time.monotonic()
        stall_s = max(0.5, self.timeout_ms / 4000)
        while next_offset < r.end:
            # consume() waits until it has num_messages or the timeout passes: ask for no more
            # than the range still holds, so small ranges return at once.
            wanted = max(1, min(_BATCH_ROWS, r.end - next_offset))
            messages = client.consumer.consume(num_messages=wanted, timeout=0.05)
            now = time.monotonic()
            if messages:
                last_progress = last_attempt = now
            elif (now - last_progress) * 1000 > self.timeout_ms:
                detail = f": {client.errors[-1]}" if client.errors else ""
                raise KafkaReadError(
                    f"timed out after {self.timeout_ms} ms reading {where} "
                    f"at offset {next_offset}{detail}"
                )
            elif now - last_attempt > stall_s:
                client.renew(r.topic, r.partition, next_offset)
                last_attempt = now
            for msg in messages:
                if msg.topic() != r.topic or msg.partition() != r.partition:
                    continue  # left over from the previous range's assignment
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        return  # the partition ends before the range does
                    if is_transient_error(err):
                        client.errors.append(str(err))
                        client.renew(r.topic, r.partition, next_offset)
                        last_attempt = time.monotonic()
                        break
                    raise KafkaReadError(f"error reading {where}: {err}")
                offset = msg.offset()
                if offset >= r.end:
                    return
                if offset < next_offset:
                    continue
                next_offset = offset + 1
                batch.add(msg)
                if batch.is_full():
                    yield


class _ReconnectingConsumer:
    """A plain assigned consumer that can be replaced by a fresh one mid-range."""

    def __init__(self, reader: KafkaRangesReader) -> None:
        self.errors: list[str] = []
        self.conf = reader.consumer_conf(lambda err: self.errors.append(str(err)))
        self.consumer = self._new()
        self.renewals = 0

    def _new(self):  # noqa: ANN202
        from confluent_kafka import Consumer

        return Consumer(self.conf)

    def assign(self, topic: str, partition: int, offset: int) -> None:
        from confluent_kafka import TopicPartition

        self.consumer.assign([TopicPartition(topic, partition, offset)])

    def renew(self, topic: str, partition: int, offset: int) -> None:
        old, self.consumer = self.consumer, self._new()
        self.renewals += 1
        try:
            old.close()
        except Exception:  # noqa: BLE001 - a consumer on a dead connection may fail to close
            pass
        self.assign(topic, partition, offset)

    def close(self) -> None:
        self.consumer.close()


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


class _Batch:
    """The messages of one Arrow record batch, bounded in rows and bytes."""

    def __init__(self, columns: list[str], hasher) -> None:  # noqa: ANN001
        self.columns = columns
        self.hasher = hasher
        self.messages: list = []
        self.bytes = 0

    @property
    def rows(self) -> int:
        return len(self.messages)

    def add(self, msg) -> None:  # noqa: ANN001
        self.messages.append(msg)
        self.bytes += len(msg) + 64  # len() of a message is its value's length

    def is_full(self) -> bool:
        return len(self.messages) >= _BATCH_ROWS * 4 or self.bytes >= _BATCH_BYTES

    def take(self) -> dict[str, list]:
        msgs, self.messages, self.bytes = self.messages, [], 0
        return {c: _COLUMN_BUILDERS[c](msgs, self.hasher) for c in self.columns}


def _arrow_schema(schema: StructType):  # noqa: ANN202 - pyarrow imported lazily
    import pyarrow as pa

    header = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
    types = {
        "topic": pa.string(),
        "partition": pa.int32(),
        "offset": pa.int64(),
        "timestamp": pa.timestamp("us", tz="UTC"),
        "timestamp_type": pa.int32(),
        "key": pa.binary(),
        "value": pa.binary(),
        "headers": header,
        "sha256": pa.binary(),
    }
    return pa.schema([pa.field(f.name, types[f.name], f.nullable) for f in schema.fields])


def register(spark: SparkSession) -> None:
    """Make `spark.read.format("ferry-kafka")` available in this session."""
    spark.dataSource.register(KafkaRangesDataSource)


def read_ranges(
    spark: SparkSession,
    client_conf: Mapping[str, str],
    ranges: Sequence[OffsetRange],
    *,
    cluster: str | None = None,
    hash_fields: Sequence[str] = (),
    ignore_headers: Sequence[str] = (),
    columns: Sequence[str] = (),
    max_records_per_partition: int = DEFAULT_MAX_RECORDS,
    timeout_ms: int = DEFAULT_TIMEOUT_MS,
    min_partitions: int | None = None,
    isolation_level: str = "read_committed",
) -> DataFrame:
    """Read the given ranges of one cluster as a DataFrame (see the module docstring).

    Small ranges share tasks down to `min_partitions` tasks (default: twice Spark's default
    parallelism, so every core stays busy)."""
    if min_partitions is None:
        min_partitions = 2 * spark.sparkContext.defaultParallelism
    reader = spark.read.format(SOURCE_NAME)
    for key, value in client_conf.items():
        reader = reader.option(f"kafka.{key}", str(value))
    reader = (
        reader.option(
            "ranges", json.dumps([[r.topic, r.partition, r.start, r.end] for r in ranges])
        )
        .option("maxRecordsPerPartition", str(max_records_per_partition))
        .option("timeoutMs", str(timeout_ms))
        .option("minPartitions", str(min_partitions))
        .option("isolationLevel", isolation_level)
    )
    if cluster:
        reader = reader.option("cluster", cluster)
    if hash_fields:
        reader = reader.option("hash", ",".join(hash_fields))
        reader = reader.option("hashIgnoreHeaders", json.dumps(list(ignore_headers)))
    if columns:
        reader = reader.option("columns", ",".join(columns))
    return reader.load()
