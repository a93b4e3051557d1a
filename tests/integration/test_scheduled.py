"""`migrate` and `groups copy` run again and again by a scheduler, on real local brokers:
forward only, exit codes a scheduler can act on, `--wait`, transactional sources."""

from __future__ import annotations

import json
import threading
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from ferry.testing.produce import Record, commit_offsets, create_topics, produce

from .jobrunner import group_statuses, ledger_rows, run_job
from .test_migrate import committed, replicate, unique_records, write_config

pytestmark = pytest.mark.integration


def _two_partition_world(src, dst, topic: str, n: int = 60, start: int = 10) -> None:
    """`topic` with 2 partitions on both clusters; the destination holds records[start:]."""
    create_topics(src.config, {topic: 2})
    create_topics(dst.config, {topic: 2})
    for p in range(2):
        recs = unique_records(f"{topic}-{p}", n)
        produce(src.config, topic, p, recs)
        produce(dst.config, topic, p, replicate(recs, start))


def test_rerun_leaves_moved_groups_alone_and_refuses_mixed(clusters, tmp_path, unique):
    src, dst = clusters
    topic = f"{unique}-t"
    _two_partition_world(src, dst, topic)  # destination offset = source offset - 10
    config = write_config(tmp_path, src, dst, unique)
    moved, new, mixed = f"{unique}-moved", f"{unique}-new", f"{unique}-mixed"
    commit_offsets(src.config, moved, {(topic, 0): 41, (topic, 1): 51})
    first = run_job("migrate", "--config", config, "--execute", "--quiet")
    assert first.code == 0, first.stderr
    assert committed(dst, moved) == {(topic, 0): 31, (topic, 1): 41}

    # Its consumers started on the destination, read on and stopped again; meanwhile a new
    # group and a group half ahead appear in the same selection.
    commit_offsets(dst.config, moved, {(topic, 0): 45, (topic, 1): 50})
    commit_offsets(src.config, new, {(topic, 0): 20, (topic, 1): 30})
    commit_offsets(src.config, mixed, {(topic, 0): 20, (topic, 1): 30})
    commit_offsets(dst.config, mixed, {(topic, 0): 40, (topic, 1): 5})

    again = run_job(
        "migrate",
        "--config",
        config,
        "--execute",
        "--quiet",
        "-o",
        "json",
        "--set",
        f"groups.include=['{moved}', '{new}']",
    )
    assert again.code == 0, again.stderr
    assert group_statuses(again) == {moved: "ALREADY_MIGRATED", new: "COMMITTED"}
    assert committed(dst, moved) == {(topic, 0): 45, (topic, 1): 50}, "moved group rewound"
    assert committed(dst, new) == {(topic, 0): 10, (topic, 1): 20}

    refused = run_job("migrate", "--config", config, "--execute", "--quiet", "-o", "json")
    assert refused.code == 1, refused.stderr
    assert group_statuses(refused)[mixed] == "REFUSED"
    assert f"ahead of the plan on {topic}[0] and behind on {topic}[1]" in refused.stderr
    assert committed(dst, mixed) == {(topic, 0): 40, (topic, 1): 5}

    # The ledger says what was decided and why, for the dry run of a later run too.
    dry = run_job("migrate", "--config", config, "--quiet", "-o", "json")
    assert group_statuses(dry) == {
        moved: "ALREADY_MIGRATED",
        new: "ALREADY_MIGRATED",
        mixed: "REFUSED",
    }
    decided = {
        (r["run_id"], r["phase"], r["message"])
        for r in ledger_rows(tmp_path / "ledger")
        if r["group"] == mixed
    }
    assert (
        sum(
            1
            for _, phase, message in decided
            if phase == "plan" and message.startswith("REFUSED: destination group is ahead")
        )
        == 2
    ), decided  # the executing run and the dry run both recorded it

    rewind = run_job("migrate", "--config", config, "--execute", "--quiet", "--allow-rewind")
    assert rewind.code == 0, rewind.stderr
    assert committed(dst, mixed) == {(topic, 0): 10, (topic, 1): 20}
    assert committed(dst, moved) == {(topic, 0): 31, (topic, 1): 41}


def test_groups_copy_is_forward_only(cluster, tmp_path, unique):
    topic = f"{unique}-t"
    create_topics(cluster.config, {topic: 2})
    for p in range(2):
        produce(cluster.config, topic, p, unique_records(f"c{p}", 30))
    old, ahead, mixed = f"{unique}-old", f"{unique}-ahead", f"{unique}-mixed"
    commit_offsets(cluster.config, old, {(topic, 0): 10, (topic, 1): 10})
    commit_offsets(cluster.config, ahead, {(topic, 0): 20, (topic, 1): 25})
    commit_offsets(cluster.config, mixed, {(topic, 0): 20, (topic, 1): 5})
    config = tmp_path / "groups.yaml"
    config.write_text(
        f"cluster:\n  bootstrap.servers: {cluster.bootstrap}\nledger:\n  path: {tmp_path}/ledger\n"
    )
    copy = ("groups", "copy", "--config", config, "--from", old, "--to", ahead, "--execute")
    result = run_job(*copy, "-o", "json", "--quiet")
    assert result.code == 0, result.stderr
    assert {r["status"] for r in json.loads(result.stdout)} == {"ALREADY_COPIED"}
    assert committed(cluster, ahead) == {(topic, 0): 20, (topic, 1): 25}

    result = run_job(
        "groups", "copy", "--config", config, "--from", old, "--to", mixed, "--execute", "--quiet"
    )
    assert result.code == 1
    assert f"ahead of the plan on {topic}[0] and behind on {topic}[1]" in result.stderr
    assert committed(cluster, mixed) == {(topic, 0): 20, (topic, 1): 5}

    result = run_job(
        "groups",
        "copy",
        "--config",
        config,
        "--from",
        old,
        "--to",
        mixed,
        "--execute",
        "--quiet",
        "--allow-rewind",
    )
    assert result.code == 0, result.stderr
    assert committed(cluster, mixed) == {(topic, 0): 10, (topic, 1): 10}


