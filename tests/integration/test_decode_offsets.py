"""`decode-offsets` end to end on a real local broker.

The tansu test broker keeps committed offsets in its own storage, not in a topic, but it lets
a client create a topic named `__consumer_offsets` and produce to it. So these tests write
coordinator records in Kafka's binary layout (built by `ferry.testing.coordinator`, an encoder
independent of the decoder) into a real `__consumer_offsets`, and the job reads it under its
default name. The broker is shared by the whole test run: rows are matched to the records
produced here by their offsets.
"""

from __future__ import annotations

import json
import textwrap
import time
from datetime import datetime, timezone

import pytest
from deltalake import DeltaTable

from ferry import offsets_topic
from ferry.testing.coordinator import (
    assignment,
    commit_key,
    commit_value,
    group_key,
    group_value,
    i16,
    member,
    string,
)
from ferry.testing.produce import Record, create_topics, produce

from .jobrunner import run_job

pytestmark = pytest.mark.integration

TOPIC = "__consumer_offsets"
BASE = int(time.time() * 1000) - 60_000
T_COMMIT = 1_700_000_000_000
T_STATE = 1_700_000_100_000


def ms(value: int) -> datetime:
    return datetime.fromtimestamp(value / 1000, timezone.utc)


@pytest.fixture(scope="module")
def world(cluster):
    """Two partitions of coordinator records of every kind; partition 2 stays empty."""
    u = f"do{int(time.time() * 1000) % 10**8}"
    app, legacy, old = f"{u}-app", f"{u}-legacy", f"{u}-old"
    create_topics(cluster.config, {TOPIC: 3})
    app0, app1, legacy1 = (
        commit_key(app, "orders", 0),
        commit_key(app, "orders", 1),
        commit_key(legacy, "orders", 1, version=0),
    )
    m1 = member(
        3, "c-1", "client-1", "/10.0.0.1", 45000, assignment([("orders", [0, 1])]), "pod-1", 60000
    )
    m2 = member(3, "c-2", "client-2", "/10.0.0.2", 45000, b"", None, 60000)
    m4 = member(
        4, "c-1", "client-1", "/10.0.0.1", 45000, assignment([("orders", [1, 0])], version=1),
        "pod-1", 60000, tags={7: b"new"},
    )  # fmt: skip
    p0 = [
        (app0, commit_value(3, 10, "", T_COMMIT, leader_epoch=1)),
        (app0, commit_value(4, 20, "ckpt", T_COMMIT + 1, leader_epoch=2, tags={0: b"\x01"})),
        (legacy1, commit_value(1, 5, "old", T_COMMIT, expire_ts=T_COMMIT + 86_400_000)),
        (app1, commit_value(0, 7, "", T_COMMIT)),
        (app1, commit_value(2, 8, "", T_COMMIT + 2)),
        (legacy1, None),
    ]
    p1 = [
        (group_key(app), group_value(3, "consumer", 1, "range", "c-1", [m1, m2], T_STATE)),
        (group_key(app), group_value(4, "consumer", 2, "range", "c-1", [m4], T_STATE + 1)),
        (group_key(old), group_value(0, "consumer", 9, None, None, [])),
        (group_key(old), None),
        (i16(3) + string(f"{u}-new"), b"\x00\x00kip-848 record"),  # ConsumerGroupMetadataKey
        (commit_key(f"{u}-cut", "orders", 0), commit_value(3, 1, "", T_COMMIT)[:-3]),
        (i16(1) + i16(40) + u.encode(), None),  # the group name claims 40 bytes
    ]
    offsets = {}
    for partition, records in ((0, p0), (1, p1)):
        produced = produce(
            cluster.config,
            TOPIC,
            partition,
            [Record(k, v, BASE + i) for i, (k, v) in enumerate(records)],
        )
        offsets[partition] = produced
    return {"u": u, "app": app, "legacy": legacy, "old": old, "offsets": offsets}


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
    """A Delta table's rows, read with deltalake (independently of the job's Spark)."""
    return DeltaTable(path).to_pyarrow_table().to_pylist()


def ours(rows: list[dict], world, *positions: tuple[int, int]) -> list[dict]:
    """Rows of the records this module produced, as (partition, index) → by record order."""
    wanted = (
        {(p, world["offsets"][p][i]) for p, i in positions}
        if positions
        else {(p, o) for p, offs in world["offsets"].items() for o in offs}
    )
    picked = [r for r in rows if (r["record_partition"], r["record_offset"]) in wanted]
    return sorted(picked, key=lambda r: (r["record_partition"], r["record_offset"]))


def commit_tuple(r: dict) -> tuple:
    return (
        r["group"], r["topic"], r["partition"], r["offset"], r["leader_epoch"], r["metadata"],
        r["commit_timestamp"], r["expire_timestamp"], r["is_deletion"], r["key_version"],
        r["value_version"],
    )  # fmt: skip


def run_decode(config: str, *argv: str):
    result = run_job("decode-offsets", "--config", config, "--quiet", "-o", "json", *argv)
    assert result.code == 0, result.stderr
    return result


