"""`migrate --checkpoint` judged by real Structured Streaming queries (Spark's own Kafka
connector, `ferry.testing.streaming`) and real MirrorMaker 2.

The queries read the source and stop mid-topic; more records arrive; MM2 copies every topic
under its default policy (`source.` prefix) with offsets that differ: records the source
deleted before the copy (destination offsets lower), records the destination held before it
(higher). Ferry translates each checkpoint; the same queries restarted against the
destination (new bootstrap, renamed topic) must leave every source record in their sinks
exactly once, and a counting query's totals must equal the source's. Without the translation
(the topic renamed by hand in `offsets/*`, what a careful engineer would try, with
`failOnDataLoss=false` so the query does not stop) the same restart loses and repeats records:
the outcome these tests guard against.

Cases: a stateless query; a stateful aggregation; a query stopped with its newest batch
uncommitted (a batch failed after Spark wrote `offsets/N`); identical records sharing a
millisecond at the query's position; a query still running (refused); translating twice
(ALREADY_MIGRATED); rollback. Bad input (not a checkpoint, damaged, unknown version, no Kafka
source) needs no query: those files are written here as Spark writes them.
"""

from __future__ import annotations

import json
import shutil
import time
from collections import Counter
from pathlib import Path

import pytest

from ferry.testing.mm2 import mirror_maker, wait_replicated
from ferry.testing.produce import Record, create_topics, delete_records, produce
from ferry.testing.replicate import read_all
from ferry.testing.streaming import (
    Query,
    renamed_by_hand,
    run_queries,
    sink_totals,
    sink_values,
    start_running,
    stop_running,
)

from .jobrunner import run_job, write_migrate_config

pytestmark = pytest.mark.integration

BASE = int(time.time() * 1000) - 1_200_000
PARTS = {"events": 3, "counts": 2, "crash": 2, "same": 1}
FIRST, SECOND = 60, 45  # records per partition before the queries stop, and after
SAME_MS = BASE + 777_000


def records(topic: str, partition: int, start: int, n: int) -> list[Record]:
    out = []
    for i in range(start, start + n):
        if topic.endswith("same") and i in (20, 21, 22):
            # Three identical records in one millisecond; the queries stop after the second.
            out.append(Record(b"k", b"same", SAME_MS))
        else:
            out.append(
                Record(f"k{i % 4}".encode(), f"{topic}-{partition}-{i}".encode(), BASE + i * 7)
            )
    return out


def queries(world, where: str, folder: str, **options: str) -> list[Query]:
    """The four queries on the source (`where="source"`) or the destination."""
    bootstrap = world[where].bootstrap
    out = []
    for name in PARTS:
        topic = world["topics"][name] if where == "src" else f"source.{world['topics'][name]}"
        out.append(
            Query(
                name=f"{name}-{where}-{folder}",
                bootstrap=bootstrap,
                topic=topic,
                checkpoint=str(world["tmp"] / folder / name / "checkpoint"),
                sink=str(world["tmp"] / folder / name / "sink"),
                kind="count" if name == "counts" else "stateless",
                max_offsets_per_trigger=50,
                fail_at_batch=2 if name == "crash" and where == "src" else None,
                options=dict(options),
            )
        )
    return out


