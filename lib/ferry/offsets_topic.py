"""Decode the group coordinator's records in `__consumer_offsets` into offset-commit and
group-metadata rows, per Kafka's own message schemas.

Every record's key and value start with an int16 version. Key versions 0 and 1 are
OffsetCommitKey (group, topic, partition) with an OffsetCommitValue v0–4; key version 2 is
GroupMetadataKey (group) with a GroupMetadataValue v0–4 whose members carry their assignment
as ConsumerProtocolAssignment bytes. Value v4 is "flexible": compact strings, bytes and arrays
(unsigned varint length + 1, 0 meaning null) and a tagged-fields section after each struct,
whose tags are skipped. A null value is a tombstone: the commit or group was deleted.

`decode_record(key, value)` is the plain decoder; it never returns None for input it was
given (the issue's `dict | None` is narrowed to `dict`, which every caller of the wider type
accepts) and returns one of:

- `{"kind": "offset_commit", ...}` with key_version, value_version, group, topic, partition,
  offset, leader_epoch, metadata, commit_timestamp, expire_timestamp, is_deletion;
- `{"kind": "group_metadata", ...}` with key_version, value_version, group, is_deletion,
  protocol_type, generation, protocol, leader, current_state_timestamp, members (member_id,
  group_instance_id, client_id, client_host, rebalance_timeout_ms, session_timeout_ms,
  assignment, assignment_raw, assignment_note);
- `{"kind": "unsupported", "key_version", "key", "value"}` for key versions >= 3, the newer
  coordinator record types (KIP-848 consumer groups, share and streams groups): kept raw,
  never an error, because a newer cluster writes them as a matter of course (on Kafka 4 every
  consumer with `group.protocol=consumer` does; their offset commits are ordinary
  OffsetCommitKey records all the same). A null value is kept as null.

Numbers are as written: times are epoch milliseconds (-1 is Kafka's "none"), and a field the
record's version does not have is None (leader_epoch before v3, expire_timestamp outside v1,
current_state_timestamp before v2, rebalance_timeout_ms in v0, group_instance_id before v3).
A value version above 4 is read as v4, as Kafka itself does since KIP-915: later versions may
only add tagged fields. Kafka 4 writes OffsetCommitValue v4 with the topic's id as tagged field
0 and GroupMetadataValue v3; the metadata string is what the client sent (confluent-kafka
appends a NUL to a metadata str: "ckpt" is stored as "ckpt\x00").

A record that does not follow its schema (truncated, trailing bytes, a negative length, a null
where the schema forbids one, invalid UTF-8, no key) raises `OffsetsDecodeError` with the
reason; nothing else is raised for any input. A member assignment that does not decode inside
an otherwise good GroupMetadataValue does not reject the record: that member gets
`assignment` None, the bytes in `assignment_raw` and the reason in `assignment_note`. The same
happens, with a note, when the group's protocol type is not "consumer" (Connect and others
use their own assignment format). Empty assignment bytes (a member not yet assigned) decode to
an empty list.

In Spark, `with_decoded` applies the decoder to a `ferry-kafka` DataFrame on the executors
(Arrow batches in, Arrow batches out); `filter_*` turn the result into the Delta tables whose
schemas are `OFFSET_COMMITS_SCHEMA`, `GROUP_METADATA_SCHEMA` and `QUARANTINE_SCHEMA`.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import Any

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

OFFSET_COMMIT_KEY_VERSIONS = (0, 1)
GROUP_METADATA_KEY_VERSION = 2
HIGHEST_VALUE_VERSION = 4  # OffsetCommitValue and GroupMetadataValue alike
FIRST_FLEXIBLE_VERSION = 4
# Newer coordinator record types, named in the unsupported rows' reason: Apache Kafka 4.3.1's
# CoordinatorRecordType (group-coordinator/src/main/resources/common/message/*Key.json). A live
# consumer-protocol group writes 3 and 5-8, and tombstones for them (4 too) when members leave
# or the group is deleted; 9 and 18 were types of earlier 4.x releases, since retired.
NEWER_KEY_TYPES = {
    3: "ConsumerGroupMetadata",
    4: "ConsumerGroupPartitionMetadata",
    5: "ConsumerGroupMemberMetadata",
    6: "ConsumerGroupTargetAssignmentMetadata",
    7: "ConsumerGroupTargetAssignmentMember",
    8: "ConsumerGroupCurrentMemberAssignment",
    10: "ShareGroupMemberMetadata",
    11: "ShareGroupMetadata",
    12: "ShareGroupTargetAssignmentMetadata",
    13: "ShareGroupTargetAssignmentMember",
    14: "ShareGroupCurrentMemberAssignment",
    15: "ShareGroupStatePartitionMetadata",
    16: "ConsumerGroupRegularExpression",
    17: "StreamsGroupMetadata",
    19: "StreamsGroupMemberMetadata",
    20: "StreamsGroupTargetAssignmentMetadata",
    21: "StreamsGroupTargetAssignmentMember",
    22: "StreamsGroupCurrentMemberAssignment",
    23: "StreamsGroupTopology",
}

KIND_OFFSET_COMMIT = "offset_commit"
KIND_GROUP_METADATA = "group_metadata"
KIND_UNSUPPORTED = "unsupported"
KIND_MALFORMED = "malformed"  # only in DataFrames: decode_record raises instead
DELETABLE_KINDS = (KIND_OFFSET_COMMIT, KIND_GROUP_METADATA)  # a null value deletes these

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


class OffsetsDecodeError(ValueError):
    """A record that does not follow its schema; the message is the reason, in one line.
    `key_version` is the record's key version when the key got that far, else None."""

    key_version: int | None = None


