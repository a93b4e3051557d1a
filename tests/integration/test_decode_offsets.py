"""`decode-offsets` end to end on a real Apache Kafka `__consumer_offsets`.

Everything in the topic is written by Kafka's own group coordinator, for what this module does
on the shared test cluster: offsets committed through the admin API, a classic consumer and a
KIP-848 consumer (`group.protocol=consumer`) that join, commit and leave, and a group deleted.
The expected rows are derived from those actions — the offsets, metadata and leader epochs
committed, the member ids, client ids and assignments the consumers had, the wall-clock
windows the actions ran in, and the `__consumer_offsets` partition Kafka places a group in —
never from the decoder's reading. The cluster is shared by the whole run, so rows are picked
by the groups this module names.
"""

from __future__ import annotations

import json
import struct
import textwrap
import time
from collections import Counter
from collections.abc import Callable
from datetime import datetime, timezone

import pytest
from deltalake import DeltaTable

from ferry import kafka
from ferry.offsets_topic import tables
from ferry.testing.brokers import BROKER_SETTINGS
from ferry.testing.produce import Record, commit_offsets, create_topics, produce

from .jobrunner import run_job
from .test_group_protocols import HOST, live_consumer, wait_for_state

pytestmark = pytest.mark.integration

TOPIC = "__consumer_offsets"
OFFSETS_PARTITIONS = int(BROKER_SETTINGS["offsets.topic.num.partitions"])
# The KIP-848 record types (CoordinatorRecordType ids) a consumer-protocol group writes when a
# member joins, by the names in Kafka's schemas; 5, 7 and 8 are keyed by group and member.
CONSUMER_GROUP_RECORDS = {
    3: "ConsumerGroupMetadata",
    5: "ConsumerGroupMemberMetadata",
    6: "ConsumerGroupTargetAssignmentMetadata",
    7: "ConsumerGroupTargetAssignmentMember",
    8: "ConsumerGroupCurrentMemberAssignment",
}
MEMBER_KEYED = {5, 7, 8}


def coordinator_partition(group: str) -> int:
    """The `__consumer_offsets` partition of a group: Utils.abs(groupId.hashCode()) % count."""
    h = 0
    for ch in group:  # Java's String.hashCode over UTF-16 code units (ASCII names here)
        h = (31 * h + ord(ch)) & 0xFFFFFFFF
    h -= (1 << 32) if h >= 1 << 31 else 0
    return (0 if h == -(1 << 31) else abs(h)) % OFFSETS_PARTITIONS


def now_ms() -> int:
    return int(time.time() * 1000)


def timed(action: Callable[[], object]) -> tuple[int, int]:
    """Run `action`; the wall-clock window (epoch ms) it ran in."""
    start = now_ms()
    action()
    return start, now_ms() + 1


def within(value: datetime | None, window: tuple[int, int]) -> bool:
    lo, hi = (datetime.fromtimestamp(t / 1000, timezone.utc) for t in window)
    return value is not None and lo <= value <= hi


def kafka_string(s: str) -> bytes:
    """A non-flexible key string: int16 length, UTF-8 bytes."""
    return struct.pack(">h", len(s.encode())) + s.encode()


def key_group(key: bytes | None) -> str | None:
    """The group id every coordinator key starts with, after its int16 record type."""
    if key is None or len(key) < 4:
        return None
    (n,) = struct.unpack(">h", key[2:4])
    return key[4 : 4 + n].decode(errors="replace") if n >= 0 else None