@pytest.fixture(scope="module")
def world(clusters, tmp_path_factory):
    src, dst = clusters
    u = f"cp{int(time.time() * 1000) % 10**8}"
    topics = {name: f"{u}-{name}" for name in PARTS}
    create_topics(src.config, {topics[n]: p for n, p in PARTS.items()})
    # The destination held records of its own on events[1] before MM2 copied into it.
    create_topics(dst.config, {f"source.{topics['events']}": 3})
    produce(dst.config, f"source.{topics['events']}", 1,
            [Record(b"x", f"old-{i}".encode(), BASE - 5000) for i in range(13)])  # fmt: skip
    for name, parts in PARTS.items():
        for p in range(parts):
            n = 22 if name == "same" else FIRST
            produce(src.config, topics[name], p, records(topics[name], p, 0, n))
    tmp = tmp_path_factory.mktemp("checkpoint")
    world = {"u": u, "src": src, "dst": dst, "topics": topics, "tmp": tmp}
    outcome = run_queries(tmp / "runs", queries(world, "src", "q"))
    assert outcome["crash-src-q"] and "fails on purpose" in outcome["crash-src-q"], outcome
    assert [v for k, v in outcome.items() if k != "crash-src-q"] == [None] * 3, outcome
    # The queries stopped; the topics move on.
    for name, parts in PARTS.items():
        for p in range(parts):
            start = 22 if name == "same" else FIRST
            n = 40 - 22 if name == "same" else SECOND
            produce(src.config, topics[name], p, records(topics[name], p, start, n))
    # Retention took the first records of events[0] and same[0] before MM2 started.
    delete_records(src.config, {(topics["events"], 0): 9, (topics["same"], 0): 5})
    with mirror_maker(src, dst, f"{u}-.*", f"{u}-.*", log_dir=tmp) as mm:
        wait_replicated(mm, list(topics.values()),
                        records={(topics["events"], 1): 13 + FIRST + SECOND})  # fmt: skip
    world["source_records"] = {
        name: Counter(
            (r.key.decode(), r.value.decode()) for r in read_all(src.config, topics[name])
        )  # fmt: skip
        for name in PARTS
    }
    # What the queries read before the deletes is in their sinks; the source lost it since.
    for name in ("events", "same"):
        lost = records(topics[name], 0, 0, 9 if name == "events" else 5)
        world["source_records"][name].update((r.key.decode(), r.value.decode()) for r in lost)
    # A copy of every checkpoint and sink as the queries left them, for the runs below that
    # must start from there.
    shutil.copytree(tmp / "q", tmp / "untouched")
    world["config"] = write_migrate_config(
        tmp, src, dst, u, topics={"rename": [{"match": "^(.*)$", "replace": "source.\\1"}]}
    )
    return world


def checkpoint(world, name: str, folder: str = "q") -> Path:
    return world["tmp"] / folder / name / "checkpoint"


def offsets_files(path: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in (path / "offsets").iterdir() if p.name.isdigit()}


def migrate(world, path: Path, *extra: str):  # noqa: ANN201
    return run_job("migrate", "--config", world["config"], "--checkpoint", str(path),
                   "--idle", "0s", *extra)  # fmt: skip


@pytest.mark.slow
def test_the_dry_run_plans_every_kafka_line_and_writes_nothing(world):
    path = checkpoint(world, "crash")
    before = offsets_files(path)
    result = migrate(world, path, "-o", "json")
    assert result.code == 0, result.stderr
    rows = json.loads(result.stdout)
    # The crash query's newest batch (2) is not committed: batches 1 and 2 are translated.
    assert sorted({r["group"] for r in rows}) == ["offsets/1 source 0", "offsets/2 source 0"]
    assert {r["group_status"] for r in rows} == {"READY"}
    assert {r["dst_topic"] for r in rows} == {f"source.{world['topics']['crash']}"}
    assert f"subscribe=source.{world['topics']['crash']}" in result.stderr
    assert offsets_files(path) == before


@pytest.mark.slow
def test_translated_queries_restart_on_the_destination_exactly_once(world, spark):
    for name in PARTS:
        result = migrate(world, checkpoint(world, name), "--execute", "-o", "json")
        assert result.code == 0, f"{name}: {result.stderr}"
        assert {r["group_status"] for r in json.loads(result.stdout)} == {"COMMITTED"}
    # Translating again changes nothing.
    again = migrate(world, checkpoint(world, "events"), "--execute")
    assert again.code == 0 and "ALREADY_MIGRATED" in again.stdout, again.stderr
    outcome = run_queries(world["tmp"] / "runs", queries(world, "dst", "q"))
    assert set(outcome.values()) == {None}, outcome
    for name in ("events", "crash", "same"):
        seen = sink_values(spark, str(world["tmp"] / "q" / name / "sink"))
        assert seen == world["source_records"][name], name
    totals = sink_totals(spark, str(world["tmp"] / "q" / "counts" / "sink"))
    expected = Counter(
        k for (k, _v), n in world["source_records"]["counts"].items() for _ in range(n)
    )
    assert totals == dict(expected)


@pytest.mark.slow
def test_without_the_translation_the_restart_loses_and_repeats_records(world, spark):
    """The oracle's other side: the same restart on the untranslated checkpoint, topics
    renamed by hand and `failOnDataLoss=false`, is wrong (so the test above can fail)."""
    folder = world["tmp"] / "by-hand"
    shutil.copytree(world["tmp"] / "untouched", folder)
    for name in PARTS:
        topic = world["topics"][name]
        renamed_by_hand(folder / name / "checkpoint", {topic: f"source.{topic}"})
    outcome = run_queries(world["tmp"] / "runs",
                          queries(world, "dst", "by-hand", failOnDataLoss="false"))  # fmt: skip
    assert outcome["events-dst-by-hand"] is None, outcome
    seen = sink_values(spark, str(folder / "events" / "sink"))
    expected = world["source_records"]["events"]
    repeated = sum((seen - expected).values())
    missing = sum((expected - seen).values())
    # The shifts: 9 records the query skips on events[0], 13 it reads twice on events[1].
    assert (missing, repeated) != (0, 0)
    assert missing >= 9 and repeated >= 13, (missing, repeated)


