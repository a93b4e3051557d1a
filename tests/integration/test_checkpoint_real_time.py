"""`migrate --checkpoint` on a real-time query's checkpoint (`Trigger.RealTime`, PySpark 4.2's
`trigger(realTime=...)` through Spark's own Kafka connector, `ferry.testing.streaming`).

One world: a real-time query (5 s batches, output mode update, a Kafka sink: real-time mode
refuses `foreachBatch`) reads the source's topic and is stopped; more records arrive and are
copied, timestamps kept, to the destination's `source.` topic, whose partition 1 held 13
records of its own first (every destination offset differs). A copy of the checkpoint is kept
for the second test.

- Recognised and refused without the operator's word (`--query-stopped`): its files are
  written at each batch's end, so their age cannot show the query stopped. With it,
  translated, and the same query restarted on the destination leaves every source record in
  its sinks (the source's and the destination's) exactly once.
- Its newest batch left uncommitted (its `commits/N` removed: what a driver killed between
  Spark's two writes leaves), translated, and the query restarted on the destination with a
  long batch: Spark deletes the translated `offsets/N` on restart. Ferry, run again while the
  batch runs, must not write it back (the query would fail at the batch's end: the file is
  there already), and says ALREADY_MIGRATED; the query ends well, every record is in the
  sinks once (batch N's twice: Spark runs an uncommitted real-time batch again, its output
  written already), and the next run, after the query wrote batch N anew, says the same.
"""

from __future__ import annotations

import json
import shutil
import time
from collections import Counter
from pathlib import Path

import pytest

from ferry.testing.produce import Record, create_topics, produce
from ferry.testing.replicate import read_all
from ferry.testing.streaming import (
    Query,
    run_queries,
    start_running,
    stop_running,
    topic_sink_values,
)

from .jobrunner import run_job, write_migrate_config

pytestmark = [pytest.mark.integration, pytest.mark.slow]

FIRST, SECOND = 40, 25  # records per partition before the query stops, and after
OLD = 13  # records the destination's partition 1 held before the copy


def records(topic: str, partition: int, start: int, n: int) -> list[Record]:
    base = int(time.time() * 1000) - 600_000
    return [
        Record(f"k{i % 4}".encode(), f"{topic}-{partition}-{i}".encode(), base + i)
        for i in range(start, start + n)
    ]


@pytest.fixture(scope="module")
def world(clusters, tmp_path_factory):
    src, dst = clusters
    u = f"rt{int(time.time() * 1000) % 10**8}"
    topic, sink = f"{u}-ev", f"{u}-out"
    create_topics(src.config, {topic: 2, sink: 1})
    create_topics(dst.config, {f"source.{topic}": 2, sink: 1, f"{sink}2": 1})
    produce(dst.config, f"source.{topic}", 1, [Record(b"x", b"old", None)] * OLD)
    for p in range(2):
        produce(src.config, topic, p, records(topic, p, 0, FIRST))
    tmp = tmp_path_factory.mktemp("real-time")
    w = {"u": u, "src": src, "dst": dst, "topic": topic, "sink": sink, "tmp": tmp}
    outcome = run_queries(tmp / "runs", [query(w, "src", stop_after_batch=1)])
    assert outcome == {"q-src-cp": None}, outcome
    for p in range(2):
        produce(src.config, topic, p, records(topic, p, FIRST, SECOND))
    copied: dict[int, list[Record]] = {0: [], 1: []}
    for r in read_all(src.config, topic):
        copied[r.partition].append(Record(r.key, r.value, r.timestamp_ms, r.headers))
    for p, rows in copied.items():
        produce(dst.config, f"source.{topic}", p, rows)
    shutil.copytree(tmp / "cp", tmp / "untouched")
    w["config"] = write_migrate_config(
        tmp, src, dst, u, topics={"rename": [{"match": "^(.*)$", "replace": "source.\\1"}]}
    )
    w["source_records"] = Counter(
        (r.key.decode(), r.value.decode()) for r in read_all(src.config, topic)
    )
    return w


def query(w, where: str, checkpoint: str = "cp", every_s: float = 5, **kwargs) -> Query:  # noqa: ANN001, ANN003
    """The real-time query on the source (`where="src"`) or restarted on the destination
    (the checkpoint `checkpoint`, and then the sink topic `SINK2` for the copy's)."""
    on_dst = where == "dst"
    return Query(
        name=f"q-{where}-{checkpoint}",
        bootstrap=(w["dst"] if on_dst else w["src"]).bootstrap,
        topic=f"source.{w['topic']}" if on_dst else w["topic"],
        checkpoint=str(w["tmp"] / checkpoint),
        sink="",
        sink_topic=w["sink"] if checkpoint == "cp" else f"{w['sink']}2",
        trigger=f"realtime:{every_s}",
        **kwargs,
    )


