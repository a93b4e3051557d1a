"""`migrate` end to end on two real local brokers."""

from __future__ import annotations

import json
import textwrap
import time

import pytest

from ferry import kafka
from ferry.testing.produce import Record, commit_offsets, create_topics, produce

from .jobrunner import join_group, run_job

pytestmark = pytest.mark.integration

BASE = 1_760_000_000_000
LATE_SHIFT_MS = 300_000  # a replicator that rewrites timestamps to its own append time


def unique_records(tag: str, n: int, base_ms: int = BASE, headers=()) -> list[Record]:
    return [
        Record(f"k{i % 5}".encode(), f"{tag}-{i}".encode(), base_ms + i * 10, headers)
        for i in range(n)
    ]


def replicate(records, start, *, shift_ms=0, header=None, stop=None) -> list[Record]:
    """What a replicator would have written: records[start:stop], optionally re-timestamped
    and with its own header appended."""
    out = []
    for r in records[start:stop]:
        headers = tuple(r.headers) + ((header, b"src-cluster"),) if header else tuple(r.headers)
        out.append(Record(r.key, r.value, r.timestamp_ms + shift_ms, headers))
    return out


def write_config(tmp_path, src, dst, unique, **extra) -> str:
    matching = extra.get("matching", "")
    text = textwrap.dedent(
        f"""\
        source:
          bootstrap.servers: {src.bootstrap}
        destination:
          bootstrap.servers: {dst.bootstrap}
        groups:
          include: ['{unique}-.*']
        topics:
          include: ['{unique}-.*']
          rename:
            - match: '^{unique}-renamed$'
              replace: 'mm2.{unique}-renamed'
        matching:
          window_after_ms: {LATE_SHIFT_MS + 60_000}
          hash: [key, value, headers]
          ignore_headers: [replicator]
        {matching}
        ledger:
          path: {tmp_path / "ledger"}
        reader:
          timeout_ms: 10000
        """
    )
    path = tmp_path / "migrate.yaml"
    path.write_text(text)
    return str(path)


def copied_topic(clusters, unique: str, tag: str, n: int, start: int = 0) -> str:
    """A one-partition topic of `n` records on the source and its copy on the destination,
    from source offset `start` (the copy's offset 0)."""
    src, dst = clusters
    topic = f"{unique}-t"
    create_topics(src.config, {topic: 1})
    create_topics(dst.config, {topic: 1})
    recs = unique_records(tag, n)
    produce(src.config, topic, 0, recs)
    produce(dst.config, topic, 0, replicate(recs, start))
    return topic


def committed(cluster, group) -> dict:
    return kafka.committed_offsets(kafka.Cluster("c", cluster.config), [group])[group]