def test_pending_exits_75_and_wait_resolves(clusters, tmp_path, unique):
    src, dst = clusters
    topic = f"{unique}-t"
    create_topics(src.config, {topic: 1})
    create_topics(dst.config, {topic: 1})
    now = int(time.time() * 1000) - 2000
    recs = unique_records("pend", 40, base_ms=now)
    produce(src.config, topic, 0, recs)
    produce(dst.config, topic, 0, replicate(recs, 0, stop=15))  # the replica lags
    group = f"{unique}-g"
    commit_offsets(src.config, group, {(topic, 0): 30})
    config = write_config(tmp_path, src, dst, unique)

    pending = run_job("migrate", "--config", config, "--execute", "--quiet")
    assert pending.code == 75, pending.stderr
    assert f"not migrated yet: {group}" in pending.stderr
    assert committed(dst, group) == {}

    catch_up = threading.Timer(4.0, produce, (dst.config, topic, 0, replicate(recs, 15)))
    catch_up.start()
    try:
        waited = run_job("migrate", "--config", config, "--execute", "--wait", "60s")
    finally:
        catch_up.join()
    assert waited.code == 0, waited.stderr
    assert "groups PENDING; planning them again" in waited.stderr
    assert committed(dst, group) == {(topic, 0): 30}

    bad = run_job("migrate", "--config", config, "--wait", "soon")
    assert bad.code == 2
    assert bad.stderr.strip() == "error: --wait 'soon' is not a duration like 90s, 10m, 1h or PT5M"


def _transactional(
    config: dict, topic: str, batches: list[tuple[list[Record], bool]], tid: str
) -> list[list[int]]:
    """Produce each batch in its own transaction, committed or aborted, each record in a
    batch of its own; returns the offsets every batch's records got (aborted ones too)."""
    producer = Producer({**config, "transactional.id": tid, "linger.ms": 0, "log_level": 0})
    producer.init_transactions(10)
    out: list[list[int]] = []
    for records, commit in batches:
        offsets: list[int] = []
        producer.begin_transaction()
        for r in records:
            producer.produce(
                topic,
                key=r.key,
                value=r.value,
                partition=0,
                timestamp=r.timestamp_ms,
                on_delivery=lambda err, msg, got=offsets: got.append(msg.offset()),
            )
            producer.flush(10)
        if commit:
            producer.commit_transaction(10)
        else:
            producer.abort_transaction(10)
        out.append(offsets)
    producer.flush(10)
    return out


def _read_committed(config: dict, topic: str, probe_group: str) -> list:
    consumer = Consumer(
        {
            **config,
            "group.id": probe_group,
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
        }
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    seen = []
    while True:
        msg = consumer.poll(5)
        assert msg is not None, "timed out reading the transactional topic"
        if msg.error():
            break
        seen.append(msg)
    consumer.close()
    return seen


def test_transactional_source_migrates_exactly(clusters, tmp_path, unique):
    """Commit and abort markers, and aborted records, take source offsets that the replica
    never has.

    The replica holds what a read_committed consumer of the source reads (a replicator's
    view): Apache Kafka leaves the aborted records out, as it does the markers, so the
    destination offsets differ from the source's by both."""
    src, dst = clusters
    topic = f"{unique}-t"
    create_topics(src.config, {topic: 1})
    create_topics(dst.config, {topic: 1})
    recs = unique_records("tx", 30)
    batches = [
        (recs[0:5], True),
        (unique_records("aborted", 4, base_ms=recs[5].timestamp_ms), False),
        (recs[5:12], True),
        (recs[12:13], True),
        (unique_records("aborted2", 3, base_ms=recs[13].timestamp_ms), False),
        (recs[13:30], True),
    ]
    produced = _transactional(src.config, topic, batches, f"{unique}-tx")
    markers = [got[-1] + 1 for got in produced]  # each transaction's marker follows it
    aborted = [o for got, (_, ok) in zip(produced, batches, strict=True) if not ok for o in got]
    assert markers == [5, 10, 18, 20, 24, 42] and len(aborted) == 7, produced
    seen = _read_committed(src.config, topic, f"{unique}-probe")
    offsets = [m.offset() for m in seen]
    assert offsets == sorted(set(range(markers[-1])) - set(markers) - set(aborted)), offsets
    produce(
        dst.config,
        topic,
        0,
        [Record(m.key(), m.value(), m.timestamp()[1]) for m in seen],
    )
    groups = {
        f"{unique}-after-marker": markers[1] + 1,  # right after an abort marker
        f"{unique}-on-marker": markers[2],  # the committed offset is a commit marker
        f"{unique}-in-aborted": aborted[1],  # inside an aborted transaction
        f"{unique}-mid": offsets[9] + 1,
        f"{unique}-end": offsets[-1] + 2,  # past the last commit marker: caught up
    }
    for group, offset in groups.items():
        commit_offsets(src.config, group, {(topic, 0): offset})
    config = write_config(tmp_path, src, dst, unique)
    result = run_job("migrate", "--config", config, "--execute", "--quiet")
    assert result.code == 0, result.stderr
    for group, offset in groups.items():
        # A consumer resumes at the first record at or after C: the replica's index of it.
        expected = sum(1 for o in offsets if o < offset)
        assert committed(dst, group) == {(topic, 0): expected}, (group, offset, offsets)