# ----------------------------------------------------------------------------- wire reader


class _Reader:
    """Big-endian reads over one byte string; every shortfall is an OffsetsDecodeError
    naming the struct, the field and the byte position."""

    __slots__ = ("data", "pos", "what")

    def __init__(self, data: bytes, what: str) -> None:
        self.data = data
        self.pos = 0
        self.what = what

    def fail(self, message: str) -> OffsetsDecodeError:
        return OffsetsDecodeError(f"{self.what}: {message}")

    def remaining(self) -> int:
        return len(self.data) - self.pos

    def take(self, n: int, field: str) -> bytes:
        if n > self.remaining():
            raise self.fail(
                f"truncated at byte {self.pos}: {field} needs {n} bytes, {self.remaining()} left"
            )
        start = self.pos
        self.pos += n
        return self.data[start : self.pos]

    def int16(self, field: str) -> int:
        return _I16.unpack(self.take(2, field))[0]

    def int32(self, field: str) -> int:
        return _I32.unpack(self.take(4, field))[0]

    def int64(self, field: str) -> int:
        return _I64.unpack(self.take(8, field))[0]

    def uvarint(self, field: str) -> int:
        """Unsigned varint of at most 5 bytes (an unsigned 32-bit value), as Kafka writes."""
        value = 0
        for i in range(5):
            if self.pos >= len(self.data):
                raise self.fail(f"truncated at byte {self.pos}: {field} varint is cut off")
            b = self.data[self.pos]
            self.pos += 1
            value |= (b & 0x7F) << (7 * i)
            if not b & 0x80:
                if value > 0xFFFFFFFF:
                    break
                return value
        raise self.fail(f"{field} varint at byte {self.pos} is longer than 5 bytes")

    def _length(self, field: str, flexible: bool, wide: bool) -> int:
        """-1 for null. Classic strings have an int16 length, classic bytes and arrays int32;
        compact ones an unsigned varint holding length + 1."""
        if flexible:
            return self.uvarint(field) - 1
        n = self.int32(field) if wide else self.int16(field)
        if n < -1:
            raise self.fail(f"{field} has negative length {n} at byte {self.pos}")
        return n

    def string(self, field: str, flexible: bool, nullable: bool = False) -> str | None:
        n = self._length(field, flexible, wide=False)
        if n < 0:
            if nullable:
                return None
            raise self.fail(f"{field} is null but the schema does not allow it")
        raw = self.take(n, field)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise self.fail(f"{field} is not valid UTF-8") from None

    def bytes_(self, field: str, flexible: bool, nullable: bool = False) -> bytes | None:
        n = self._length(field, flexible, wide=True)
        if n < 0:
            if nullable:
                return None
            raise self.fail(f"{field} is null but the schema does not allow it")
        return self.take(n, field)

    def array_length(self, field: str, flexible: bool, min_item_bytes: int) -> int:
        n = self._length(field, flexible, wide=True)
        if n < 0:
            raise self.fail(f"{field} is null but the schema does not allow it")
        # Refuse counts the bytes left cannot hold before looping over them.
        if n * min_item_bytes > self.remaining():
            raise self.fail(
                f"truncated at byte {self.pos}: {field} claims {n} items, "
                f"{self.remaining()} bytes left"
            )
        return n

    def skip_tagged_fields(self, field: str) -> None:
        """A flexible struct's tagged fields: count, then (tag, size, bytes) each; every tag
        is one this decoder does not know, so each is skipped by its size."""
        count = self.uvarint(f"{field} tagged field count")
        if count > self.remaining():
            raise self.fail(
                f"truncated at byte {self.pos}: {field} claims {count} tagged fields, "
                f"{self.remaining()} bytes left"
            )
        for _ in range(count):
            tag = self.uvarint(f"{field} tag")
            size = self.uvarint(f"{field} tag {tag} size")
            self.take(size, f"{field} tag {tag}")

    def end(self) -> None:
        if self.remaining():
            raise self.fail(f"{self.remaining()} unexpected bytes after the last field")