def check_summary(result, paths) -> None:
    """The summary counts exactly what the tables hold for this run."""
    summary = {r["kind"]: r for r in json.loads(result.stdout)}
    assert set(summary) == {"offset_commit", "group_metadata", "unsupported", "malformed"}
    commits, groups, quarantine = (table(paths[k]) for k in ("commits", "groups", "quarantine"))
    assert summary["offset_commit"]["records"] == len(commits)
    assert summary["offset_commit"]["deletions"] == sum(r["is_deletion"] for r in commits)
    assert summary["group_metadata"]["records"] == len(groups)
    for kind in ("unsupported", "malformed"):
        assert summary[kind]["records"] == sum(r["kind"] == kind for r in quarantine)
        assert summary[kind]["path"] == paths["quarantine"]
    assert summary["offset_commit"]["path"] == paths["commits"]
    assert "written via deltalake" in result.stderr or "written via delta-spark" in result.stderr


def test_earliest_decodes_every_record_of_every_version(cluster, world, tmp_path):
    config, paths = write_config(cluster, tmp_path, "earliest")
    result = run_decode(config)
    check_summary(result, paths)
    malformed = {r["kind"]: r for r in json.loads(result.stdout)}["malformed"]["records"]
    assert f"warning: {malformed} malformed records quarantined in {paths['quarantine']}" in (
        result.stderr
    )

    app, legacy = world["app"], world["legacy"]
    commits = ours(table(paths["commits"]), world)
    assert [commit_tuple(r) for r in commits] == [
        (app, "orders", 0, 10, 1, "", ms(T_COMMIT), None, False, 1, 3),
        (app, "orders", 0, 20, 2, "ckpt", ms(T_COMMIT + 1), None, False, 1, 4),
        (legacy, "orders", 1, 5, None, "old", ms(T_COMMIT), ms(T_COMMIT + 86_400_000), False, 0, 1),
        (app, "orders", 1, 7, None, "", ms(T_COMMIT), None, False, 1, 0),
        (app, "orders", 1, 8, None, "", ms(T_COMMIT + 2), None, False, 1, 2),
        (legacy, "orders", 1, None, None, None, None, None, True, 0, None),
    ]
    assert [r["record_timestamp"] for r in commits] == [ms(BASE + i) for i in range(6)]
    assert {r["read_from"] for r in commits} == {"earliest"} and len(
        {r["run_id"] for r in commits}
    ) == 1

    groups = ours(table(paths["groups"]), world)
    assert [
        (g["group"], g["generation"], g["protocol"], g["leader"], g["is_deletion"]) for g in groups
    ] == [
        (app, 1, "range", "c-1", False),
        (app, 2, "range", "c-1", False),
        (world["old"], 9, None, None, False),
        (world["old"], None, None, None, True),
    ]
    assert [g["current_state_timestamp"] for g in groups] == [
        ms(T_STATE),
        ms(T_STATE + 1),
        None,
        None,
    ]
    assert [g["value_version"] for g in groups] == [3, 4, 0, None]
    first, second = groups[0]["members"], groups[1]["members"]
    assert first == [
        {
            "member_id": "c-1",
            "group_instance_id": "pod-1",
            "client_id": "client-1",
            "client_host": "/10.0.0.1",
            "rebalance_timeout_ms": 60000,
            "session_timeout_ms": 45000,
            "assignment": [{"topic": "orders", "partitions": [0, 1]}],
            "assignment_raw": None,
            "assignment_note": None,
        },
        {
            "member_id": "c-2",
            "group_instance_id": None,
            "client_id": "client-2",
            "client_host": "/10.0.0.2",
            "rebalance_timeout_ms": 60000,
            "session_timeout_ms": 45000,
            "assignment": [],
            "assignment_raw": None,
            "assignment_note": None,
        },
    ]
    assert [(m["member_id"], m["assignment"]) for m in second] == [
        ("c-1", [{"topic": "orders", "partitions": [1, 0]}])
    ]
    assert groups[2]["members"] == [] and groups[3]["members"] is None

    quarantine = ours(table(paths["quarantine"]), world)
    assert [(q["kind"], q["key_version"], q["record_offset"]) for q in quarantine] == [
        ("unsupported", 3, world["offsets"][1][4]),
        ("malformed", 1, world["offsets"][1][5]),
        ("malformed", 1, world["offsets"][1][6]),
    ]
    assert quarantine[0]["value"] == b"\x00\x00kip-848 record"
    assert quarantine[0]["key"] == i16(3) + string(f"{world['u']}-new")
    assert quarantine[1]["reason"].startswith("OffsetCommitValue v3: truncated")
    assert quarantine[2]["reason"].startswith("OffsetCommitKey v1: truncated")
    assert quarantine[2]["value"] is None and quarantine[2]["record_topic"] == TOPIC


def test_latest_snapshot_keeps_the_last_record_per_key(cluster, world, tmp_path):
    config, paths = write_config(cluster, tmp_path, "snapshot")
    result = run_decode(config, "--from", "latest-snapshot", "-o", "csv")
    assert result.stdout.splitlines()[0] == "kind,records,deletions,path"

    commits = ours(table(paths["commits"]), world)
    assert [(r["group"], r["partition"], r["offset"], r["is_deletion"]) for r in commits] == [
        (world["app"], 0, 20, False),
        (world["app"], 1, 8, False),
        (world["legacy"], 1, None, True),  # the tombstone is the latest: kept, as a deletion
    ]
    assert {r["read_from"] for r in commits} == {"latest-snapshot"}
    groups = ours(table(paths["groups"]), world)
    assert [(g["group"], g["generation"], g["is_deletion"]) for g in groups] == [
        (world["app"], 2, False),
        (world["old"], None, True),
    ]
    # Unsupported and malformed records have distinct keys: each is its own latest.
    assert len(ours(table(paths["quarantine"]), world)) == 3


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
        offsets_topic.OFFSET_COMMITS_SCHEMA.fieldNames()
    )
