"""`migrate --flink-savepoint`: a real Flink 2.2 job (a KafkaSource with a uid, a count per key
in keyed state, a file sink; `ferry.testing.flink_job`) on a local mini-cluster, stopped with
a savepoint mid-topic; the topic copied to the destination with other offsets (+29 and +137
records of the destination's own before the copy on two partitions; the third copied from a
later start: the source deleted records the job had read), once under its own name and once
renamed (`T-copy`). Ferry translates the savepoint (`topics.rename` to the copy), killed once
in the middle of `--execute`; the job restarted from Ferry's savepoint against the destination
must deliver every source record exactly once with its per-key counts going on; the old
savepoint restarted against the destination (same topic name) is the control.

One world for the module (three Flink runs, one JVM each): CI's slow target.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import struct
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from ferry.flink import tool
from ferry.flink.savepoint import ACTION
from ferry.testing import flink_job
from ferry.testing.produce import Record, create_topics, delete_records, produce
from ferry.testing.replicate import read_all

from .jobrunner import ledger_rows, run_job, write_migrate_config

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
PER_PARTITION = 400
STOP_AFTER = 500  # sink lines before the savepoint (of 1,200)
OWN = {0: 29, 2: 137}  # destination records of its own before the copy, per partition
LATER_START = 61  # records the source deletes on one partition (read already) before the copy
BASE_MS = int(time.time() * 1000) - 3_600_000  # an hour ago; the destination's own: older


def source_records(partition: int) -> list[Record]:
    """Values `KEY,PAYLOAD`; every 20th record starts a run of 3 identical records sharing a
    millisecond."""
    out = []
    for i in range(PER_PARTITION):
        head = i - i % 20 if i % 20 < 3 else i
        out.append(Record(b"k", f"k{head % 5},p{partition}-{head}".encode(), BASE_MS + head * 10))
    return out


def sink_lines(path: Path) -> list[tuple[str, int, str]]:
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        key, count, value = line.split("\t")
        rows.append((key, int(count), value))
    return rows


def tree_digest(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


@pytest.fixture(scope="module")
def world(clusters, tmp_path_factory):
    src, dst = clusters
    tmp = tmp_path_factory.mktemp("flink")
    prefix = f"fl{int(time.time() * 1000) % 10**8}"
    topic = f"{prefix}-orders"
    create_topics(src.config, {topic: 3})
    for p in range(3):
        produce(src.config, topic, p, source_records(p))
    produced = Counter(r.value.decode() for p in range(3) for r in source_records(p))
    started = time.monotonic()
    savepoint = Path(
        flink_job.stop_with_savepoint(
            src.bootstrap, topic, tmp / "sink1", STOP_AFTER, tmp / "savepoints"
        )
    )
    first_run_s = time.monotonic() - started
    positions = tool.read_savepoint(str(savepoint))["sources"][0]["readers"]
    at = {s["partition"]: s["offset"] for s in positions}
    # The later start goes where the job read past it (records read, then deleted by the
    # source's retention), else where it read furthest.
    later = max(at, key=lambda p: at[p])
    deleted = min(LATER_START, at[later])
    delete_records(src.config, {(topic, later): deleted})
    copied = read_all(src.config, topic)
    for name in (topic, f"{topic}-copy"):
        create_topics(dst.config, {name: 3})
        for p, n in OWN.items():
            if p != later:
                own = [Record(b"x", f"x,own-{i}".encode(), BASE_MS - 600_000) for i in range(n)]
                produce(dst.config, name, p, own)
        for p in range(3):  # partition for partition, timestamps kept, as MM2 copies
            rows = sorted((r for r in copied if r.partition == p), key=lambda r: r.offset)
            produce(dst.config, name, p, [Record(r.key, r.value, r.timestamp_ms) for r in rows])
    config = write_migrate_config(
        tmp, src, dst, prefix, topics={"rename": [{"match": "^(.*)$", "replace": r"\1-copy"}]}
    )
    return {
        "src": src, "dst": dst, "tmp": tmp, "topic": topic, "savepoint": savepoint,
        "config": config, "produced": produced, "at": at, "later": later, "deleted": deleted,
        "first_run_s": first_run_s,
    }  # fmt: skip


def test_dry_run_plans_every_split(world):
    started = time.monotonic()
    done = run_job("migrate", "--config", world["config"], "--flink-savepoint",
                   world["savepoint"], "-o", "json")  # fmt: skip
    print(f"dry run {time.monotonic() - started:.1f}s, first Flink run {world['first_run_s']:.1f}s")
    assert done.code == 0, done.stderr
    rows = json.loads(done.stdout)
    readers = [r for r in rows if r["group"] == "uid kafka-source"]
    assert {r["src_partition"] for r in readers} == {0, 1, 2}
    assert {r["dst_topic"] for r in readers} == {f"{world['topic']}-copy"}
    for r in readers:
        p, offset = r["src_partition"], r["committed_offset"]
        shift = -world["deleted"] if p == world["later"] else OWN.get(p, 0)
        assert r["destination_offset"] == offset + shift, r
    assert not (world["savepoint"].parent / (world["savepoint"].name + "-ferry")).exists()


@pytest.fixture(scope="module")
def executed(world):
    """--execute killed once after the new savepoint was written in its temporary folder;
    then run again."""
    before = tree_digest(world["savepoint"])
    command = [sys.executable, str(ROOT / "jobs" / "migrate.py"), "--config", world["config"],
               "--flink-savepoint", str(world["savepoint"]), "--execute"]  # fmt: skip
    env = {**os.environ, "FERRY_KILL_AT": "flink-savepoint-written", "FERRY_MASTER": "local[1]"}
    killed = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=600, check=False)  # fmt: skip
    target = world["savepoint"].parent / (world["savepoint"].name + "-ferry")
    after_kill = tree_digest(world["savepoint"])
    was_absent = not target.exists()
    done = run_job("migrate", "--config", world["config"], "--flink-savepoint",
                   world["savepoint"], "--execute")  # fmt: skip
    again = run_job("migrate", "--config", world["config"], "--flink-savepoint",
                    world["savepoint"], "--execute")  # fmt: skip
    return {"killed": killed, "before": before, "after_kill": after_kill,
            "was_absent": was_absent, "done": done, "again": again, "target": target}  # fmt: skip


def test_killed_execute_leaves_the_old_savepoint_and_no_new_one(executed):
    assert executed["killed"].returncode == -signal.SIGKILL, executed["killed"].stderr[-2000:]
    assert executed["after_kill"] == executed["before"]
    assert executed["was_absent"]


def test_rerun_writes_the_new_savepoint_once(world, executed):
    assert executed["done"].code == 0, executed["done"].stderr
    assert str(executed["target"]) in executed["done"].stdout
    assert executed["again"].code == 0, executed["again"].stderr
    assert "ALREADY_MIGRATED" in executed["again"].stdout
    assert tree_digest(world["savepoint"]) == executed["before"]
    copy = f"{world['topic']}-copy"
    # The ledger: the killed run's intent (no outcome), the rerun's intent and outcome.
    rows = [r for r in ledger_rows(world["tmp"] / "ledger") if r["action"] == ACTION]
    executed_runs = {r["run_id"] for r in rows if r["is_executed"]}
    phases = {run: {r["phase"] for r in rows if r["run_id"] == run} for run in executed_runs}
    assert sorted(map(sorted, phases.values())) == [["intent"], ["intent", "outcome"]], phases
    back = tool.read_savepoint(str(executed["target"]))["sources"][0]
    assert {s["topic"] for s in back["readers"]} == {copy}
    assert {s["topic"] for s in back["enumerator"]["splits"]} == {copy}


def test_restart_from_ferrys_savepoint_is_exact(world, executed):
    first = sink_lines(world["tmp"] / "sink1")
    expected = sum(world["produced"].values()) - len(first)
    answer = flink_job.run_until_quiet(world["dst"].bootstrap, f"{world['topic']}-copy",
                                       world["tmp"] / "sink2", str(executed["target"]),
                                       expected)  # fmt: skip
    second = sink_lines(world["tmp"] / "sink2")
    print(f"first run {len(first)} records, restart {len(second)} ({answer})")
    delivered = Counter(v for _k, _c, v in first + second)
    assert delivered == world["produced"]
    # The keyed state went on: each key's last count is its number of records.
    per_key = Counter(v.split(",")[0] for v in world["produced"].elements())
    last = {}
    for key, count, _v in first + second:
        last[key] = count
    assert last == dict(per_key)


def test_control_old_savepoint_on_the_destination_is_wrong(world, executed):
    first = sink_lines(world["tmp"] / "sink1")
    expected = sum(world["produced"].values()) - len(first)
    try:
        sink = world["tmp"] / "sink-control"
        answer = flink_job.run_until_quiet(
            world["dst"].bootstrap, world["topic"], sink, str(world["savepoint"]), expected, 5
        )
    except flink_job.FlinkJobError as exc:
        print(f"control failed: {exc}")
        return
    second = sink_lines(world["tmp"] / "sink-control")
    delivered = Counter(v for _k, _c, v in first + second)
    print(
        f"control: {answer}; repeated {sum((delivered - world['produced']).values())}, "
        f"lost {sum((world['produced'] - delivered).values())}"
    )
    assert delivered != world["produced"]


def test_other_metadata_versions_are_refused_in_one_line(world, tmp_path):
    """A savepoint of Flink 1.x (checkpoint metadata version 3) is refused by the tool, exit 2."""
    folder = tmp_path / "flink-1-savepoint"
    folder.mkdir()
    (folder / "_metadata").write_bytes(struct.pack(">ii", 0x4960672D, 3) + bytes(16))
    done = run_job("migrate", "--config", world["config"], "--flink-savepoint", folder)
    assert done.code == 2, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error")]
    assert len(errors) == 1 and "checkpoint metadata version 3" in errors[0], done.stderr
    assert "written by Flink 1.x" in errors[0] and "Flink 2.1 and 2.2" in errors[0]


def test_into_group_restarts_a_new_uid_from_the_group_exactly(world, executed):
    """`--into-group`: the translated readers' positions committed to a destination group; the
    job restarted with a new source uid from that group's offsets (its counts restored from
    the old savepoint, the old source's state dropped) delivers the rest exactly once."""
    group = f"{world['topic']}-flink"
    argv = ("--flink-savepoint", world["savepoint"], "--into-group", group, "--execute")
    done = run_job("migrate", "--config", world["config"], *argv)
    assert done.code == 0, done.stderr
    again = run_job("migrate", "--config", world["config"], *argv, "-o", "json")
    assert again.code == 0, again.stderr
    assert {r["group_status"] for r in json.loads(again.stdout)} == {"ALREADY_MIGRATED"}
    first = sink_lines(world["tmp"] / "sink1")
    expected = sum(world["produced"].values()) - len(first)
    sink = world["tmp"] / "sink-group"
    flink_job.run_until_quiet(world["dst"].bootstrap, f"{world['topic']}-copy", sink,
                              str(world["savepoint"]), expected, group=group)  # fmt: skip
    second = sink_lines(sink)
    assert Counter(v for _k, _c, v in first + second) == world["produced"]
    last = {key: count for key, count, _v in first + second}
    assert last == dict(Counter(v.split(",")[0] for v in world["produced"].elements()))