@pytest.fixture(scope="module")
def world(cluster):
    """Four groups' worth of coordinator records, each group's actions timed."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    u = f"do{now_ms() % 10**8}"
    topic = f"{u}-orders"
    create_topics(cluster.config, {topic: 2})
    for p in range(2):
        produce(cluster.config, topic, p, [Record(b"k", b"v%d" % i) for i in range(10)])
    admin, classic, kip848, gone = (f"{u}-{n}" for n in ("admin", "classic", "kip848", "gone"))
    windows: dict[str, tuple[int, int]] = {}
    # expected offset commit rows: (group, topic, partition, offset, leader epoch, metadata,
    # is_deletion, window of the action that wrote it)
    commits: list[tuple] = []

    # Stopped groups committed through the admin API (as migrate, groups and the demo do).
    window = timed(lambda: commit_offsets(cluster.config, admin, {(topic, 0): 3, (topic, 1): 5}))
    commits += [(admin, topic, 0, 3, -1, "", False, window),
                (admin, topic, 1, 5, -1, "", False, window)]  # fmt: skip
    window = timed(lambda: commit_offsets(cluster.config, admin, {(topic, 0): 7}))
    commits += [(admin, topic, 0, 7, -1, "", False, window)]

    # A classic consumer: joins, commits with metadata and a leader epoch, leaves.
    consumer = None

    def join_classic() -> None:
        nonlocal consumer
        consumer = live_consumer(cluster.config, classic, topic, "classic", f"{classic}-client")

    windows["classic join"] = timed(join_classic)
    member = consumer.memberid()
    assigned = sorted(tp.partition for tp in consumer.assignment())
    window = timed(
        lambda: consumer.commit(
            offsets=[TopicPartition(topic, 0, 4, "ckpt", 0), TopicPartition(topic, 1, 6)],
            asynchronous=False,
        )
    )
    # confluent-kafka sends a str metadata with its C string terminator, and Kafka keeps the
    # bytes it was sent.
    commits += [(classic, topic, 0, 4, 0, "ckpt\x00", False, window),
                (classic, topic, 1, 6, -1, "", False, window)]  # fmt: skip
    windows["classic leave"] = timed(consumer.close)
    assert wait_for_state(cluster, classic, {"EMPTY"}) == "EMPTY"

    # A KIP-848 consumer: its group's records are the newer types; its commits are not.
    def join_kip848() -> None:
        nonlocal consumer
        consumer = live_consumer(cluster.config, kip848, topic, "consumer", f"{kip848}-client")

    windows["kip848 join"] = timed(join_kip848)
    kip848_member = consumer.memberid()
    window = timed(
        lambda: consumer.commit(
            offsets=[TopicPartition(topic, 0, 2), TopicPartition(topic, 1, 3)],
            asynchronous=False,
        )
    )
    commits += [(kip848, topic, 0, 2, -1, "", False, window),
                (kip848, topic, 1, 3, -1, "", False, window)]  # fmt: skip
    windows["kip848 leave"] = timed(consumer.close)
    assert wait_for_state(cluster, kip848, {"EMPTY"}) == "EMPTY"

    # A group deleted: a tombstone for each committed offset and for the group.
    window = timed(lambda: commit_offsets(cluster.config, gone, {(topic, 0): 1, (topic, 1): 2}))
    commits += [(gone, topic, 0, 1, -1, "", False, window),
                (gone, topic, 1, 2, -1, "", False, window)]  # fmt: skip

    def delete() -> None:
        client = AdminClient(dict(cluster.config))
        assert client.delete_consumer_groups([gone])[gone].result() is None

    windows["gone delete"] = window = timed(delete)
    commits += [(gone, topic, p, None, None, None, True, window) for p in (0, 1)]
    assert kafka.committed_offsets(kafka.Cluster("c", cluster.config), [gone])[gone] == {}
    return {
        "u": u,
        "topic": topic,
        "groups": {"admin": admin, "classic": classic, "kip848": kip848, "gone": gone},
        "member": member,
        "assigned": assigned,
        "kip848_member": kip848_member,
        "commits": commits,
        "windows": windows,
    }


def write_config(cluster, tmp_path, name: str) -> tuple[str, dict[str, str]]:
    paths = {k: str(tmp_path / f"{name}-{k}") for k in ("commits", "groups", "quarantine")}
    config = tmp_path / f"{name}.yaml"
    config.write_text(
        textwrap.dedent(
            f"""\
            cluster:
              bootstrap.servers: {cluster.bootstrap}
            reader:
              timeout_ms: 10000
              isolation_level: read_uncommitted
            offsets:
              commits_path: {paths["commits"]}
              groups_path: {paths["groups"]}
              quarantine_path: {paths["quarantine"]}
            """
        )
    )
    return str(config), paths


def table(path: str) -> list[dict]:
    """A Delta table's rows, read with deltalake (independently of the job's Spark), in
    record order."""
    rows = DeltaTable(path).to_pyarrow_table().to_pylist()
    return sorted(rows, key=lambda r: (r["record_partition"], r["record_offset"]))


def of(rows: list[dict], *groups: str) -> list[dict]:
    return [r for r in rows if r["group"] in groups]


def run_decode(config: str, *argv: str):
    result = run_job("decode-offsets", "--config", config, "--quiet", "-o", "json", *argv)
    assert result.code == 0, result.stderr
    return result


def check_summary(result, paths) -> dict:
    """The summary counts exactly what the tables hold for this run."""
    summary = {r["kind"]: r for r in json.loads(result.stdout)}
    assert set(summary) == {"offset_commit", "group_metadata", "unsupported", "malformed"}
    commits, groups, quarantine = (table(paths[k]) for k in ("commits", "groups", "quarantine"))
    assert summary["offset_commit"]["records"] == len(commits)
    assert summary["offset_commit"]["deletions"] == sum(r["is_deletion"] for r in commits)
    assert summary["group_metadata"]["records"] == len(groups)
    assert summary["group_metadata"]["deletions"] == sum(r["is_deletion"] for r in groups)
    for kind in ("unsupported", "malformed"):
        assert summary[kind]["records"] == sum(r["kind"] == kind for r in quarantine)
        assert summary[kind]["path"] == paths["quarantine"]
    assert summary["offset_commit"]["path"] == paths["commits"]
    assert "written via deltalake" in result.stderr or "written via delta-spark" in result.stderr
    return summary


def test_earliest_decodes_what_the_coordinator_wrote(cluster, world, tmp_path):
    config, paths = write_config(cluster, tmp_path, "earliest")
    result = run_decode(config)
    summary = check_summary(result, paths)
    # Kafka's coordinator writes nothing this decoder cannot read.
    assert summary["malformed"]["records"] == 0
    assert "malformed records quarantined" not in result.stderr
    g = world["groups"]

    # Offset commits: every commit and deletion, from every group, as committed.
    commits = of(table(paths["commits"]), *g.values())
    assert Counter(
        (r["group"], r["topic"], r["partition"], r["offset"], r["leader_epoch"], r["metadata"],
         r["is_deletion"])
        for r in commits
    ) == Counter(c[:7] for c in world["commits"])  # fmt: skip
    for row in commits:
        [window] = [c[7] for c in world["commits"] if c[:7] == (
            row["group"], row["topic"], row["partition"], row["offset"], row["leader_epoch"],
            row["metadata"], row["is_deletion"])]  # fmt: skip
        assert row["record_partition"] == coordinator_partition(row["group"]), row
        assert within(row["record_timestamp"], window), row
        assert row["key_version"] == 1 and row["expire_timestamp"] is None, row
        if row["is_deletion"]:
            assert row["value_version"] is None and row["commit_timestamp"] is None, row
        else:  # a leader epoch is stored: value v3 or later
            assert row["value_version"] >= 3 and within(row["commit_timestamp"], window), row
    assert {r["read_from"] for r in commits} == {"earliest"}
    assert len({r["run_id"] for r in commits}) == 1
    # A deletion comes after the commits it deletes.
    gone = of(commits, g["gone"])
    assert [r["is_deletion"] for r in gone] == [False, False, True, True]

    # Group metadata: the classic consumer's generation with its member, then the empty
    # generation its leaving made; the deleted group's tombstone. Groups committed only
    # through the admin API, and consumer-protocol groups, have no GroupMetadata records.
    groups = table(paths["groups"])
    assert of(groups, g["admin"], g["kip848"]) == []
    classic = of(groups, g["classic"])
    assert {r["record_partition"] for r in classic} == {coordinator_partition(g["classic"])}
    with_member = [r for r in classic if r["members"]]
    assert len(with_member) == 1, classic
    [joined] = with_member
    assert (joined["protocol_type"], joined["protocol"], joined["leader"]) == (
        "consumer",
        "range",
        world["member"],
    )
    assert joined["generation"] >= 1 and not joined["is_deletion"]
    assert within(joined["current_state_timestamp"], world["windows"]["classic join"])
    assert joined["members"] == [
        {
            "member_id": world["member"],
            "group_instance_id": None,
            "client_id": f"{g['classic']}-client",
            "client_host": HOST,
            "rebalance_timeout_ms": 300000,  # max.poll.interval.ms, librdkafka's default
            "session_timeout_ms": 30000,
            "assignment": [{"topic": world["topic"], "partitions": world["assigned"]}],
            "assignment_raw": None,
            "assignment_note": None,
        }
    ]
    left = classic[-1]
    assert (left["members"], left["protocol"], left["leader"], left["is_deletion"]) == (
        [], None, None, False,
    )  # fmt: skip
    assert left["generation"] == joined["generation"] + 1
    assert within(left["current_state_timestamp"], world["windows"]["classic leave"])
    [deleted] = of(groups, g["gone"])
    assert (deleted["is_deletion"], deleted["members"], deleted["generation"]) == (True, None, None)
    assert within(deleted["record_timestamp"], world["windows"]["gone delete"])

    # The KIP-848 group's own records: kept raw, each named, its member's deleted on leaving.
    quarantine = [r for r in table(paths["quarantine"]) if key_group(r["key"]) == g["kip848"]]
    assert quarantine and {r["kind"] for r in quarantine} == {"unsupported"}
    member_key = kafka_string(g["kip848"]) + kafka_string(world["kip848_member"])
    for row in quarantine:
        record_type = row["key_version"]
        assert row["key"][:2] == struct.pack(">h", record_type)
        assert row["record_topic"] == TOPIC
        assert row["record_partition"] == coordinator_partition(g["kip848"])
        if record_type in MEMBER_KEYED:
            assert row["key"][2:] == member_key, row
        if record_type in CONSUMER_GROUP_RECORDS:
            assert f"{CONSUMER_GROUP_RECORDS[record_type]}Key" in row["reason"], row
    join = world["windows"]["kip848 join"]
    written = {r["key_version"] for r in quarantine if within(r["record_timestamp"], join)}
    assert set(CONSUMER_GROUP_RECORDS) <= written, written
    member_metadata = [r["value"] for r in quarantine if r["key_version"] == 5 and r["value"]]
    assert member_metadata  # the records' own bytes, untouched: client id and host inside
    assert all(f"{g['kip848']}-client".encode() in v and HOST.encode() in v
               for v in member_metadata)  # fmt: skip
    leave = world["windows"]["kip848 leave"]
    deleted = {r["key_version"] for r in quarantine
               if r["value"] is None and within(r["record_timestamp"], leave)}  # fmt: skip
    assert deleted == MEMBER_KEYED


def test_latest_snapshot_keeps_the_last_record_per_key(cluster, world, tmp_path):
    config, paths = write_config(cluster, tmp_path, "snapshot")
    result = run_decode(config, "--from", "latest-snapshot")
    check_summary(result, paths)
    g = world["groups"]
    commits = of(table(paths["commits"]), *g.values())
    latest = Counter((r["group"], r["partition"], r["offset"], r["is_deletion"]) for r in commits)
    assert latest == (
        Counter([
            (g["admin"], 0, 7, False),  # 3, then 7
            (g["admin"], 1, 5, False),
            (g["classic"], 0, 4, False),
            (g["classic"], 1, 6, False),
            (g["gone"], 0, None, True),  # the tombstone is the latest: kept, as a deletion
            (g["gone"], 1, None, True),
            (g["kip848"], 0, 2, False),
            (g["kip848"], 1, 3, False),
        ])
    )  # fmt: skip
    assert {r["read_from"] for r in commits} == {"latest-snapshot"}
    groups = of(table(paths["groups"]), *g.values())
    assert [(r["group"], r["members"], r["is_deletion"]) for r in groups] == sorted(
        [(g["classic"], [], False), (g["gone"], None, True)],
        key=lambda r: coordinator_partition(r[0]),
    )
    # The KIP-848 member's records end in their tombstones; the group's own records remain.
    raw = {
        r["key_version"]: r["value"]
        for r in table(paths["quarantine"])
        if key_group(r["key"]) == g["kip848"]
    }
    assert {t for t, v in raw.items() if v is None} == MEMBER_KEYED
    assert raw[3] is not None and raw[6] is not None


def test_records_that_are_not_coordinator_records_are_quarantined(cluster, tmp_path, unique):
    """Any topic can be decoded (`--topic`, e.g. a mirrored copy of `__consumer_offsets`):
    records that follow no coordinator schema land in quarantine with the reason, exit 0."""
    create_topics(cluster.config, {unique: 1})
    junk = [
        (b"\x00\x01\x00", b"x"),  # an OffsetCommitKey v1 cut after one byte of its group
        (None, b"no key"),
        (b"\x00\x02\x00\x01g", b"\x00"),  # a GroupMetadataKey whose value is one byte
        (b"\x00\x63zz", b"raw"),  # record type 99
    ]
    offsets = produce(cluster.config, unique, 0, [Record(k, v) for k, v in junk])
    config, paths = write_config(cluster, tmp_path, "junk")
    result = run_decode(config, "--topic", unique)
    summary = check_summary(result, paths)
    assert [summary[k]["records"] for k in ("offset_commit", "group_metadata")] == [0, 0]
    assert (summary["malformed"]["records"], summary["unsupported"]["records"]) == (3, 1)
    assert f"warning: 3 malformed records quarantined in {paths['quarantine']}" in result.stderr
    rows = table(paths["quarantine"])
    assert [
        (r["record_offset"], r["kind"], r["key_version"], r["key"], r["value"]) for r in rows
    ] == [
        (offsets[0], "malformed", 1, junk[0][0], junk[0][1]),
        (offsets[1], "malformed", None, None, junk[1][1]),
        (offsets[2], "malformed", 2, junk[2][0], junk[2][1]),
        (offsets[3], "unsupported", 99, junk[3][0], junk[3][1]),
    ]  # fmt: skip
    assert rows[0]["reason"].startswith("OffsetCommitKey v1: truncated")
    assert rows[1]["reason"] == "record has no key"
    assert rows[2]["reason"].startswith("GroupMetadataValue: truncated")
    assert "newer than this decoder" in rows[3]["reason"]
    assert {r["record_topic"] for r in rows} == {unique}


def test_config_and_topic_errors_are_one_line_exit_2(cluster, tmp_path):
    config, _ = write_config(cluster, tmp_path, "errors")
    result = run_job("decode-offsets", "--config", config, "--set", "offsets.groups_path=null")
    assert (result.code, result.stderr) == (
        2,
        "error: missing required config key 'offsets.groups_path'\n",
    )
    result = run_job("decode-offsets", "--config", config, "--topic", "no-such-topic-xyz")
    assert result.code == 2
    assert result.stderr == (
        f"error: topic no-such-topic-xyz does not exist on cluster ({cluster.bootstrap})\n"
    )
    result = run_job("decode-offsets", "--config", config, "--from", "yesterday")
    assert result.code == 2 and "invalid choice: 'yesterday'" in result.stderr


def test_an_empty_topic_gives_empty_tables(cluster, tmp_path, unique):
    create_topics(cluster.config, {unique: 2})
    config, paths = write_config(cluster, tmp_path, "empty")
    result = run_decode(config, "--topic", unique)
    assert [r["records"] for r in json.loads(result.stdout)] == [0, 0, 0, 0]
    assert "malformed records quarantined" not in result.stderr
    # The tables exist, empty, with the published schemas (a notebook can always open them).
    for key in ("commits", "groups", "quarantine"):
        assert DeltaTable(paths[key]).to_pyarrow_table().num_rows == 0
    assert DeltaTable(paths["commits"]).schema().to_arrow().names == (
        tables.OFFSET_COMMITS_SCHEMA.fieldNames()
    )