@pytest.fixture(scope="module")
def world(clusters, tmp_path_factory):
    """Several topics and stopped groups, each showing one thing a migration must get right."""
    src, dst = clusters
    u = f"w{int(time.time() * 1000) % 10**8}"
    t = {name: f"{u}-{name}" for name in ("shift", "dups", "renamed", "late", "tail", "zero")}
    create_topics(
        src.config,
        {t["shift"]: 3, t["dups"]: 1, t["renamed"]: 1, t["late"]: 1, t["tail"]: 1, t["zero"]: 1},
    )
    create_topics(
        dst.config,
        {
            t["shift"]: 3,
            t["dups"]: 1,
            f"mm2.{t['renamed']}": 1,
            t["late"]: 1,
            t["tail"]: 1,
            t["zero"]: 1,
        },
    )
    # shift: destination replicated from offset 20, so destination = source - 20
    shift = {p: unique_records(f"shift{p}", 50) for p in range(3)}
    for p, recs in shift.items():
        produce(src.config, t["shift"], p, recs)
        produce(dst.config, t["shift"], p, replicate(recs, 20, header="replicator"))
    # dups: a run of identical records sharing one millisecond around the committed position
    dups = unique_records("dups", 40)
    for i in range(20, 28):
        dups[i] = Record(b"same", b"same", BASE + 5000)
    produce(src.config, t["dups"], 0, dups)
    produce(dst.config, t["dups"], 0, replicate(dups, 10, header="replicator"))
    # renamed: MirrorMaker 2 style topic prefix; records carry their own header too
    renamed = unique_records("ren", 30, headers=(("trace", b"t1"),))
    produce(src.config, t["renamed"], 0, renamed)
    produce(dst.config, f"mm2.{t['renamed']}", 0, replicate(renamed, 5, header="replicator"))
    # late: destination timestamps rewritten 5 minutes later than the source
    late = unique_records("late", 40)
    produce(src.config, t["late"], 0, late)
    produce(dst.config, t["late"], 0, replicate(late, 0, shift_ms=LATE_SHIFT_MS))
    # tail: the replica has not caught up (only the first 20 of 40 records)
    tail = unique_records("tail", 40, base_ms=int(time.time() * 1000) - 1000)
    produce(src.config, t["tail"], 0, tail)
    produce(dst.config, t["tail"], 0, replicate(tail, 0, stop=20))
    # zero: fully replicated; a group that has consumed nothing yet (C = 0)
    zero = unique_records("zero", 10)
    produce(src.config, t["zero"], 0, zero)
    produce(dst.config, t["zero"], 0, replicate(zero, 0))

    groups = {
        # shift[2] is never committed by this group: it must get nothing on the destination;
        # shift[1] is caught up (C = log end).
        f"{u}-shifted": {(t["shift"], 0): 35, (t["shift"], 1): 50},
        f"{u}-dups": {(t["dups"], 0): 24},
        f"{u}-renamed": {(t["renamed"], 0): 17},
        f"{u}-late": {(t["late"], 0): 30},
        f"{u}-tail": {(t["tail"], 0): 35, (t["zero"], 0): 0},
        f"{u}-zero": {(t["zero"], 0): 0},
    }
    for group, offsets in groups.items():
        commit_offsets(src.config, group, offsets)
    expected = {
        f"{u}-shifted": {(t["shift"], 0): 15, (t["shift"], 1): 30},
        f"{u}-dups": {(t["dups"], 0): 14},
        f"{u}-renamed": {(f"mm2.{t['renamed']}", 0): 12},
        f"{u}-late": {(t["late"], 0): 30},
        f"{u}-zero": {(t["zero"], 0): 0},
    }
    tmp = tmp_path_factory.mktemp("world")
    return {
        "u": u,
        "topics": t,
        "groups": groups,
        "expected": expected,
        "config": write_config(tmp, src, dst, u),
        "tmp": tmp,
    }


def test_dry_run_execute_twice_and_rollback(world, clusters):
    src, dst = clusters
    u, expected = world["u"], world["expected"]
    config = world["config"]

    dry = run_job("migrate", "--config", config, "-o", "json", "--quiet", "--verbose")
    assert dry.stdout, dry.stderr
    plan = json.loads(dry.stdout)
    assert dry.code == 75, dry.stderr  # the tail group is PENDING: only time is missing
    for group in world["groups"]:
        assert committed(dst, group) == {}, f"dry run committed {group}"
    status = {(r["group"], r["src_topic"], r["src_partition"]): r["status"] for r in plan}
    t = world["topics"]
    assert status[(f"{u}-tail", t["tail"], 0)] == "PENDING"
    assert status[(f"{u}-tail", t["zero"], 0)] == "MATCHED_NEXT"
    assert status[(f"{u}-zero", t["zero"], 0)] == "MATCHED_NEXT"
    assert status[(f"{u}-dups", t["dups"], 0)] == "MATCHED"
    assert (f"{u}-shifted", t["shift"], 2) not in status
    assert f"not migrated yet: {u}-tail: 1 of 2 partitions unresolved (PENDING)" in dry.stderr
    group_status = {r["group"]: r["group_status"] for r in plan}
    assert group_status[f"{u}-tail"] == "PENDING"
    assert {group_status[g] for g in expected} == {"READY"}

    first = run_job("migrate", "--config", config, "--execute", "--quiet")
    assert first.code == 75, first.stderr
    for group, offsets in expected.items():
        assert committed(dst, group) == offsets, group
    assert committed(dst, f"{u}-tail") == {}, "a group with an unresolved partition was committed"
    run_id = _run_id(first.stdout)

    second = run_job("migrate", "--config", config, "--execute", "--quiet", "-o", "json")
    assert second.code == 75, second.stderr
    for group, offsets in expected.items():
        assert committed(dst, group) == offsets, group
    again = {r["group"]: r["group_status"] for r in json.loads(second.stdout)}
    assert {again[g] for g in expected} == {"ALREADY_MIGRATED"}

    undo_dry = run_job("migrate", "--config", config, "--rollback", run_id, "--quiet")
    assert undo_dry.code == 0, undo_dry.stderr
    assert committed(dst, f"{u}-dups") == expected[f"{u}-dups"]
    undo = run_job("migrate", "--config", config, "--rollback", run_id, "--execute", "--quiet")
    assert undo.code == 0, undo.stderr
    for group in expected:
        assert committed(dst, group) == {}, f"rollback left {group}"