# ------------------------------------------------------------------------------- decoders


def decode_record(key: bytes, value: bytes | None) -> dict[str, Any]:
    """Decode one `__consumer_offsets` record (see the module docstring for the result);
    raises OffsetsDecodeError when the record does not follow its schema."""
    if key is None:
        raise OffsetsDecodeError("record has no key")
    reader = _Reader(bytes(key), "key")
    key_version = reader.int16("key version")
    try:
        return _decode_versioned(reader, key_version, key, value)
    except OffsetsDecodeError as exc:
        exc.key_version = key_version
        raise


def _decode_versioned(
    reader: _Reader, key_version: int, key: bytes, value: bytes | None
) -> dict[str, Any]:
    if key_version in OFFSET_COMMIT_KEY_VERSIONS:
        reader.what = f"OffsetCommitKey v{key_version}"
        row: dict[str, Any] = {
            "kind": KIND_OFFSET_COMMIT,
            "key_version": key_version,
            "group": reader.string("group", False),
            "topic": reader.string("topic", False),
            "partition": reader.int32("partition"),
        }
        reader.end()
        row.update(_offset_commit_value(value))
        return row
    if key_version == GROUP_METADATA_KEY_VERSION:
        reader.what = f"GroupMetadataKey v{key_version}"
        group = reader.string("group", False)
        reader.end()
        return {
            "kind": KIND_GROUP_METADATA,
            "key_version": key_version,
            "group": group,
            **_group_metadata_value(value),
        }
    if key_version < 0:
        raise OffsetsDecodeError(f"key: negative key version {key_version}")
    return {
        "kind": KIND_UNSUPPORTED,
        "key_version": key_version,
        "key": bytes(key),
        "value": None if value is None else bytes(value),
    }


def unsupported_reason(key_version: int) -> str:
    name = NEWER_KEY_TYPES.get(key_version)
    what = f"{name}Key" if name else "a coordinator record type newer than this decoder"
    return f"key version {key_version} is {what}; kept raw, not decoded"


def _value_version(reader: _Reader) -> tuple[int, int]:
    """(version as written, version to read it as)."""
    version = reader.int16("value version")
    if version < 0:
        raise reader.fail(f"negative value version {version}")
    return version, min(version, HIGHEST_VALUE_VERSION)


def _offset_commit_value(value: bytes | None) -> dict[str, Any]:
    if value is None:
        return {
            "value_version": None,
            "is_deletion": True,
            "offset": None,
            "leader_epoch": None,
            "metadata": None,
            "commit_timestamp": None,
            "expire_timestamp": None,
        }
    reader = _Reader(bytes(value), "OffsetCommitValue")
    written, v = _value_version(reader)
    reader.what = f"OffsetCommitValue v{written}"
    flexible = v >= FIRST_FLEXIBLE_VERSION
    out: dict[str, Any] = {"value_version": written, "is_deletion": False}
    out["offset"] = reader.int64("offset")
    out["leader_epoch"] = reader.int32("leader_epoch") if v >= 3 else None
    out["metadata"] = reader.string("metadata", flexible)
    out["commit_timestamp"] = reader.int64("commit_timestamp")
    out["expire_timestamp"] = reader.int64("expire_timestamp") if v == 1 else None
    if flexible:
        reader.skip_tagged_fields("OffsetCommitValue")
    reader.end()
    return out


