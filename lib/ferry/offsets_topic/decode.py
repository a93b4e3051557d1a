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

Nothing here imports pyspark or a Kafka client: `ferry.offsets_topic.tables` applies this in
Spark.
"""

from __future__ import annotations

from typing import Any

from ferry.offsets_topic.wire import OffsetsDecodeError, WireReader

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


def decode_record(key: bytes, value: bytes | None) -> dict[str, Any]:
    """Decode one `__consumer_offsets` record (see the module docstring for the result);
    raises OffsetsDecodeError when the record does not follow its schema."""
    if key is None:
        raise OffsetsDecodeError("record has no key")
    reader = WireReader(bytes(key), "key")
    key_version = reader.int16("key version")
    try:
        return _decode_versioned(reader, key_version, key, value)
    except OffsetsDecodeError as exc:
        exc.key_version = key_version
        raise


def _decode_versioned(
    reader: WireReader, key_version: int, key: bytes, value: bytes | None
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


def _value_version(reader: WireReader) -> tuple[int, int]:
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
    reader = WireReader(bytes(value), "OffsetCommitValue")
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
    reader = WireReader(bytes(value), "GroupMetadataValue")
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
    reader = WireReader(bytes(raw), "ConsumerProtocolAssignment")
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
