"""The `__consumer_offsets` decoder (`ferry.offsets_topic.decode`) applied in Spark, and the
Delta tables `decode-offsets` writes.

`with_decoded` applies the decoder to a `ferry-kafka` DataFrame on the executors (Arrow batches
in, Arrow batches out), one `DECODED_SCHEMA` row per record: a record that does not follow its
schema becomes a row of kind `malformed` with the reason. `filter_*` turn the result into the
Delta tables whose schemas are `OFFSET_COMMITS_SCHEMA`, `GROUP_METADATA_SCHEMA` and
`QUARANTINE_SCHEMA`.
"""

from __future__ import annotations

from collections.abc import Iterator

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from ferry.offsets_topic.decode import (
    KIND_GROUP_METADATA,
    KIND_MALFORMED,
    KIND_OFFSET_COMMIT,
    KIND_UNSUPPORTED,
    OffsetsDecodeError,
    decode_record,
    unsupported_reason,
)

ASSIGNED_TOPIC_TYPE = StructType(
    [
        StructField("topic", StringType(), True),
        StructField("partitions", ArrayType(IntegerType(), True), True),
    ]
)
MEMBER_TYPE = StructType(
    [
        StructField("member_id", StringType(), True),
        StructField("group_instance_id", StringType(), True),
        StructField("client_id", StringType(), True),
        StructField("client_host", StringType(), True),
        StructField("rebalance_timeout_ms", IntegerType(), True),
        StructField("session_timeout_ms", IntegerType(), True),
        # None with the bytes in assignment_raw and the reason in assignment_note when the
        # assignment did not decode or is not in the consumer protocol.
        StructField("assignment", ArrayType(ASSIGNED_TOPIC_TYPE, True), True),
        StructField("assignment_raw", BinaryType(), True),
        StructField("assignment_note", StringType(), True),
    ]
)

# One row per record read, whatever it decoded to (`kind`); the tables below are selections.
# Times are timestamps here, negative ones (Kafka's -1 "none") null.
DECODED_SCHEMA = StructType(
    [
        # offset_commit, group_metadata, unsupported or malformed
        StructField("kind", StringType(), False),
        StructField("key_version", IntegerType(), True),
        StructField("value_version", IntegerType(), True),
        StructField("group", StringType(), True),
        StructField("topic", StringType(), True),
        StructField("partition", IntegerType(), True),
        StructField("offset", LongType(), True),
        StructField("leader_epoch", IntegerType(), True),
        StructField("metadata", StringType(), True),
        StructField("commit_timestamp", TimestampType(), True),
        StructField("expire_timestamp", TimestampType(), True),
        StructField("is_deletion", BooleanType(), True),
        StructField("protocol_type", StringType(), True),
        StructField("generation", IntegerType(), True),
        StructField("protocol", StringType(), True),
        StructField("leader", StringType(), True),
        StructField("current_state_timestamp", TimestampType(), True),
        StructField("members", ArrayType(MEMBER_TYPE, True), True),
        StructField("reason", StringType(), True),
        StructField("record_topic", StringType(), True),
        StructField("record_partition", IntegerType(), False),
        StructField("record_offset", LongType(), False),
        StructField("record_timestamp", TimestampType(), True),
        StructField("key", BinaryType(), True),
        StructField("value", BinaryType(), True),
    ]
)
_RUN_FIELDS = [
    StructField("run_id", StringType(), False),
    StructField("read_from", StringType(), False),  # earliest or latest-snapshot
]


def _pick(*names: str) -> list[StructField]:
    return [DECODED_SCHEMA[name] for name in names]


# Where each row came from; value_version is null for a deletion.
_RECORD_FIELDS = _pick(
    "key_version", "value_version", "record_partition", "record_offset", "record_timestamp"
)
OFFSET_COMMITS_SCHEMA = StructType(
    _RUN_FIELDS
    + _pick("group", "topic", "partition", "offset", "leader_epoch", "metadata")
    + _pick("commit_timestamp", "expire_timestamp", "is_deletion")
    + _RECORD_FIELDS
)
GROUP_METADATA_SCHEMA = StructType(
    _RUN_FIELDS
    + _pick("group", "is_deletion", "protocol_type", "generation", "protocol", "leader")
    + _pick("current_state_timestamp", "members")
    + _RECORD_FIELDS
)
# Records that are neither commits nor group metadata: kind `malformed` (reason: why it did not
# decode) or `unsupported` (a newer record type, kept raw), with the record's own bytes.
QUARANTINE_SCHEMA = StructType(
    _RUN_FIELDS
    + _pick("kind", "key_version", "reason", "record_topic", "record_partition")
    + _pick("record_offset", "record_timestamp", "key", "value")
)
INPUT_COLUMNS = ("topic", "partition", "offset", "timestamp", "key", "value")


# --------------------------------------------------------------------------- on executors


def _ts(ms: int | None) -> int | None:
    """Epoch ms as written → microseconds for an Arrow timestamp; Kafka's -1 ("none") → None."""
    return None if ms is None or ms < 0 else ms * 1000