def _run_id(stdout: str) -> str:
    for word in stdout.split():
        if word.startswith("migrate-"):
            return word.rstrip(";")
    raise AssertionError(f"no run id in {stdout!r}")


def test_rollback_restores_previous_destination_offsets(clusters, tmp_path, unique):
    src, dst = clusters
    topic = copied_topic(clusters, unique, "rb", 30)
    group = f"{unique}-g"
    commit_offsets(src.config, group, {(topic, 0): 20})
    commit_offsets(dst.config, group, {(topic, 0): 3})  # an older migration's leftovers
    config = write_config(tmp_path, src, dst, unique)
    result = run_job("migrate", "--config", config, "--execute", "--quiet")
    assert result.code == 0, result.stderr
    assert committed(dst, group) == {(topic, 0): 20}
    undo = run_job(
        "migrate", "--config", config, "--rollback", _run_id(result.stdout), "--execute", "--quiet"
    )
    assert undo.code == 0, undo.stderr
    assert committed(dst, group) == {(topic, 0): 3}


def test_active_groups_are_refused_and_untouched(clusters, tmp_path, unique):
    src, dst = clusters
    topic = copied_topic(clusters, unique, "act", 20)
    active_src, active_dst, idle = f"{unique}-src", f"{unique}-dst", f"{unique}-idle"
    for group in (active_src, active_dst, idle):
        commit_offsets(src.config, group, {(topic, 0): 10})
    commit_offsets(dst.config, active_dst, {(topic, 0): 2})
    config = write_config(tmp_path, src, dst, unique)
    c1 = join_group(src.config, active_src, topic)
    c2 = join_group(dst.config, active_dst, topic)
    try:
        result = run_job("migrate", "--config", config, "--execute", "--quiet")
        assert result.code == 1
        assert f"not migrated: {active_src}: source group is STABLE" in result.stderr
        assert f"not migrated: {active_dst}: destination group is STABLE" in result.stderr
        assert committed(dst, active_src) == {}
        assert committed(dst, active_dst) == {(topic, 0): 2}
        assert committed(dst, idle) == {(topic, 0): 10}

        allowed = run_job("migrate", "--config", config, "--allow-active-source", "--quiet")
        assert f"warning: source group {active_src} is STABLE" in allowed.stderr
        assert f"not migrated: {active_src}" not in allowed.stderr
    finally:
        c1.close()
        c2.close()


