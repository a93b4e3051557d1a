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

from .jobrunner import ledger_rows, run_job, write_migrate_config

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
    produce(
        dst.config,
        f"source.{topics['events']}",
        1,
        [Record(b"x", f"old-{i}".encode(), BASE - 5000) for i in range(13)],
    )
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
        wait_replicated(
            mm, list(topics.values()), records={(topics["events"], 1): 13 + FIRST + SECOND}
        )
    world["source_records"] = {
        name: Counter(
            (r.key.decode(), r.value.decode()) for r in read_all(src.config, topics[name])
        )
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
    return run_job(
        "migrate", "--config", world["config"], "--checkpoint", str(path), "--idle", "0s", *extra
    )


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
def test_translated_queries_restart_on_the_destination_exactly_once(world):
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
        seen = sink_values(str(world["tmp"] / "q" / name / "sink"))
        assert seen == world["source_records"][name], name
    totals = sink_totals(str(world["tmp"] / "q" / "counts" / "sink"))
    expected = Counter(
        k for (k, _v), n in world["source_records"]["counts"].items() for _ in range(n)
    )
    assert totals == dict(expected)


@pytest.mark.slow
def test_without_the_translation_the_restart_loses_and_repeats_records(world):
    """The oracle's other side: the same restart on the untranslated checkpoint, topics
    renamed by hand and `failOnDataLoss=false`, is wrong (so the test above can fail)."""
    folder = world["tmp"] / "by-hand"
    shutil.copytree(world["tmp"] / "untouched", folder)
    for name in PARTS:
        topic = world["topics"][name]
        renamed_by_hand(folder / name / "checkpoint", {topic: f"source.{topic}"})
    outcome = run_queries(
        world["tmp"] / "runs", queries(world, "dst", "by-hand", failOnDataLoss="false")
    )
    assert outcome["events-dst-by-hand"] is None, outcome
    seen = sink_values(str(folder / "events" / "sink"))
    expected = world["source_records"]["events"]
    repeated = sum((seen - expected).values())
    missing = sum((expected - seen).values())
    # The shifts: 9 records the query skips on events[0], 13 it reads twice on events[1].
    assert (missing, repeated) != (0, 0)
    assert missing >= 9 and repeated >= 13, (missing, repeated)


@pytest.mark.slow
def test_a_checkpoint_a_plain_restart_touched_is_refused(world):
    """The events query restarted on the destination on its checkpoint exactly as the source
    left it (default failOnDataLoss), in an application of its own (a copy of a checkpoint
    shares its query id: Spark stops the other run of the same id)."""
    as_is = world["tmp"] / "as-is"
    shutil.copytree(world["tmp"] / "untouched" / "events", as_is)
    plain = Query(
        name="events-as-is",
        bootstrap=world["dst"].bootstrap,
        topic=f"source.{world['topics']['events']}",
        checkpoint=str(as_is / "checkpoint"),
        sink=str(as_is / "sink"),
    )
    outcome = run_queries(world["tmp"] / "runs", [plain])
    # It stops (the source's partitions are gone from what it reads), having written a batch
    # that names the destination's topic: Ferry refuses to translate that.
    assert "have been deleted" in (outcome["events-as-is"] or ""), outcome
    refused = migrate(world, as_is / "checkpoint", "--execute")
    assert refused.code == 1, refused.stderr
    assert f"names destination topic(s) source.{world['topics']['events']}" in refused.stderr
    assert not (as_is / "checkpoint" / "ferry").exists()


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
    # Rolled back, the checkpoint is the source's again: a new run plans it afresh.
    again = migrate(world, path)
    assert again.code == 0 and "resolved (dry run" in again.stdout, again.stdout + again.stderr
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
    query = Query(
        name="running",
        bootstrap=src.bootstrap,
        topic=f"{u}-events",
        checkpoint=str(tmp_path / "checkpoint"),
        sink=str(tmp_path / "sink"),
    )
    process = start_running(tmp_path / "runs", [query], every_s=1)
    try:
        commits = Path(query.checkpoint) / "commits"
        deadline = time.monotonic() + 180
        while not (commits / "0").exists() and time.monotonic() < deadline:
            assert process.poll() is None, "the running query stopped"
            time.sleep(1)
        assert (commits / "0").exists(), "the running query committed no batch"
        result = run_job(
            "migrate", "--config", config, "--checkpoint", query.checkpoint, "--execute"
        )
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
        ({"offsets/3": f'v1\n{META}\n{{"logOffset":2}}', "commits/3": "v1\n{}"}, "no Kafka source"),
    ],
)
def test_bad_checkpoints_are_one_line_exit_2(clusters, tmp_path, files, says):
    src, dst = clusters
    config = write_migrate_config(tmp_path, src, dst, "nothing")
    path = fake_checkpoint(tmp_path / "cp", files)
    result = run_job(
        "migrate", "--config", config, "--checkpoint", str(path), "--idle", "0s", "--execute"
    )
    assert result.code == 2, result.stderr
    errors = [ln for ln in result.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and says in errors[0], result.stderr
    assert not (path / "ferry").exists()


# ------------------------------------------------ the rewrite, on files written as Spark does


@pytest.fixture
def copied_topic(clusters, tmp_path):
    """A topic on the source and its copy (`copy.` prefix) on the destination, 7 offsets
    higher on partition 0 (records the destination held before), and a config for both."""
    src, dst = clusters
    u = f"rw{int(time.time() * 1000) % 10**8}"
    topic = f"{u}-events"
    create_topics(src.config, {topic: 2})
    create_topics(dst.config, {f"copy.{topic}": 2})
    produce(dst.config, f"copy.{topic}", 0, [Record(b"x", b"old", BASE - 9000)] * 7)
    for p in range(2):
        produce(src.config, topic, p, records(topic, p, 0, 30))
        produce(dst.config, f"copy.{topic}", p, records(topic, p, 0, 30))
    rename = [{"match": "^(.*)$", "replace": "copy.\\1"}]
    config = write_migrate_config(tmp_path, src, dst, u, topics={"rename": rename})
    return topic, config


def spark_checkpoint(root: Path, topic: str) -> Path:
    """Batches 4 (committed) and 5 (not): a Kafka source between a rate source with no offset
    yet and a file source, as Spark writes them."""
    for batch, (o0, o1) in ((4, (12, 20)), (5, (17, 26))):
        line = f'{{"{topic}":{{"1":{o1},"0":{o0}}}}}'
        fake_checkpoint(
            root, {f"offsets/{batch}": f'v1\n{META}\n-\n{line}\n{{"logOffset":{batch}}}'}
        )
    fake_checkpoint(root, {"commits/4": 'v1\n{"nextBatchWatermarkMs":0}', "metadata": '{"id":"x"}'})
    return root


def test_the_rewrite_changes_the_kafka_line_only(copied_topic, tmp_path):
    topic, config = copied_topic
    path = spark_checkpoint(tmp_path / "cp", topic)
    before = offsets_files(path)
    result = run_job(
        "migrate",
        "--config",
        config,
        "--checkpoint",
        str(path),
        "--idle",
        "0s",
        "--execute",
        "-o",
        "json",
    )
    assert result.code == 0, result.stderr
    after = offsets_files(path)
    for batch, (o0, o1) in (("4", (12, 20)), ("5", (17, 26))):
        old, new = before[batch].split(b"\n"), after[batch].split(b"\n")
        assert new[:3] == old[:3] and new[4:] == old[4:]  # v1, metadata, "-", the file source
        assert json.loads(new[3]) == {f"copy.{topic}": {"0": o0 + 7, "1": o1}}
        assert new[3] == f'{{"copy.{topic}":{{"0":{o0 + 7},"1":{o1}}}}}'.encode()
    (run,) = [p.name for p in (path / "ferry").iterdir()]
    assert offsets_files(path / "ferry" / run / "original") == before
    assert offsets_files(path / "ferry" / run / "translated") == after
    # The next scheduled run, seconds later (the default --idle would call the checkpoint
    # busy): it was translated, nothing to do.
    again = run_job("migrate", "--config", config, "--checkpoint", str(path), "--execute")
    assert again.code == 0 and f"ALREADY_MIGRATED by run {run}" in again.stdout, again.stderr
    assert offsets_files(path) == after


def test_a_batch_that_appears_during_the_run_stops_it_before_any_write(
    copied_topic, tmp_path, monkeypatch
):
    """The query is running: a batch lands while Ferry plans. Nothing is rewritten; the
    intent is in the ledger, and the run's outcome says it was aborted (in its folder too)."""
    from ferry.checkpoint import positions

    topic, config = copied_topic
    path = spark_checkpoint(tmp_path / "cp", topic)
    before = offsets_files(path)
    plan_for_real = positions.translate

    def plan_while_the_query_runs(*args, **kwargs):
        answer = plan_for_real(*args, **kwargs)
        fake_checkpoint(path, {"offsets/6": f'v1\n{META}\n-\n{{"{topic}":{{"0":20,"1":29}}}}\n-'})
        return answer

    monkeypatch.setattr(positions, "translate", plan_while_the_query_runs)
    result = run_job(
        "migrate", "--config", config, "--checkpoint", str(path), "--idle", "0s", "--execute"
    )
    assert result.code == 1, result.stderr
    assert "batch 6 appeared during this run: its query is running" in result.stderr
    now = offsets_files(path)
    assert {k: v for k, v in now.items() if k != "6"} == before
    phases = Counter(r["phase"] for r in ledger_rows(tmp_path / "ledger"))
    assert phases["intent"] == 4 and phases["outcome"] == 2, phases
    outcomes = {r["status"] for r in ledger_rows(tmp_path / "ledger") if r["phase"] == "outcome"}
    assert outcomes == {"ABORTED"}, outcomes
    (run,) = (path / "ferry").iterdir()
    assert (run / "aborted").exists()


def test_a_run_stopped_between_its_files_is_finished_by_the_next_and_rolled_back(
    copied_topic, tmp_path
):
    """A run killed after rewriting offsets/5 and before offsets/4: the next run finishes it
    (offsets/4 gets the killed run's translation, offsets/5 is left alone: never translated
    twice), and the run after that finds it done; the rollback puts both originals back."""
    topic, config = copied_topic
    path = spark_checkpoint(tmp_path / "cp", topic)
    before = offsets_files(path)
    done = run_job(
        "migrate", "--config", config, "--checkpoint", str(path), "--idle", "0s", "--execute"
    )
    assert done.code == 0, done.stderr
    translated = offsets_files(path)
    (run,) = [p.name for p in (path / "ferry").iterdir()]
    (path / "offsets" / "4").write_bytes(before["4"])  # as if never rewritten
    # Ferry's local replace leaves no checksum; an older one's would not match the original
    (path / "offsets" / ".4.crc").unlink(missing_ok=True)
    again = run_job(
        "migrate", "--config", config, "--checkpoint", str(path), "--idle", "0s", "--execute"
    )
    assert again.code == 0, again.stderr
    assert f"finishing run {run}, killed before its outcome" in again.stderr
    assert offsets_files(path) == translated
    third = run_job(
        "migrate", "--config", config, "--checkpoint", str(path), "--idle", "0s", "--execute"
    )
    assert third.code == 0 and f"ALREADY_MIGRATED by run {run}" in third.stdout, third.stderr
    back = run_job(
        "migrate", "--config", config, "--checkpoint", str(path), "--rollback", run, "--execute"
    )
    assert back.code == 0, back.stderr
    assert offsets_files(path) == before


def test_positions_the_source_lost_are_data_loss_unless_allowed(copied_topic, clusters, tmp_path):
    """Retention took events[0]'s records 0..14 after the query stopped: batch 5 is not
    committed, so Spark would read from offsets/4 (12) again, and 12..14 are gone. Refused as
    DATA_LOSS, naming them (Spark's failOnDataLoss would have stopped); --allow-data-loss
    translates it, saying what was lost."""
    topic, config = copied_topic
    src, _ = clusters
    path = spark_checkpoint(tmp_path / "cp", topic)
    before = offsets_files(path)
    delete_records(src.config, {(topic, 0): 15})
    argv = ("--config", config, "--checkpoint", str(path), "--idle", "0s", "--execute")
    refused = run_job("migrate", *argv, "-o", "json")
    assert refused.code == 1, refused.stderr
    rows = {r["group"]: r["group_status"] for r in json.loads(refused.stdout)}
    assert rows["offsets/4 source 1"] == "DATA_LOSS" and rows["offsets/5 source 1"] == "READY"
    assert f"{topic}[0] 12..14 (3)" in refused.stderr, refused.stderr
    assert offsets_files(path) == before and not (path / "ferry").exists()
    allowed = run_job("migrate", *argv, "--allow-data-loss")
    assert allowed.code == 0, allowed.stderr
    assert f"warning: {path.resolve().as_uri().replace('file:///', 'file:/')}" in allowed.stderr
    assert offsets_files(path) != before


def test_positions_past_the_source_end_are_not_the_source_and_are_refused(
    copied_topic, tmp_path
):
    topic, config = copied_topic
    path = spark_checkpoint(tmp_path / "cp", topic)
    line = f'{{"{topic}":{{"1":26,"0":99}}}}'  # events[0] has 30 records on the source
    fake_checkpoint(path, {"offsets/5": f'v1\n{META}\n-\n{line}\n{{"logOffset":5}}'})
    result = run_job(
        "migrate", "--config", config, "--checkpoint", str(path), "--idle", "0s", "--execute"
    )
    assert result.code == 1, result.stderr
    [error] = [x for x in result.stderr.splitlines() if x.startswith("error:")]
    assert f"{topic}[0] is at 99, past the source's log end 30" in error
    assert not (path / "ferry").exists()