@pytest.mark.slow
def test_rollback_puts_the_originals_back(world):
    path = checkpoint(world, "events", "rollback")
    shutil.copytree(world["tmp"] / "untouched" / "events", path.parent)
    original = offsets_files(path)
    result = migrate(world, path, "--execute")
    assert result.code == 0, result.stderr
    assert offsets_files(path) != original
    run_id = next(w for w in result.stdout.split() if w.startswith("migrate-checkpoint-")).rstrip(
        ";"
    )
    dry = migrate(world, path, "--rollback", run_id)
    assert dry.code == 0 and "WOULD_RESTORE" in dry.stdout, dry.stderr
    assert offsets_files(path) != original
    done = migrate(world, path, "--rollback", run_id, "--execute")
    assert done.code == 0 and "RESTORED" in done.stdout, done.stderr
    assert offsets_files(path) == original
    # Without --checkpoint a checkpoint run is never handed to the groups' rollback.
    alone = run_job("migrate", "--config", world["config"], "--rollback", run_id)
    assert alone.code == 2 and "give it with --checkpoint PATH" in alone.stderr


@pytest.mark.slow
def test_a_running_query_is_refused(clusters, tmp_path):
    src, dst = clusters
    u = f"run{int(time.time() * 1000) % 10**8}"
    create_topics(src.config, {f"{u}-events": 1})
    produce(src.config, f"{u}-events", 0, records(f"{u}-events", 0, 0, 30))
    config = write_migrate_config(tmp_path, src, dst, u)
    query = Query(name="running", bootstrap=src.bootstrap, topic=f"{u}-events",
                  checkpoint=str(tmp_path / "checkpoint"), sink=str(tmp_path / "sink"))  # fmt: skip
    process = start_running(tmp_path / "runs", [query], every_s=1)
    try:
        commits = Path(query.checkpoint) / "commits"
        deadline = time.monotonic() + 180
        while not (commits / "0").exists() and time.monotonic() < deadline:
            assert process.poll() is None, "the running query stopped"
            time.sleep(1)
        assert (commits / "0").exists(), "the running query committed no batch"
        result = run_job("migrate", "--config", config, "--checkpoint", query.checkpoint,
                         "--execute")  # fmt: skip
        assert result.code == 1, result.stderr
        assert "its query may still be running" in result.stderr
        assert not (Path(query.checkpoint) / "ferry").exists()
    finally:
        stop_running(process)


# ------------------------------------------------------------------ bad input, no query


def fake_checkpoint(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


META = '{"batchWatermarkMs":0,"batchTimestampMs":1764130000000,"conf":{}}'


@pytest.mark.parametrize(
    ("files", "says"),
    [
        ({"metadata": "{}"}, "not a Structured Streaming checkpoint"),
        ({"offsets/0": f'v1\n{META}\n{{"t":{{"0":5}}}}'}, "batch 0 is not committed"),
        ({"offsets/3": f'v1\n{META}\n{{"t":{{"0":5', "commits/3": "v1\n{}"}, "damaged"),
        ({"offsets/3": f"v9\n{META}\n-", "commits/3": "v1\n{}"}, "offsets format 'v9'"),
        ({"offsets/3": f'v1\n{META}\n{{"logOffset":2}}', "commits/3": "v1\n{}"},
         "no Kafka source"),
    ],
)  # fmt: skip
def test_bad_checkpoints_are_one_line_exit_2(clusters, tmp_path, files, says):
    src, dst = clusters
    config = write_migrate_config(tmp_path, src, dst, "nothing")
    path = fake_checkpoint(tmp_path / "cp", files)
    result = run_job("migrate", "--config", config, "--checkpoint", str(path), "--idle", "0s",
                     "--execute")  # fmt: skip
    assert result.code == 2, result.stderr
    errors = [ln for ln in result.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and says in errors[0], result.stderr
    assert not (path / "ferry").exists()