def decoded_columns(keys: list, values: list) -> dict[str, list]:
    """Decode parallel lists of keys and values into DECODED_SCHEMA's decoded columns
    (everything but the record_* and key/value columns, which the caller passes through)."""
    names = [f.name for f in DECODED_SCHEMA.fields if f.name not in _PASSED_THROUGH]
    cols: dict[str, list] = {n: [] for n in names}
    for key, value in zip(keys, values, strict=True):
        try:
            row = decode_record(key, value)
        except OffsetsDecodeError as exc:
            row = {"kind": KIND_MALFORMED, "key_version": exc.key_version, "reason": str(exc)}
        kind = row["kind"]
        if kind == KIND_UNSUPPORTED:
            row = {**row, "reason": unsupported_reason(row["key_version"])}
        elif kind == KIND_OFFSET_COMMIT:
            row["commit_timestamp"] = _ts(row["commit_timestamp"])
            row["expire_timestamp"] = _ts(row["expire_timestamp"])
        elif kind == KIND_GROUP_METADATA:
            row["current_state_timestamp"] = _ts(row["current_state_timestamp"])
        for n in names:
            cols[n].append(row.get(n))
    return cols


_PASSED_THROUGH = {
    "record_topic": "topic",
    "record_partition": "partition",
    "record_offset": "offset",
    "record_timestamp": "timestamp",
    "key": "key",
    "value": "value",
}


def decode_batches(batches: Iterator) -> Iterator:
    """mapInArrow function: `ferry-kafka` record batches in, DECODED_SCHEMA batches out."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema

    schema = to_arrow_schema(DECODED_SCHEMA, timezone="UTC")
    for batch in batches:
        cols = decoded_columns(batch.column("key").to_pylist(), batch.column("value").to_pylist())
        arrays = []
        for field in schema:
            if field.name in _PASSED_THROUGH:
                arrays.append(batch.column(_PASSED_THROUGH[field.name]).cast(field.type))
            else:
                arrays.append(pa.array(cols[field.name], type=field.type))
        yield pa.RecordBatch.from_arrays(arrays, schema=schema)


# -------------------------------------------------------------------------------- transforms


def with_decoded(records_df: DataFrame) -> DataFrame:
    """One DECODED_SCHEMA row per record of a `ferry-kafka` DataFrame, decoded on the
    executors; malformed records become rows of kind `malformed` with the reason."""
    return (
        records_df.select(*INPUT_COLUMNS)
        .mapInArrow(decode_batches, DECODED_SCHEMA)
        .select(*DECODED_SCHEMA.fieldNames())
    )


def filter_latest_per_key(decoded_df: DataFrame) -> DataFrame:
    """Only the latest record (highest offset) per partition and raw key: what log
    compaction converges to. Tombstones are kept, as deletions (compaction would eventually
    drop them too, and with them the fact that the commit or group was deleted). Records
    without a key cannot be compacted and are all kept."""
    latest = Window.partitionBy("record_partition", "key").orderBy(F.desc("record_offset"))
    return (
        decoded_df.withColumn("_rank", F.row_number().over(latest))
        .filter(F.col("key").isNull() | (F.col("_rank") == 1))
        .select(*DECODED_SCHEMA.fieldNames())
    )


def _run_columns(run_id: str, read_from: str) -> list:
    return [F.lit(run_id).alias("run_id"), F.lit(read_from).alias("read_from")]


def filter_offset_commits(decoded_df: DataFrame, run_id: str, read_from: str) -> DataFrame:
    """The OFFSET_COMMITS_SCHEMA rows: one per offset commit or offset deletion."""
    return decoded_df.filter(F.col("kind") == KIND_OFFSET_COMMIT).select(
        *_run_columns(run_id, read_from), *OFFSET_COMMITS_SCHEMA.fieldNames()[2:]
    )


def filter_group_metadata(decoded_df: DataFrame, run_id: str, read_from: str) -> DataFrame:
    """The GROUP_METADATA_SCHEMA rows: one per group metadata record or group deletion."""
    return decoded_df.filter(F.col("kind") == KIND_GROUP_METADATA).select(
        *_run_columns(run_id, read_from), *GROUP_METADATA_SCHEMA.fieldNames()[2:]
    )


def filter_quarantine(decoded_df: DataFrame, run_id: str, read_from: str) -> DataFrame:
    """The QUARANTINE_SCHEMA rows: malformed and unsupported records, bytes and reason."""
    return decoded_df.filter(F.col("kind").isin(KIND_MALFORMED, KIND_UNSUPPORTED)).select(
        *_run_columns(run_id, read_from), *QUARANTINE_SCHEMA.fieldNames()[2:]
    )


def kind_counts(decoded_df: DataFrame) -> dict[str, tuple[int, int]]:
    """kind → (records, deletions among them), every kind present (zero when absent)."""
    counts = dict.fromkeys(
        (KIND_OFFSET_COMMIT, KIND_GROUP_METADATA, KIND_UNSUPPORTED, KIND_MALFORMED), (0, 0)
    )
    rows = decoded_df.groupBy("kind").agg(
        F.count(F.lit(1)).alias("n"),
        F.sum(F.when(F.col("is_deletion"), 1).otherwise(0)).alias("deletions"),
    )
    for row in rows.collect():
        counts[row["kind"]] = (int(row["n"]), int(row["deletions"] or 0))
    return counts
