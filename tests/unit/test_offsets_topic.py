"""The `__consumer_offsets` decoder on hand-built records, and its Spark transforms.

Records are built by the encoder in `coordinator_records` (beside this file), written from
Kafka's message schemas independently of the decoder; a few literal byte strings, spelled out by
hand, pin the encoder itself, and a few are records Apache Kafka 4.3.1's group coordinator wrote
(the integration tests decode such records on a live cluster).
"""

from __future__ import annotations

import random
import subprocess
import sys
from datetime import datetime, timezone

import pytest

from ferry.offsets_topic import decode, tables
from ferry.offsets_topic.decode import OffsetsDecodeError, decode_record

from .coordinator_records import (
    assignment,
    commit_key,
    commit_value,
    group_key,
    group_value,
    i16,
    i32,
    i64,
    member,
    string,
    uvarint,
)

T_COMMIT = 1_700_000_000_123
T_EXPIRE = 1_700_086_400_123
T_STATE = 1_700_000_500_000


def test_decoder_imports_without_spark_or_kafka_client():
    # The plain decoder is a pure function: usable in a notebook or a script with neither.
    code = (
        "import sys, ferry.offsets_topic.decode\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pyspark', 'confluent_kafka')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_encoder_matches_hand_written_bytes():
    # OffsetCommitKey v1: version 1, "g", "t", partition 3.
    assert commit_key("g", "t", 3) == bytes.fromhex("0001 0001 67 0001 74 00000003")
    # OffsetCommitValue v4: offset 42, epoch 7, compact "" (varint 1), commit 1000, one tag
    # (tag 5, two bytes).
    assert commit_value(4, 42, "", 1000, 7, tags={5: b"\xab\xcd"}) == bytes.fromhex(
        "0004 000000000000002a 00000007 01 00000000000003e8 01 05 02 abcd"
    )
    assert uvarint(300) == bytes.fromhex("ac02")


# --------------------------------------------------------------------------- literal bytes


def test_literal_offset_commit_v3():
    key = bytes.fromhex("0001 0002 6731 0002 7431 00000003")  # v1 "g1" "t1" 3
    value = bytes.fromhex(
        "0003 0000000000000064 00000009 0002 6d64 0000018bcfe56800"
    )  # v3 offset 100, epoch 9, "md", commit 1700000000000
    assert decode_record(key, value) == {
        "kind": "offset_commit",
        "key_version": 1,
        "value_version": 3,
        "group": "g1",
        "topic": "t1",
        "partition": 3,
        "offset": 100,
        "leader_epoch": 9,
        "metadata": "md",
        "commit_timestamp": 1_700_000_000_000,
        "expire_timestamp": None,
        "is_deletion": False,
    }


def test_literal_group_metadata_v4():
    key = bytes.fromhex("0002 0001 67")  # GroupMetadataKey v2 "g"
    assigned = bytes.fromhex("0000 00000001 0001 74 00000002 00000000 00000002 ffffffff")
    value = (
        bytes.fromhex("0004")
        + bytes.fromhex("09") + b"consumer"  # compact "consumer"
        + bytes.fromhex("00000005")  # generation 5
        + bytes.fromhex("06") + b"range"  # compact "range"
        + bytes.fromhex("00")  # leader null
        + bytes.fromhex("0000018bcfe56800")  # current state timestamp
        + bytes.fromhex("02")  # one member
        + bytes.fromhex("026d 00 0263 032f68 00007530 00002710 01")  # m, null, c, /h, 30000,
        + bytes([len(assigned) + 1]) + assigned  # 10000, empty subscription, assignment
        + bytes.fromhex("00")  # member: no tagged fields
        + bytes.fromhex("01 00 01 ff")  # group: one tagged field, tag 0, one byte
    )  # fmt: skip
    assert decode_record(key, value) == {
        "kind": "group_metadata",
        "key_version": 2,
        "value_version": 4,
        "group": "g",
        "is_deletion": False,
        "protocol_type": "consumer",
        "generation": 5,
        "protocol": "range",
        "leader": None,
        "current_state_timestamp": 1_700_000_000_000,
        "members": [
            {
                "member_id": "m",
                "group_instance_id": None,
                "client_id": "c",
                "client_host": "/h",
                "rebalance_timeout_ms": 30000,
                "session_timeout_ms": 10000,
                "assignment": [{"topic": "t", "partitions": [0, 2]}],
                "assignment_raw": None,
                "assignment_note": None,
            }
        ],
    }


# ------------------------------------------------------ records Apache Kafka 4.3.1 wrote

# A classic consumer (client.id "cid-classic", session 20 s, max.poll.interval 60 s, range
# assignor) of group "g-classic" on topic "t" (two partitions), and a consumer-protocol
# (KIP-848) group "g-consumer", as read back from `__consumer_offsets`.
KAFKA_MEMBER = "cid-classic-9a4a444b-0fc6-444d-9381-72a50a7982db"
KAFKA_TOPIC_ID = bytes.fromhex("502e5e81d0e04116af9e0143491e4cad")


def test_kafka_offset_commit_v4_with_metadata_leader_epoch_and_topic_id_tag():
    # confluent-kafka sends a str metadata with its C terminator: "ckpt" arrives as "ckpt\0".
    # Kafka 4 writes value v4 with the topic id as tagged field 0 (skipped).
    key = bytes.fromhex("0001 0009") + b"g-classic" + bytes.fromhex("0001 74 00000000")
    value = (
        bytes.fromhex("0004 0000000000000004 00000000 06") + b"ckpt\x00"
        + bytes.fromhex("000001a20d7d6131 01 00 10") + KAFKA_TOPIC_ID
    )  # fmt: skip
    assert decode_record(key, value) == {
        "kind": "offset_commit",
        "key_version": 1,
        "value_version": 4,
        "group": "g-classic",
        "topic": "t",
        "partition": 0,
        "offset": 4,
        "leader_epoch": 0,
        "metadata": "ckpt\x00",
        "commit_timestamp": 1_795_522_650_417,
        "expire_timestamp": None,
        "is_deletion": False,
    }


def test_kafka_group_metadata_v3_of_a_classic_consumer():
    member_id = KAFKA_MEMBER.encode()
    value = (
        bytes.fromhex("0003 0008") + b"consumer" + bytes.fromhex("00000001 0005") + b"range"
        + bytes.fromhex("0030") + member_id + bytes.fromhex("000001a20d7d60b5 00000001 0030")
        + member_id + bytes.fromhex("ffff 000b") + b"cid-classic" + bytes.fromhex("000a")
        + b"/127.0.0.1" + bytes.fromhex("0000ea60 00004e20")
        # subscription (ConsumerProtocolSubscription v3: "t", no user data, no owned
        # partitions, generation -1, rack ""; not decoded), then the assignment: v0, topic "t"
        # with partitions 0 and 1, empty user data
        + bytes.fromhex("00000017 0003 00000001 0001 74 00000000 00000000 ffffffff 0000")
        + bytes.fromhex("00000019 0000 00000001 0001 74 00000002 00000000 00000001 00000000")
    )  # fmt: skip
    row = decode_record(bytes.fromhex("0002 0009") + b"g-classic", value)
    assert row["value_version"] == 3 and row["generation"] == 1
    assert (row["protocol_type"], row["protocol"]) == ("consumer", "range")
    assert row["leader"] == KAFKA_MEMBER
    assert row["current_state_timestamp"] == 1_795_522_650_293
    assert row["members"] == [
        {
            "member_id": KAFKA_MEMBER,
            "group_instance_id": None,
            "client_id": "cid-classic",
            "client_host": "/127.0.0.1",
            "rebalance_timeout_ms": 60000,
            "session_timeout_ms": 20000,
            "assignment": [{"topic": "t", "partitions": [0, 1]}],
            "assignment_raw": None,
            "assignment_note": None,
        }
    ]


@pytest.mark.parametrize(
    "key, value, name",
    [
        # ConsumerGroupMetadata (group epoch 2 and its metadata hash, flexible v0)
        ("0003 000a 672d636f6e73756d6572", "0000 00000002 01 00 08 eb5edb8df2002d81",
         "ConsumerGroupMetadataKey"),
        # a member's ConsumerGroupMemberMetadata deleted when it left
        ("0005 000a 672d636f6e73756d6572 0016 652b4d616e493346534c6976624f77546f2f2f437677",
         None, "ConsumerGroupMemberMetadataKey"),
    ],
)  # fmt: skip
def test_kafka_consumer_protocol_records_are_kept_raw(key, value, name):
    key, value = bytes.fromhex(key), value and bytes.fromhex(value)
    row = decode_record(key, value)
    assert row == {"kind": "unsupported", "key_version": key[1], "key": key, "value": value}
    assert name in decode.unsupported_reason(row["key_version"])


def test_kafka_group_deletion_of_a_group_that_only_had_offsets():
    # Deleting a group committed to only through the admin API writes a group tombstone too.
    row = decode_record(bytes.fromhex("0002 0004") + b"gone", None)
    assert (row["kind"], row["group"], row["is_deletion"], row["members"]) == (
        "group_metadata",
        "gone",
        True,
        None,
    )


# --------------------------------------------------------------------------- offset commits


@pytest.mark.parametrize("key_version", [0, 1])
@pytest.mark.parametrize("value_version", [0, 1, 2, 3, 4])
def test_offset_commit_every_key_and_value_version(key_version, value_version):
    key = commit_key("orders-app", "orders", 7, key_version)
    value = commit_value(value_version, 12345, "ckpt é", T_COMMIT, 11, T_EXPIRE)
    assert decode_record(key, value) == {
        "kind": "offset_commit",
        "key_version": key_version,
        "value_version": value_version,
        "group": "orders-app",
        "topic": "orders",
        "partition": 7,
        "offset": 12345,
        "leader_epoch": 11 if value_version >= 3 else None,
        "metadata": "ckpt é",
        "commit_timestamp": T_COMMIT,
        "expire_timestamp": T_EXPIRE if value_version == 1 else None,
        "is_deletion": False,
    }


def test_offset_commit_v4_skips_unknown_tagged_fields():
    tags = {0: b"x", 3: b"\x00" * 200, 70000: b""}  # a 2-byte size and a 3-byte tag
    value = commit_value(4, 5, "", T_COMMIT, 2, tags=tags)
    row = decode_record(commit_key("g", "t", 0), value)
    assert (row["offset"], row["leader_epoch"], row["metadata"]) == (5, 2, "")
    assert row["commit_timestamp"] == T_COMMIT


def test_newer_value_version_is_read_as_v4():
    # KIP-915: later versions may only add tagged fields, so v4's layout still applies.
    row = decode_record(commit_key("g", "t", 0), i16(7) + commit_value(4, 9, "m", T_COMMIT, 1)[2:])
    assert (row["value_version"], row["offset"], row["leader_epoch"]) == (7, 9, 1)


def test_offset_commit_tombstone_is_a_deletion():
    assert decode_record(commit_key("g", "t", 4), None) == {
        "kind": "offset_commit",
        "key_version": 1,
        "value_version": None,
        "group": "g",
        "topic": "t",
        "partition": 4,
        "offset": None,
        "leader_epoch": None,
        "metadata": None,
        "commit_timestamp": None,
        "expire_timestamp": None,
        "is_deletion": True,
    }


# --------------------------------------------------------------------------- group metadata


def two_members(version: int) -> list[bytes]:
    return [
        member(
            version,
            "consumer-1-aaa",
            "consumer-1",
            "/10.0.0.1",
            45000,
            assignment([("orders", [0, 2]), ("payments", [1])], version=1, user_data=b"u"),
            instance_id="pod-1",
            rebalance_ms=300000,
            tags={9: b"zz"},
        ),
        member(
            version,
            "consumer-2-bbb",
            "consumer-2",
            "/10.0.0.2",
            45000,
            assignment([("orders", [1])], version=2),
            rebalance_ms=300000,
        ),
    ]


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
def test_group_metadata_every_value_version(version):
    value = group_value(
        version, "consumer", 42, "range", "consumer-1-aaa", two_members(version), T_STATE,
        tags={1: b"\x01\x02"},
    )  # fmt: skip
    row = decode_record(group_key("orders-app"), value)
    expected_members = [
        {
            "member_id": "consumer-1-aaa",
            "group_instance_id": "pod-1" if version >= 3 else None,
            "client_id": "consumer-1",
            "client_host": "/10.0.0.1",
            "rebalance_timeout_ms": 300000 if version >= 1 else None,
            "session_timeout_ms": 45000,
            "assignment": [
                {"topic": "orders", "partitions": [0, 2]},
                {"topic": "payments", "partitions": [1]},
            ],
            "assignment_raw": None,
            "assignment_note": None,
        },
        {
            "member_id": "consumer-2-bbb",
            "group_instance_id": None,
            "client_id": "consumer-2",
            "client_host": "/10.0.0.2",
            "rebalance_timeout_ms": 300000 if version >= 1 else None,
            "session_timeout_ms": 45000,
            "assignment": [{"topic": "orders", "partitions": [1]}],
            "assignment_raw": None,
            "assignment_note": None,
        },
    ]
    assert row == {
        "kind": "group_metadata",
        "key_version": 2,
        "value_version": version,
        "group": "orders-app",
        "is_deletion": False,
        "protocol_type": "consumer",
        "generation": 42,
        "protocol": "range",
        "leader": "consumer-1-aaa",
        "current_state_timestamp": T_STATE if version >= 2 else None,
        "members": expected_members,
    }


@pytest.mark.parametrize("version", [0, 3, 4])
def test_empty_group_has_null_protocol_and_leader_and_no_members(version):
    row = decode_record(group_key("idle"), group_value(version, "consumer", 3, None, None, []))
    assert (row["protocol"], row["leader"], row["members"], row["generation"]) == (
        None,
        None,
        [],
        3,
    )


def test_group_tombstone_is_a_deletion():
    row = decode_record(group_key("gone"), None)
    assert row == {
        "kind": "group_metadata",
        "key_version": 2,
        "value_version": None,
        "group": "gone",
        "is_deletion": True,
        "protocol_type": None,
        "generation": None,
        "protocol": None,
        "leader": None,
        "current_state_timestamp": None,
        "members": None,
    }


def members_of(protocol_type: str, assigned: bytes, version: int = 3) -> list[dict]:
    value = group_value(
        version, protocol_type, 1, "p", "m", [member(version, "m", "c", "/h", 1, assigned)]
    )
    return decode_record(group_key("g"), value)["members"]


def test_undecodable_assignment_keeps_the_record_with_raw_bytes_and_a_note():
    bad = i16(0) + i32(1) + string("orders") + i32(5) + i32(0)  # 5 partitions, one present
    (m,) = members_of("consumer", bad)
    assert m["assignment"] is None and m["assignment_raw"] == bad
    assert m["assignment_note"].startswith("ConsumerProtocolAssignment v0: truncated")
    assert m["member_id"] == "m" and m["client_host"] == "/h"


def test_assignment_of_another_protocol_type_is_kept_raw():
    raw = b"\x00\x01connect-assignment"
    (m,) = members_of("connect", raw, version=4)
    assert (m["assignment"], m["assignment_raw"]) == (None, raw)
    assert "not the consumer protocol" in m["assignment_note"]


def test_empty_assignment_is_no_partitions():
    (m,) = members_of("consumer", b"")
    assert (m["assignment"], m["assignment_raw"], m["assignment_note"]) == ([], None, None)


def test_assignment_versions():
    topics = [("a", [3, 1])]
    expected = [{"topic": "a", "partitions": [3, 1]}]
    for version in (0, 1, 2):
        assert decode.decode_assignment(assignment(topics, version)) == expected
        with pytest.raises(OffsetsDecodeError, match="unexpected bytes"):
            decode.decode_assignment(assignment(topics, version) + b"\x00")
    # A newer consumer protocol version is read with the known layout; it may append fields.
    assert decode.decode_assignment(assignment(topics, 3) + i32(99)) == expected
    assert decode.decode_assignment(assignment(topics, 0, user_data=None)) == expected


# ------------------------------------------------------------------------- unsupported keys


@pytest.mark.parametrize("key_version", [3, 8, 9, 17, 32767])
@pytest.mark.parametrize("value", [b"\x00\x00anything", None])
def test_newer_key_versions_are_unsupported_rows_with_the_raw_bytes(key_version, value):
    key = i16(key_version) + string("orders-app")
    assert decode_record(key, value) == {
        "kind": "unsupported",
        "key_version": key_version,
        "key": key,
        "value": value,
    }


def test_unsupported_reason_names_known_record_types():
    assert "ConsumerGroupMetadataKey" in decode.unsupported_reason(3)
    # Apache Kafka 4.3.1's CoordinatorRecordType: share groups, regex subscriptions, streams
    assert "ShareGroupMetadataKey" in decode.unsupported_reason(11)
    assert "ConsumerGroupRegularExpressionKey" in decode.unsupported_reason(16)
    assert "StreamsGroupTopologyKey" in decode.unsupported_reason(23)
    assert "newer than this decoder" in decode.unsupported_reason(99)


# ---------------------------------------------------------------------------- malformed


GOOD_KEY = commit_key("g", "t", 0)
GOOD_VALUE = commit_value(3, 1, "m", T_COMMIT, 0)


@pytest.mark.parametrize(
    "key, value, reason",
    [
        (None, GOOD_VALUE, "record has no key"),
        (b"", GOOD_VALUE, "key: truncated at byte 0: key version needs 2 bytes, 0 left"),
        (b"\x00", None, "key version needs 2 bytes, 1 left"),
        (i16(-1) + string("g"), None, "negative key version -1"),
        (i16(1) + i16(5) + b"gr", None, "OffsetCommitKey v1: truncated at byte 4: group needs"),
        (GOOD_KEY + b"\x00", GOOD_VALUE, "OffsetCommitKey v1: 1 unexpected bytes"),
        (group_key("g") + b"zz", None, "GroupMetadataKey v2: 2 unexpected bytes"),
        (i16(1) + i16(-2) + b"", None, "group has negative length -2"),
        (i16(1) + string(None) + string("t") + i32(0), None, "group is null but"),
        (i16(1) + i16(2) + b"\xff\xfe" + string("t") + i32(0), None, "group is not valid UTF-8"),
        (GOOD_KEY, b"", "OffsetCommitValue: truncated at byte 0: value version"),
        (GOOD_KEY, i16(-3) + GOOD_VALUE[2:], "negative value version -3"),
        (GOOD_KEY, GOOD_VALUE[:-1], "OffsetCommitValue v3: truncated at byte"),
        (GOOD_KEY, GOOD_VALUE + b"\x00", "OffsetCommitValue v3: 1 unexpected bytes"),
        (GOOD_KEY, i16(0) + i64(1) + string(None) + i64(0), "metadata is null but"),
        (GOOD_KEY, i16(4) + i64(1) + i32(0) + uvarint(0) + i64(0) + b"\x00", "metadata is null"),
        (GOOD_KEY, i16(4) + i64(1) + i32(0) + b"\x80" * 6, "metadata varint at byte 19 is longer"),
        (GOOD_KEY, i16(4) + i64(1) + i32(0) + b"\x81", "metadata varint is cut off"),
        (GOOD_KEY, commit_value(4, 1, "", 0)[:-1] + b"\x01\x00\x05ab", "tag 0 needs 5 bytes"),
        (GOOD_KEY, commit_value(4, 1, "", 0)[:-1] + b"\x7f", "claims 127 tagged fields"),
        (group_key("g"), i16(0) + string("consumer") + i32(1) + string(None) + string(None)
         + i32(1_000_000), "members claims 1000000 items"),
        (group_key("g"), i16(4) + string("consumer", True) + i32(1) + b"\x00\x00" + i64(0)
         + uvarint(0) + b"\x00", "members is null but"),
        (group_key("g"), group_value(1, "consumer", 1, "p", "m", [member(1, "m", "c", "h", 1,
         b"")])[:-3], "GroupMetadataValue v1: truncated"),
        (group_key("g"), group_value(2, "consumer", 1, None, None, []) + b"\x00",
         "GroupMetadataValue v2: 1 unexpected bytes"),
    ],
)  # fmt: skip
def test_malformed_records_raise_with_the_reason(key, value, reason):
    with pytest.raises(OffsetsDecodeError) as info:
        decode_record(key, value)
    assert reason in str(info.value)
    assert isinstance(info.value, ValueError) and "\n" not in str(info.value)


def test_decode_error_carries_the_key_version():
    with pytest.raises(OffsetsDecodeError) as info:
        decode_record(group_key("g"), b"\x00")
    assert info.value.key_version == 2
    with pytest.raises(OffsetsDecodeError) as info:
        decode_record(b"\x00", None)
    assert info.value.key_version is None


VALID_RECORDS = [
    (commit_key("grp", "topic", 1, 0), commit_value(v, 77, "meta", T_COMMIT, 3, T_EXPIRE))
    for v in range(5)
] + [
    (group_key("grp"), group_value(v, "consumer", 4, "range", "a", two_members(v), T_STATE))
    for v in range(5)
]


@pytest.mark.parametrize("key, value", VALID_RECORDS)
def test_every_truncation_is_an_error(key, value):
    for cut in range(len(key)):
        with pytest.raises(OffsetsDecodeError):
            decode_record(key[:cut], value)
    for cut in range(len(value)):
        with pytest.raises(OffsetsDecodeError):
            decode_record(key, value[:cut])


def test_corrupt_bytes_decode_or_raise_the_decode_error_only():
    rng = random.Random(20240601)
    outcomes = {"decoded": 0, "error": 0}
    for _ in range(3000):
        key, value = rng.choice(VALID_RECORDS)
        value = bytearray(value)
        for _ in range(rng.randint(1, 4)):
            value[rng.randrange(len(value))] = rng.randrange(256)
        try:
            assert isinstance(decode_record(key, bytes(value)), dict)
            outcomes["decoded"] += 1
        except OffsetsDecodeError:
            outcomes["error"] += 1
    assert outcomes["decoded"] > 100 and outcomes["error"] > 100, outcomes
    for _ in range(500):
        junk = rng.randbytes(rng.randrange(40))
        try:
            decode_record(junk[:2] if rng.random() < 0.5 else junk, rng.randbytes(30))
        except OffsetsDecodeError:
            pass


# ------------------------------------------------------------------------------ in Spark

TS = datetime(2024, 5, 1, tzinfo=timezone.utc)


def utc(ms: int) -> datetime:
    """How collect() returns a timestamp in the tests' UTC session: naive UTC."""
    return datetime.fromtimestamp(ms / 1000, timezone.utc).replace(tzinfo=None)


def records_df(spark, rows):
    """A `ferry-kafka`-shaped DataFrame: rows of (partition, offset, key, value)."""
    from pyspark.sql.types import StructType

    from ferry.kafka.source import FULL_SCHEMA

    schema = StructType([FULL_SCHEMA[c] for c in tables.INPUT_COLUMNS])
    return spark.createDataFrame(
        [("__consumer_offsets", p, o, TS, k, v) for p, o, k, v in rows], schema
    )


def test_decoded_tables_have_the_published_schemas_and_rows(spark):
    key = commit_key("g", "t", 0)
    df = tables.with_decoded(
        records_df(
            spark,
            [
                (0, 10, key, commit_value(1, 5, "m", T_COMMIT, expire_ts=-1)),
                (0, 11, key, None),
                (1, 3, group_key("g"), group_value(2, "consumer", 1, None, None, [], T_STATE)),
                (1, 4, i16(5) + string("g") + string("m"), b"\x00\x00"),
                (2, 0, b"\x00\x01\x00", b"x"),
            ],
        )
    )
    commits = tables.filter_offset_commits(df, "run-1", "earliest")
    groups = tables.filter_group_metadata(df, "run-1", "earliest")
    quarantine = tables.filter_quarantine(df, "run-1", "earliest")
    assert commits.schema == tables.OFFSET_COMMITS_SCHEMA
    assert groups.schema == tables.GROUP_METADATA_SCHEMA
    assert quarantine.schema == tables.QUARANTINE_SCHEMA

    # One action per table, sorted here: every Spark action costs seconds on two cores.
    rows = sorted((r.asDict() for r in commits.collect()), key=lambda r: r["record_offset"])
    assert [(r["offset"], r["is_deletion"], r["record_offset"]) for r in rows] == [
        (5, False, 10),
        (None, True, 11),
    ]
    # Times become timestamps; Kafka's -1 ("none") becomes null.
    assert rows[0]["commit_timestamp"] == utc(T_COMMIT)
    assert rows[0]["expire_timestamp"] is None
    assert rows[0]["record_timestamp"] == TS.replace(tzinfo=None)
    assert rows[0]["run_id"] == "run-1" and rows[0]["read_from"] == "earliest"

    (group,) = groups.collect()
    assert (group["group"], group["members"], group["record_partition"]) == ("g", [], 1)
    assert group["current_state_timestamp"] == utc(T_STATE)

    q = {r["kind"]: r.asDict() for r in quarantine.collect()}
    assert q["unsupported"]["key_version"] == 5 and q["unsupported"]["value"] == b"\x00\x00"
    assert "ConsumerGroupMemberMetadataKey" in q["unsupported"]["reason"]
    assert q["malformed"]["key"] == b"\x00\x01\x00" and q["malformed"]["key_version"] == 1
    assert q["malformed"]["reason"].startswith("OffsetCommitKey v1: truncated")

    assert tables.kind_counts(df) == {
        "offset_commit": (2, 1),
        "group_metadata": (1, 0),
        "unsupported": (1, 0),
        "malformed": (1, 0),
    }


def test_latest_snapshot_keeps_the_last_record_per_partition_and_key(spark):
    a, b = commit_key("g", "a", 0), commit_key("g", "b", 0)
    df = tables.with_decoded(
        records_df(
            spark,
            [
                (0, 0, a, commit_value(3, 1, "", T_COMMIT)),
                (0, 1, b, commit_value(3, 1, "", T_COMMIT)),
                (0, 2, a, commit_value(3, 2, "", T_COMMIT)),
                (0, 3, b, None),  # b's latest is its deletion: kept
                (1, 0, a, commit_value(3, 9, "", T_COMMIT)),  # another partition, kept apart
                (1, 1, b"\x00", b"bad"),  # malformed records compact like any other
                (1, 2, b"\x00", b"worse"),
                (1, 3, None, b"no key"),  # records without a key cannot be compacted
                (1, 4, None, b"no key again"),
            ],
        )
    )
    latest = tables.filter_latest_per_key(df)
    assert latest.schema == tables.DECODED_SCHEMA
    got = sorted(
        (r.record_partition, r.record_offset, r.kind, r.offset)
        for r in latest.select("record_partition", "record_offset", "kind", "offset").collect()
    )
    assert got == [
        (0, 2, "offset_commit", 2),
        (0, 3, "offset_commit", None),
        (1, 0, "offset_commit", 9),
        (1, 2, "malformed", None),
        (1, 3, "malformed", None),
        (1, 4, "malformed", None),
    ]