_GROUP_FIELDS = ("protocol_type", "generation", "protocol", "leader", "current_state_timestamp")


def _group_metadata_value(value: bytes | None) -> dict[str, Any]:
    if value is None:
        return {
            "value_version": None,
            "is_deletion": True,
            **dict.fromkeys(_GROUP_FIELDS),
            "members": None,
        }
    reader = _Reader(bytes(value), "GroupMetadataValue")
    written, v = _value_version(reader)
    reader.what = f"GroupMetadataValue v{written}"
    flex = v >= FIRST_FLEXIBLE_VERSION
    out: dict[str, Any] = {"value_version": written, "is_deletion": False}
    out["protocol_type"] = reader.string("protocol_type", flex)
    out["generation"] = reader.int32("generation")
    out["protocol"] = reader.string("protocol", flex, nullable=True)
    out["leader"] = reader.string("leader", flex, nullable=True)
    out["current_state_timestamp"] = reader.int64("current_state_timestamp") if v >= 2 else None
    # A member is at least member_id, client_id, client_host, session timeout, subscription
    # and assignment: 4 bytes even in the compact encoding.
    count = reader.array_length("members", flex, min_item_bytes=4)
    members = []
    for i in range(count):
        m: dict[str, Any] = {}
        m["member_id"] = reader.string(f"members[{i}].member_id", flex)
        m["group_instance_id"] = (
            reader.string(f"members[{i}].group_instance_id", flex, nullable=True)
            if v >= 3
            else None
        )
        m["client_id"] = reader.string(f"members[{i}].client_id", flex)
        m["client_host"] = reader.string(f"members[{i}].client_host", flex)
        m["rebalance_timeout_ms"] = (
            reader.int32(f"members[{i}].rebalance_timeout") if v >= 1 else None
        )
        m["session_timeout_ms"] = reader.int32(f"members[{i}].session_timeout")
        reader.bytes_(f"members[{i}].subscription", flex)  # not kept: assignments are
        assignment = reader.bytes_(f"members[{i}].assignment", flex)
        if flex:
            reader.skip_tagged_fields(f"members[{i}]")
        m.update(_member_assignment(assignment, out["protocol_type"]))
        members.append(m)
    out["members"] = members
    if flex:
        reader.skip_tagged_fields("GroupMetadataValue")
    reader.end()
    return out


def _member_assignment(raw: bytes, protocol_type: str | None) -> dict[str, Any]:
    if protocol_type != "consumer":
        return {
            "assignment": None,
            "assignment_raw": raw,
            "assignment_note": f"protocol type {protocol_type!r} is not the consumer protocol; "
            "assignment kept raw",
        }
    try:
        topics = decode_assignment(raw)
    except OffsetsDecodeError as exc:
        return {"assignment": None, "assignment_raw": raw, "assignment_note": str(exc)}
    return {"assignment": topics, "assignment_raw": None, "assignment_note": None}


def decode_assignment(raw: bytes) -> list[dict[str, Any]]:
    """A ConsumerProtocolAssignment (int16 version, then [topic, [partition]] and user data,
    all classic encoding) as [{"topic", "partitions"}]. Empty bytes: no assignment yet.
    Versions above 2 are read with the v2 layout and may carry more bytes after it, as the
    consumer protocol allows; raises OffsetsDecodeError otherwise."""
    if not raw:
        return []
    reader = _Reader(bytes(raw), "ConsumerProtocolAssignment")
    version = reader.int16("version")
    if version < 0:
        raise reader.fail(f"negative version {version}")
    reader.what = f"ConsumerProtocolAssignment v{version}"
    topics = []
    # A topic entry is at least an int16 name length and an int32 partition count.
    for i in range(reader.array_length("assigned_partitions", False, min_item_bytes=6)):
        topic = reader.string(f"assigned_partitions[{i}].topic", False)
        n = reader.array_length(f"assigned_partitions[{i}].partitions", False, min_item_bytes=4)
        partitions = [reader.int32(f"assigned_partitions[{i}].partitions") for _ in range(n)]
        topics.append({"topic": topic, "partitions": partitions})
    reader.bytes_("user_data", False, nullable=True)
    if version <= 2:
        reader.end()
    return topics


# ------------------------------------------------------------------------------ schemas

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