def wait_for(condition, timeout_s: float = 600) -> None:  # noqa: ANN001
    """Until `condition()` holds (a loaded machine runs real-time batches late)."""
    deadline = time.monotonic() + timeout_s
    while not condition() and time.monotonic() < deadline:
        time.sleep(1)


def migrate(w, path: Path, *extra: str):  # noqa: ANN001, ANN201
    return run_job(
        "migrate", "--config", w["config"], "--checkpoint", str(path), "--idle", "0s", *extra
    )


def offsets_files(path: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in (path / "offsets").iterdir() if p.name.isdigit()}


def batch_records(w, batch: int) -> Counter:  # noqa: ANN001
    """The source's records of `batch` in the checkpoint's original (untranslated) log."""
    ranges = {}
    for b in (batch - 1, batch):
        text = (w["tmp"] / "untouched" / "offsets" / str(b)).read_text().split("\n")[2]
        ranges[b] = json.loads(text)[w["topic"]]
    return Counter(
        (r.key.decode(), r.value.decode())
        for r in read_all(w["src"].config, w["topic"])
        if ranges[batch - 1][str(r.partition)] <= r.offset < ranges[batch][str(r.partition)]
    )


def sinks(w, restarted: str = "") -> Counter:  # noqa: ANN001
    """Every record both runs of the query wrote: the source's sink and the destination's
    (`SINK` + `restarted`)."""
    return topic_sink_values(w["src"].config, w["sink"]) + topic_sink_values(
        w["dst"].config, w["sink"] + restarted
    )


def test_recognised_refused_without_the_word_then_translated_and_restarted_exactly(world):
    path = world["tmp"] / "cp"
    before = offsets_files(path)
    assert len(before) >= 2, before  # stopped once batch 1 was committed
    refused = migrate(world, path, "--execute")
    assert refused.code == 1, refused.stdout + refused.stderr
    line = refused.stderr.strip().splitlines()[-1]
    assert "real-time query" in line and "--query-stopped" in line, refused.stderr
    assert offsets_files(path) == before
    done = migrate(world, path, "--execute", "--query-stopped")
    assert done.code == 0 and "rewritten" in done.stdout, done.stderr
    running = start_running(world["tmp"] / "runs", [query(world, "dst")])
    try:
        expected = sum(world["source_records"].values())
        wait_for(lambda: sum(sinks(world).values()) >= expected or running.poll() is not None)
        assert running.poll() is None, "the restarted query failed"
    finally:
        stop_running(running)
    assert sinks(world) == world["source_records"]


def test_an_offsets_file_deleted_by_a_real_time_restart_is_never_written_back(world):
    path = world["tmp"] / "purged"
    shutil.copytree(world["tmp"] / "untouched", path)
    newest = max(int(n) for n in offsets_files(path))
    for name in (str(newest), f".{newest}.crc"):
        (path / "commits" / name).unlink(missing_ok=True)
    done = migrate(world, path, "--execute", "--query-stopped")
    assert done.code == 0 and "rewritten" in done.stdout, done.stderr
    translated = offsets_files(path)[str(newest)]
    # Every record once, but batch N's twice: it was written to the sink before the driver
    # died, and runs again (Spark's own at-least-once for an uncommitted real-time batch).
    expected = world["source_records"] + batch_records(world, newest)
    # The query restarted on the destination with 30 s batches, in the background.
    running = start_running(world["tmp"] / "runs", [query(world, "dst", "purged", every_s=30)])
    try:
        wait_for(lambda: offsets_files(path).get(str(newest)) != translated)
        assert str(newest) not in offsets_files(path), "Spark did not delete offsets/N"
        # Ferry again, as a scheduler runs it, while the restarted query's batch runs.
        again = migrate(world, path, "--execute", "--query-stopped")
        # never written back (gone, or the query's own if its batch ended meanwhile)
        assert offsets_files(path).get(str(newest)) != translated, "offsets/N written back"
        assert again.code == 0 and "ALREADY_MIGRATED" in again.stdout, again.stderr
        wait_for(
            lambda: (
                (path / "commits" / str(newest)).exists()
                and sum(sinks(world, "2").values()) >= sum(expected.values())
                or running.poll() is not None
            )
        )
        assert running.poll() is None, "the restarted query failed"
    finally:
        stop_running(running)
    assert offsets_files(path)[str(newest)] != translated  # the query wrote its own
    assert sinks(world, "2") == expected
    # and the next scheduled run: the batch the query wrote anew goes on from the translation
    later = migrate(world, path, "--execute", "--query-stopped")
    assert later.code == 0 and "ALREADY_MIGRATED" in later.stdout, later.stderr
