"""Offset ranges read on Spark's executors: the `ferry-kafka` Python Data Source.

Spark's own Kafka connector needs a Maven jar; this source needs only confluent-kafka, so it
runs wherever PySpark does. Each task reads its ranges with the one read loop
(`ferry.kafka.reader`: plain assigned consumer, gaps, reconnect rule, time limit) and yields
Arrow record batches. Jobs do not call it directly: `ferry.kafka.read` sends reads larger
than `reader.driver_max_offsets` here and reads smaller ones on the driver, with the same
output either way.

Options (all strings, as Spark passes them):
    kafka.<property>          the cluster's client properties (kafka.bootstrap.servers, SASL...)
    ranges                    JSON list of [topic, partition, start, end]
    cluster                   a name for error messages (default: bootstrap servers)
    maxRecordsPerPartition    split ranges so no task reads more offsets (default 50000)
    minPartitions             small ranges share a task while there are at least this many
                              tasks (default 1; read_with_spark passes 2 × default parallelism)
    timeoutMs                 fail a task that makes no progress for this long (default 30000)
    isolationLevel            read_committed (default) or read_uncommitted; a
                              kafka.isolation.level property, when given, wins
    toNextRecord              true: each range also yields the first record at or after its
                              last offset (see ferry.kafka.reader)
    hash                      comma list of key,value,headers: adds a `sha256` column
                              (see ferry.hashing for the encoding)
    hashIgnoreHeaders         JSON list of header names left out of the hash
    columns                   comma list: output only these columns (less data to move)

Output schema: the columns of Spark's own Kafka source where concepts overlap, plus `sha256`.
"""

from __future__ import annotations

import json
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

from ferry.kafka.cluster import Cluster
from ferry.kafka.reader import OffsetRange, RangeReader, arrow_batches

SOURCE_NAME = "ferry-kafka"
DEFAULT_MAX_RECORDS = 50_000
DEFAULT_TIMEOUT_MS = 30_000

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


@dataclass
class RangePartition(InputPartition):
    """One Spark task: read these offset ranges with one consumer; `reads_on` are those that
    also yield the first record at or after their last offset."""

    ranges: list[OffsetRange]
    reads_on: list[OffsetRange]

    def __init__(self, ranges: list[OffsetRange], reads_on: Sequence[OffsetRange] = ()) -> None:
        super().__init__(None)
        self.ranges = ranges
        self.reads_on = list(reads_on)

    @property
    def size(self) -> int:
        return sum(r.end - r.start for r in self.ranges)


