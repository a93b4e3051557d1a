"""`migrate --positions FILE` on two real local brokers: a CSV of source positions in, each
line's destination offset out, through `migrate`'s engine.

The destination copy is shifted differently per partition (records the source deleted before
the copy, records the destination held before it), the topic renamed; the expected offset of
each line is read from the destination by content: the copy of the source record at the
line's offset (the destination's log end when the line sits at the source's end).
"""

from __future__ import annotations

import csv
import io
import json
import time

import pytest

from ferry.testing.produce import Record, create_topics, delete_records, produce
from ferry.testing.replicate import read_all

from .jobrunner import run_job, write_migrate_config

pytestmark = pytest.mark.integration

BASE = int(time.time() * 1000) - 600_000
N = 40


def records(tag: str, n: int) -> list[Record]:
    # Keys repeat and values too ("same" every 7th): the neighbours tell them apart.
    return [
        Record(
            f"k{i % 3}".encode(), (b"same" if i % 7 == 0 else f"{tag}-{i}".encode()), BASE + i * 5
        )
        for i in range(n)
    ]


@pytest.fixture(scope="module")
def world(clusters, tmp_path_factory):
    src, dst = clusters
    u = f"pf{int(time.time() * 1000) % 10**8}"
    topic, copy = f"{u}-events", f"copy.{u}-events"
    create_topics(src.config, {topic: 3})
    create_topics(dst.config, {copy: 3})
    data = {p: records(f"p{p}", N) for p in range(3)}
    for p in range(3):
        produce(src.config, topic, p, data[p])
    # p0: 9 records gone from the source before the copy (destination offsets 9 lower);
    # p1: the destination held 13 records of its own first (13 higher); p2: the same offsets.
    delete_records(src.config, {(topic, 0): 9})
    produce(dst.config, copy, 0, data[0][9:])
    produce(
        dst.config, copy, 1, [Record(b"x", f"old-{i}".encode(), BASE - 1000) for i in range(13)]
    )
    produce(dst.config, copy, 1, data[1])
    produce(dst.config, copy, 2, data[2])
    tmp = tmp_path_factory.mktemp("positions-file")
    config = write_migrate_config(
        tmp, src, dst, u, topics={"rename": [{"match": f"^{u}-(.*)$", "replace": f"copy.{u}-\\1"}]}
    )
    return {
        "u": u,
        "topic": topic,
        "copy": copy,
        "src": src,
        "dst": dst,
        "config": config,
        "tmp": tmp,
    }


def expected_offset(world, partition: int, offset: int) -> int:
    """The destination offset of the copy of the source record at `offset` (by content)."""
    source = {
        r.offset: r
        for r in read_all(world["src"].config, world["topic"])
        if r.partition == partition
    }
    copies = [r for r in read_all(world["dst"].config, world["copy"]) if r.partition == partition]
    if offset not in source:  # at the source's end: the destination's end
        return copies[-1].offset + 1
    # The copy is the record whose content and neighbours match; contents repeat, so match by
    # position among the copies of the source's records.
    wanted = source[offset].content
    ordered = sorted(source)
    index = ordered.index(offset)
    copied = [r for r in copies if not r.value.startswith(b"old-")]
    assert copied[index].content == wanted
    return copied[index].offset


def test_each_line_gets_its_destination_offset(world, tmp_path):
    lines = [(0, 9), (0, 25), (0, 28), (1, 0), (1, 14), (1, N), (2, 21)]
    path = tmp_path / "positions.csv"
    path.write_text(
        "topic,partition,offset\n" + "".join(f"{world['topic']},{p},{o}\n" for p, o in lines)
    )
    result = run_job("migrate", "--config", world["config"], "--positions", str(path), "-o", "csv")
    assert result.code == 0, result.stderr
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    assert [(int(r["partition"]), int(r["offset"])) for r in rows] == lines
    for row, (p, o) in zip(rows, lines, strict=True):
        assert row["dst_topic"] == world["copy"] and int(row["dst_partition"]) == p
        assert int(row["destination_offset"]) == expected_offset(world, p, o), row
    # The shifts are real: the offsets are not the source's.
    assert {int(r["destination_offset"]) - int(r["offset"]) for r in rows} == {-9, 13, 0}
    assert "7 of 7 positions translated; nothing written" in result.stderr


def test_a_partition_the_destination_lacks_is_unresolved_exit_1(world, tmp_path):
    u = world["u"]
    wide = f"{u}-wide"
    create_topics(world["src"].config, {wide: 2})
    create_topics(world["dst"].config, {f"copy.{wide}": 1})
    produce(world["src"].config, wide, 1, records("w", 5))
    path = tmp_path / "p.csv"
    path.write_text(f"{world['topic']},2,3\n{wide},1,2\n")
    result = run_job("migrate", "--config", world["config"], "--positions", str(path), "-o", "json")
    assert result.code == 1, result.stderr
    rows = json.loads(result.stdout)
    assert [r["status"] for r in rows] == ["MATCHED", "NO_DESTINATION"]
    assert "partition by partition" in rows[1]["note"]
    assert f"not translated: {path} line 2" in result.stderr


def test_a_position_the_replica_has_not_reached_is_pending_exit_75(world, tmp_path):
    topic = f"{world['u']}-late"
    create_topics(world["src"].config, {topic: 1})
    create_topics(world["dst"].config, {f"copy.{topic}": 1})
    late = records("late", 30)
    produce(world["src"].config, topic, 0, late)
    produce(world["dst"].config, f"copy.{topic}", 0, late[:10])  # the replica is behind
    path = tmp_path / "late.csv"
    path.write_text(f"{topic},0,5\n{topic},0,25\n")
    result = run_job("migrate", "--config", world["config"], "--positions", str(path), "-o", "json")
    assert result.code == 75, result.stderr
    assert [r["status"] for r in json.loads(result.stdout)] == ["MATCHED", "PENDING"]


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("{topic},x,3\n", "line 1: partition 'x' is not a number"),
        ("{topic},0\n", "line 1: expected topic,partition,offset"),
        ("{topic},0,-4\n", "line 1: offset '-4' is not an offset >= 0"),
        ("nope-topic,0,1\n", "topic nope-topic is not on the source cluster"),
        ("{topic},7,1\n", "[7] is not on the source cluster"),
        ("# nothing\n", "no positions in it"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(world, tmp_path, text, says):
    path = tmp_path / "bad.csv"
    path.write_text(text.format(topic=world["topic"]))
    result = run_job("migrate", "--config", world["config"], "--positions", str(path))
    assert result.code == 2, result.stderr
    lines = [ln for ln in result.stderr.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and says in lines[0], result.stderr
    assert result.stdout == ""


@pytest.mark.parametrize("option", [["--wait", "1m"], ["--allow-rewind"], ["--execute"]])
def test_group_options_are_usage_errors_with_positions(world, tmp_path, option):
    path = tmp_path / "p.csv"
    path.write_text(f"{world['topic']},0,12\n")
    result = run_job("migrate", "--config", world["config"], "--positions", str(path), *option)
    assert result.code == 2, result.stderr
    assert result.stderr.startswith("error:") and result.stdout == ""
