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
    timeoutMs                 fail a task that makes no progress for this long (default 30000)
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
    """One Spark task: read offsets [start, end) of one topic partition."""

    topic: str
    partition: int
    start: int
    end: int

    def __init__(self, topic: str, partition: int, start: int, end: int) -> None:
        super().__init__(None)
        self.topic, self.partition, self.start, self.end = topic, partition, start, end


def plan_partitions(ranges: Sequence[OffsetRange], max_records: int) -> list[RangePartition]:
    """Split ranges so no task reads more than `max_records` offsets; empty ranges vanish."""
    planned: list[RangePartition] = []
    for r in ranges:
        start = max(r.start, 0)
        while start < r.end:
            end = min(start + max_records, r.end)
            planned.append(RangePartition(r.topic, r.partition, start, end))
            start = end
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
        self.columns = [f.name for f in schema.fields]
        self.schema = schema

    def partitions(self) -> list[RangePartition]:
        return plan_partitions(self.ranges, self.max_records)

    def read(self, partition: RangePartition) -> Iterator:
        # Imported here so the reader pickles without the client library on the driver path.
        import pyarrow as pa
        from confluent_kafka import Consumer, KafkaError, TopicPartition

        from ferry.hashing import record_hasher

        where = f"{self.cluster} {partition.topic}[{partition.partition}]"
        last_error: list[str] = []
        conf = {
            **self.client_conf,
            "group.id": "ferry-range-reader",  # required by librdkafka; never joined or committed
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
            "error_cb": lambda err: last_error.append(str(err)),
        }
        conf.setdefault("isolation.level", "read_committed")
        # A range often ends at the partition's end; answer EOF quickly instead of waiting.
        conf.setdefault("fetch.wait.max.ms", 50)
        conf.setdefault("fetch.max.bytes", 64 * 1024 * 1024)
        conf.setdefault("log_level", 0)
        hasher = record_hasher(self.hash_fields, self.ignore_headers) if self.hash_fields else None
        want = set(self.columns)
        arrow_schema = _arrow_schema(self.schema)
        cols: dict[str, list] = {c: [] for c in self.columns}
        size = 0
        consumer = Consumer(conf)
        try:
            consumer.assign([TopicPartition(partition.topic, partition.partition, partition.start)])
            last_progress = time.monotonic()
            done = False
            while not done:
                messages = consumer.consume(num_messages=_BATCH_ROWS, timeout=0.2)
                if messages:
                    last_progress = time.monotonic()
                elif (time.monotonic() - last_progress) * 1000 > self.timeout_ms:
                    detail = f": {last_error[-1]}" if last_error else ""
                    raise KafkaReadError(
                        f"timed out after {self.timeout_ms} ms reading {where} "
                        f"at offset {partition.start}{detail}"
                    )
                for msg in messages:
                    err = msg.error()
                    if err is not None:
                        if err.code() == KafkaError._PARTITION_EOF:
                            done = True
                            break
                        raise KafkaReadError(f"error reading {where}: {err}")
                    offset = msg.offset()
                    if offset >= partition.end:
                        done = True
                        break
                    if offset < partition.start:
                        continue
                    ts_type, ts = msg.timestamp()
                    key, value, headers = msg.key(), msg.value(), msg.headers()
                    cols_append = cols  # local alias: this loop is the hot path
                    if "topic" in want:
                        cols_append["topic"].append(partition.topic)
                    if "partition" in want:
                        cols_append["partition"].append(partition.partition)
                    if "offset" in want:
                        cols_append["offset"].append(offset)
                    if "timestamp" in want:
                        cols_append["timestamp"].append(ts * 1000 if ts_type else None)
                    if "timestamp_type" in want:
                        cols_append["timestamp_type"].append(ts_type - 1)
                    if "key" in want:
                        cols_append["key"].append(key)
                    if "value" in want:
                        cols_append["value"].append(value)
                    if "headers" in want:
                        cols_append["headers"].append(
                            [{"key": k, "value": v} for k, v in headers] if headers else None
                        )
                    if hasher is not None:
                        cols_append["sha256"].append(hasher(key, value, headers))
                    size += (len(value) if value else 0) + (len(key) if key else 0) + 64
                    if offset >= partition.end - 1:
                        done = True
                        break
                if size >= _BATCH_BYTES or len(cols[self.columns[0]]) >= _BATCH_ROWS * 4:
                    yield pa.RecordBatch.from_pydict(cols, schema=arrow_schema)
                    cols = {c: [] for c in self.columns}
                    size = 0
        finally:
            consumer.close()
        if cols[self.columns[0]]:
            yield pa.RecordBatch.from_pydict(cols, schema=arrow_schema)


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
) -> DataFrame:
    """Read the given ranges of one cluster as a DataFrame (see the module docstring)."""
    reader = spark.read.format(SOURCE_NAME)
    for key, value in client_conf.items():
        reader = reader.option(f"kafka.{key}", str(value))
    reader = (
        reader.option(
            "ranges", json.dumps([[r.topic, r.partition, r.start, r.end] for r in ranges])
        )
        .option("maxRecordsPerPartition", str(max_records_per_partition))
        .option("timeoutMs", str(timeout_ms))
    )
    if cluster:
        reader = reader.option("cluster", cluster)
    if hash_fields:
        reader = reader.option("hash", ",".join(hash_fields))
        reader = reader.option("hashIgnoreHeaders", json.dumps(list(ignore_headers)))
    if columns:
        reader = reader.option("columns", ",".join(columns))
    return reader.load()