def plan_partitions(
    ranges: Sequence[OffsetRange],
    max_records: int,
    min_partitions: int = 1,
    to_next_record: bool = False,
) -> list[RangePartition]:
    """Plan tasks: a range larger than `max_records` offsets is split; small ranges share a
    task (Spark's per-task cost would otherwise dwarf reading a few records) while there are
    still at least `min_partitions` tasks. Empty ranges vanish. With `to_next_record`, only
    the last piece of a split range reads on past its end (the next piece reads the rest)."""
    pieces: list[tuple[OffsetRange, bool]] = []
    for r in ranges:
        start = max(r.start, 0)
        while start < r.end:
            end = min(start + max_records, r.end)
            pieces.append((OffsetRange(r.topic, r.partition, start, end), end == r.end))
            start = end
    total = sum(p.end - p.start for p, _ in pieces)
    cap = min(max_records, max(1, -(-total // max(1, min_partitions))))
    planned: list[RangePartition] = []
    current: list[OffsetRange] = []
    reads_on: list[OffsetRange] = []
    size = 0
    for piece, is_last in sorted(pieces, key=lambda p: (p[0].topic, p[0].partition, p[0].start)):
        n = piece.end - piece.start
        if current and size + n > cap:
            planned.append(RangePartition(current, reads_on))
            current, reads_on, size = [], [], 0
        current.append(piece)
        if is_last and to_next_record:
            reads_on.append(piece)
        size += n
    if current:
        planned.append(RangePartition(current, reads_on))
    return planned


def output_schema(columns: Sequence[str] = (), hashed: bool = False) -> StructType:
    """The output columns: `columns` (default: Spark's Kafka source's), plus `sha256` when
    hashed."""
    chosen = list(columns or STANDARD_COLUMNS)
    if hashed and "sha256" not in chosen:
        chosen.append("sha256")
    unknown = [c for c in chosen if c not in FULL_SCHEMA.fieldNames()]
    if unknown:
        raise ValueError(f"{SOURCE_NAME}: unknown columns {unknown}")
    if "sha256" in chosen and not hashed:
        raise ValueError(f"{SOURCE_NAME}: column sha256 needs the hash option")
    return StructType([FULL_SCHEMA[c] for c in chosen])


def _option(options: Mapping[str, str], name: str, default: str) -> str:
    # Spark hands a Python data source its options with lower-cased keys.
    return options.get(name.lower(), options.get(name, default))


class KafkaRangesDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> StructType:
        columns = [c.strip() for c in self.options.get("columns", "").split(",") if c.strip()]
        return output_schema(columns, bool(self.options.get("hash")))

    def reader(self, schema: StructType) -> DataSourceReader:
        return KafkaRangesReader(dict(self.options), schema)


class KafkaRangesReader(DataSourceReader):
    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        conf = {k[len("kafka.") :]: v for k, v in options.items() if k.startswith("kafka.")}
        if "bootstrap.servers" not in conf:
            raise ValueError(f"{SOURCE_NAME}: option kafka.bootstrap.servers is required")
        self.cluster = Cluster(
            options.get("cluster") or conf["bootstrap.servers"],
            conf,
            timeout_s=int(_option(options, "timeoutMs", str(DEFAULT_TIMEOUT_MS))) / 1000,
            isolation_level=_option(options, "isolationLevel", "read_committed"),
            max_records_per_task=int(
                _option(options, "maxRecordsPerPartition", str(DEFAULT_MAX_RECORDS))
            ),
        )
        self.ranges = [
            OffsetRange(t, int(p), int(s), int(e))
            for t, p, s, e in json.loads(options.get("ranges", "[]"))
        ]
        self.hash_fields = [f for f in options.get("hash", "").split(",") if f]
        self.ignore_headers = json.loads(_option(options, "hashIgnoreHeaders", "[]"))
        self.min_partitions = int(_option(options, "minPartitions", "1"))
        self.to_next_record = _option(options, "toNextRecord", "false") == "true"
        self.columns = [f.name for f in schema.fields]

    def partitions(self) -> list[RangePartition]:
        # With no tasks Spark would call read() once with its own bare InputPartition; one task
        # with nothing to read keeps read() on the one code path.
        return plan_partitions(
            self.ranges,
            self.cluster.max_records_per_task,
            self.min_partitions,
            self.to_next_record,
        ) or [RangePartition([])]

    def read(self, partition: RangePartition) -> Iterator:
        with RangeReader(self.cluster) as reader:
            yield from arrow_batches(
                reader,
                partition.ranges,
                self.columns,
                hash_fields=self.hash_fields,
                ignore_headers=self.ignore_headers,
                to_next_record=set(partition.reads_on),
            )


def register(spark: SparkSession) -> None:
    """Make `spark.read.format("ferry-kafka")` available in this session (once: registering
    starts a Python worker to look up data sources, about a second)."""
    if not getattr(spark, "_ferry_kafka_registered", False):
        spark.dataSource.register(KafkaRangesDataSource)
        spark._ferry_kafka_registered = True  # type: ignore[attr-defined]


def read_with_spark(
    spark: SparkSession,
    cluster: Cluster,
    ranges: Sequence[OffsetRange],
    *,
    columns: Sequence[str] = (),
    hash_fields: Sequence[str] = (),
    ignore_headers: Sequence[str] = (),
    to_next_record: bool = False,
    min_partitions: int | None = None,
) -> DataFrame:
    """Read the ranges through the data source, on the executors (see the module docstring).
    The cluster's client properties and reader settings travel as options.

    Small ranges share tasks down to `min_partitions` tasks (default: twice Spark's default
    parallelism, so every core stays busy; on Connect, as the server plans it)."""
    if min_partitions is None:
        from ferry.session import default_parallelism

        min_partitions = 2 * default_parallelism(spark)
    register(spark)
    reader = spark.read.format(SOURCE_NAME)
    for key, value in cluster.conf.items():
        reader = reader.option(f"kafka.{key}", str(value))
    reader = (
        reader.option(
            "ranges", json.dumps([[r.topic, r.partition, r.start, r.end] for r in ranges])
        )
        .option("cluster", cluster.name)
        .option("maxRecordsPerPartition", str(cluster.max_records_per_task))
        .option("timeoutMs", str(cluster.timeout_ms))
        .option("minPartitions", str(min_partitions))
        .option("isolationLevel", cluster.isolation_level)
        .option("toNextRecord", "true" if to_next_record else "false")
    )
    if hash_fields:
        reader = reader.option("hash", ",".join(hash_fields))
        reader = reader.option("hashIgnoreHeaders", json.dumps(list(ignore_headers)))
    if columns:
        reader = reader.option("columns", ",".join(columns))
    return reader.load()