def test_group_without_commits_and_selection_matching_nothing(clusters, tmp_path, unique):
    src, dst = clusters
    topic, other = f"{unique}-t", f"other-{unique}"
    create_topics(src.config, {topic: 1, other: 1})
    create_topics(dst.config, {topic: 1, other: 1})
    produce(src.config, other, 0, unique_records("nc", 5))
    config = write_config(tmp_path, src, dst, unique)
    nothing = run_job("migrate", "--config", config, "--quiet")
    assert nothing.code == 1
    assert "no source group matches" in nothing.stderr

    # A selected group whose only commits are on a topic outside topics.include: nothing to
    # migrate, which is not a failure, and nothing appears on the destination.
    group = f"{unique}-g"
    commit_offsets(src.config, group, {(other, 0): 3})
    result = run_job("migrate", "--config", config, "--execute")
    assert result.code == 0, result.stderr
    assert "1 of 1 groups migrated, 0 partitions" in result.stdout
    assert committed(dst, group) == {}


def test_config_without_destination_fails_cleanly(clusters, tmp_path, unique):
    src, _ = clusters
    path = tmp_path / "bad.yaml"
    path.write_text(
        f"source:\n  bootstrap.servers: {src.bootstrap}\nledger:\n  path: {tmp_path}/l\n"
    )
    result = run_job("migrate", "--config", str(path))
    assert result.code == 2
    assert result.stderr.strip().splitlines() == [
        "error: missing required config key 'destination'"
    ]


def test_unreachable_destination_fails_cleanly(clusters, tmp_path, unique):
    src, dst = clusters
    topic = f"{unique}-t"
    create_topics(src.config, {topic: 1})
    produce(src.config, topic, 0, unique_records("un", 5))
    group = f"{unique}-g"
    commit_offsets(src.config, group, {(topic, 0): 3})
    config = write_config(tmp_path, src, dst, unique)
    result = run_job(
        "migrate",
        "--config",
        config,
        "--execute",
        "--quiet",
        "--set",
        "destination.bootstrap.servers=127.0.0.1:9",
        "--set",
        "reader.timeout_ms=2000",
    )
    assert result.code == 1
    lines = result.stderr.strip().splitlines()
    assert lines == [
        "error: cannot reach destination (127.0.0.1:9) within 2s: " + lines[0].split(": ", 2)[2]
    ]
    assert "Traceback" not in result.stderr


def test_offsets_an_open_transaction_holds_wait_for_it_to_end(clusters, tmp_path, unique):
    """An exactly-once consumer (Kafka Streams, a transactional copier) commits its offsets
    inside its transaction: until the transaction ends, which offset the group resumes from
    is not known (the one the transaction holds, or the one before it if it aborts). Ferry
    reads offsets stable: while such a transaction is open the run waits for it, and one
    still open when `admin.retry_ms` runs out fails the run in one line, nothing written.
    Once the transaction commits, the next run migrates the offset it held."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    src, dst = clusters
    topic = copied_topic(clusters, unique, "tx", 40, start=5)
    held, plain = f"{unique}-held", f"{unique}-plain"
    commit_offsets(src.config, held, {(topic, 0): 10})
    commit_offsets(src.config, plain, {(topic, 0): 20})
    member = Consumer({**src.config, "group.id": held, "log_level": 0})
    producer = Producer({**src.config, "transactional.id": f"{unique}-tx", "log_level": 0})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.send_offsets_to_transaction(
        [TopicPartition(topic, 0, 30)], member.consumer_group_metadata(), 30
    )
    config = write_config(tmp_path, src, dst, unique)
    with open(config, "a") as f:
        f.write("admin:\n  retry_ms: 3000\n")
    try:
        waited = run_job("migrate", "--config", config, "--execute", "--quiet")
        assert waited.code == 1, waited.stderr
        [line] = waited.stderr.strip().splitlines()
        assert held in line, line
        assert "a transaction committing offsets of the group is still open" in line, line
        assert committed(dst, held) == {} and committed(dst, plain) == {}
        producer.commit_transaction(30)
    finally:
        member.close()
    done = run_job("migrate", "--config", config, "--execute", "--quiet")
    assert done.code == 0, done.stderr
    assert committed(dst, held) == {(topic, 0): 25}
    assert committed(dst, plain) == {(topic, 0): 15}
