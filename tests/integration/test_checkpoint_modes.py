"""`migrate --checkpoint` in every mode a cutover meets, judged by real Structured Streaming
queries (Spark's own Kafka connector, `ferry.testing.streaming`) and real MirrorMaker 2.

One world for the module, so that few Spark applications run: the queries read the source and
stop mid-topic (one application); more records arrive; the source deletes the first records of
each topic's partition 0 (read already) and the destination held 13 records of its own on
partition 1 (the last partition) before MirrorMaker 2 copied into it, so every destination
offset differs from the source's. MM2 copies `U-*` under its default policy (`source.` prefix)
and `UI-*` under `IdentityReplicationPolicy` (the same names). Ferry translates each
checkpoint; the same queries restarted against the destination, in one application, must
leave every source record in their sinks exactly once. Controls (one more application) show
what goes wrong without the translation, or with Ferry's old batch choice.

Cases: the DSv1 `KafkaSource` with its newest batch committed (Spark asks it for
`getBatch(offsets/N-1, offsets/N)`); a union of two Kafka sources, newest batch uncommitted;
`subscribePattern` (with a destination topic the pattern would also read) and `assign`;
identical topic names (and a checkpoint a plain restart already advanced on the destination:
refused); async progress tracking (batch ids skip in storage; a Kafka sink); an offset log of
format `v2` with named sources; a batch that runs longer than `--idle` (a slow
`foreachBatch`): refused, or flagged on the next run, never `ALREADY_MIGRATED` over source
offsets. SIGKILL and HDFS are tested elsewhere (`test_checkpoint_killed.py`, `test_cluster`).
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
from ferry.testing.replicate import end_offsets, read_all
from ferry.testing.streaming import (
    Query,
    Source,
    run_queries,
    sink_values,
    start_running,
    stop_running,
    topic_sink_values,
)

from .jobrunner import run_job, write_migrate_config

pytestmark = pytest.mark.integration

FIRST, SECOND = 40, 25  # records per partition before the queries stop, and after
DELETED = 3  # records the source deletes on partition 0 (every query read them already)
OLD = 13  # records the destination held on its last partition before MM2 copied
# Source topics (short name → partitions) read under the default policy (renamed).
RENAMED = {"dsv1": 2, "ua": 2, "ub": 2, "pat-a": 1, "pat-b": 1, "asg": 3, "v2a": 2, "v2b": 2}
RENAMED |= {"async": 1, "slow": 1}
IDENTICAL = {"ident": 2}  # read under IdentityReplicationPolicy
V2 = {  # an offset log of format v2; a named source needs source evolution on
    "spark.sql.streaming.offsetLog.formatVersion": "2",
    "spark.sql.streaming.queryEvolution.enableSourceEvolution": "true",
}
ASYNC = {
    "asyncProgressTrackingEnabled": "true",
    "asyncProgressTrackingCheckpointIntervalMs": "15000",
}


def records(topic: str, partition: int, start: int, n: int) -> list[Record]:
    """Records whose value names their topic, partition and source offset."""
    return [
        Record(f"k{i % 4}".encode(), f"{topic}-{partition}-{i}".encode())
        for i in range(start, start + n)
    ]


# ------------------------------------------------------------------------------- the world


class World:
    """The clusters, topic names, folders and configs every test here shares."""

    def __init__(self, src, dst, tmp: Path) -> None:  # noqa: ANN001 - LocalBrokers
        stamp = int(time.time() * 1000) % 10**8
        self.src, self.dst, self.tmp = src, dst, tmp
        self.u, self.ui = f"cm{stamp}", f"cmi{stamp}"
        # A destination topic the source lacks that a careless pattern also reads.
        self.archive = f"source.{self.u}-pat-a-archive"
        self.configs: dict[str, str] = {}  # "renamed" / "identity" -> a migrate config
        self.source_outcome: dict[str, str | None] = {}  # the source run's, per query

    def topic(self, short: str) -> str:
        """A source topic's name."""
        return f"{self.ui if short in IDENTICAL else self.u}-{short}"

    def remote(self, short: str) -> str:
        """Its copy's name on the destination."""
        return self.topic(short) if short in IDENTICAL else f"source.{self.topic(short)}"

    def checkpoint(self, case: str, folder: str = "q") -> Path:
        return self.tmp / folder / case / "checkpoint"

    def sink(self, case: str, folder: str = "q") -> str:
        return str(self.tmp / folder / case / "sink")

    def config(self, case: str) -> str:
        return str(self.configs["identity" if case == "ident" else "renamed"])

    def source_records(self, *shorts: str) -> Counter:
        """Every record a query on these topics read or will read: the source's now, and
        those it deleted (read before they went)."""
        out: Counter = Counter()
        for short in shorts:
            topic = self.topic(short)
            out.update((r.key.decode(), r.value.decode()) for r in read_all(self.src.config, topic))
            out.update((r.key.decode(), r.value.decode()) for r in records(topic, 0, 0, DELETED))
        return out


def query(world: World, case: str, where: str, folder: str = "q", **kwargs) -> Query:  # noqa: ANN003
    """A case's query on the source (`where="src"`) or restarted on the destination."""
    on_dst = where == "dst"

    def name(short: str) -> str:
        return world.remote(short) if on_dst else world.topic(short)

    base = {
        "name": f"{case}-{where}-{folder}",
        "bootstrap": (world.dst if on_dst else world.src).bootstrap,
        "topic": "",
        "checkpoint": str(world.checkpoint(case, folder)),
        "sink": world.sink(case, folder),
        "max_offsets_per_trigger": 20,
    }
    if case == "dsv1":
        base |= {"topic": name("dsv1"), "reader": "v1"}
    elif case == "union":
        base |= {
            "sources": [Source(subscribe=name("ua")), Source(subscribe=name("ub"))],
            "fail_at_batch": None if on_dst else 2,
        }
    elif case == "pattern":
        # On the source the query's own pattern; on the destination the one given
        # (`pattern=`), by default one that reads exactly the copies.
        own = f"^source[.]{world.u}-pat-[ab]$" if on_dst else f"{world.u}-pat-[ab]"
        base["sources"] = [Source(subscribe_pattern=kwargs.pop("pattern", own))]
    elif case == "assign":
        base |= {
            "sources": [Source(assign={name("asg"): [0, 2]})],
            "fail_at_batch": None if on_dst else 1,
        }
    elif case == "v2":
        base |= {
            "sources": [
                Source(subscribe=name("v2a"), name="alpha"),
                Source(subscribe=name("v2b"), name="beta"),
            ],
            # Spark 4.2 cannot restart a v2 log whose newest batch is uncommitted, on any
            # cluster, translated or not (None.get in OfflineStateRepartitionUtils
            # .isRepartitionBatch: a v2 metadata line has no spark.sql.shuffle.partitions);
            # its unfinished-repartition check off, it can.
            "conf": {**V2, "spark.sql.streaming.checkUnfinishedRepartitionOnRestart": "false"}
            if on_dst
            else dict(V2),
            "fail_at_batch": None if on_dst else 2,
        }
    elif case == "ident":
        base["topic"] = name("ident")
    elif case == "async":
        base |= {
            "topic": name("async"),
            "writer_options": dict(ASYNC),
            "trigger": "0.3",
            "max_offsets_per_trigger": 8,
            "sink_topic": f"sink-{world.u}-async",
            "sink_bootstrap": world.src.bootstrap,
        }
        # On the source, 8 records a batch: batch 3 (offsets 24..31) is held up 16 s, longer
        # than the checkpoint interval, so that batch 4 is written to storage, and batch 4
        # (32..39) is held up until the query is killed: offsets/4 stored, commits/4 not,
        # batches 1..3 not stored (batch ids skip).
        held = {f"{name('async')}-0-24": 16.0, f"{name('async')}-0-32": 600.0}
        base |= {"stop_when_caught_up": True} if on_dst else {"sleep_on": held}
    elif case == "slow":
        base |= {"topic": name("slow"), "max_offsets_per_trigger": 10}
    else:
        raise ValueError(case)
    base.update(kwargs)
    return Query(**base)


SOURCE_CASES = ("dsv1", "union", "pattern", "assign", "v2", "ident", "async")
STOPPED_CASES = SOURCE_CASES[:-1]  # run with availableNow; the async query is killed
CASE_TOPICS = {
    "dsv1": ("dsv1",),
    "union": ("ua", "ub"),
    "pattern": ("pat-a", "pat-b"),
    "assign": ("asg",),
    "v2": ("v2a", "v2b"),
    "ident": ("ident",),
    "async": ("async",),
    "slow": ("slow",),
}


@pytest.fixture(scope="module")
def world(clusters, tmp_path_factory):
    src, dst = clusters
    world = World(src, dst, tmp_path_factory.mktemp("checkpoint-modes"))
    every = {**RENAMED, **IDENTICAL}
    create_topics(src.config, {world.topic(s): n for s, n in every.items()})
    # The destination's copies exist before MM2 copies into them, with records of their own.
    create_topics(dst.config, {world.remote(s): n for s, n in every.items()})
    for short, parts in every.items():
        old = [Record(b"x", f"old-{i}".encode()) for i in range(OLD)]
        produce(dst.config, world.remote(short), parts - 1, old)
        for p in range(parts):
            produce(src.config, world.topic(short), p, records(world.topic(short), p, 0, FIRST))
    create_topics(dst.config, {world.archive: 1})
    produce(
        dst.config, world.archive, 0, [Record(b"z", f"archived-{i}".encode()) for i in range(7)]
    )

    create_topics(src.config, {f"sink-{world.u}-async": 1})  # the async query's Kafka sink
    world.source_outcome = run_queries(
        world.tmp / "runs", [query(world, c, "src") for c in STOPPED_CASES]
    )
    kill_the_async_query_mid_batch(world)
    # The queries stopped; the topics move on; the source deletes what every query read.
    for short, parts in every.items():
        for p in range(parts):
            topic = world.topic(short)
            produce(src.config, topic, p, records(topic, p, FIRST, SECOND))
    delete_records(src.config, {(world.topic(s), 0): DELETED for s in every})
    for topics, identity in ((RENAMED, False), (IDENTICAL, True)):
        prefix = world.ui if identity else world.u
        wanted = {
            (world.topic(s), p): FIRST
            + SECOND
            - (DELETED if p == 0 else 0)
            + (OLD if p == n - 1 else 0)
            for s, n in topics.items()
            for p in range(n)
        }
        with mirror_maker(
            src, dst, f"{prefix}-.*", f"{prefix}-.*", identity=identity, log_dir=world.tmp
        ) as mm:
            wait_replicated(mm, [world.topic(s) for s in topics], records=wanted)
    for policy, prefix, rename in (
        ("renamed", world.u, [{"match": "^(.*)$", "replace": "source.\\1"}]),
        ("identity", world.ui, None),
    ):
        folder = world.tmp / f"config-{policy}"
        folder.mkdir()
        sections = {"topics": {"rename": rename}} if rename else {}
        world.configs[policy] = write_migrate_config(folder, src, dst, prefix, **sections)
    shutil.copytree(world.tmp / "q", world.tmp / "untouched")
    return world


def kill_the_async_query_mid_batch(world: World) -> None:
    """Run the async query until it is held up in batch 4 with offsets/4 stored, then kill
    its application (SIGKILL): its newest stored batch is not committed."""
    running = query(world, "async", "src")
    path = Path(running.checkpoint)
    process = start_running(world.tmp / "runs", [running], every_s=0.3)
    try:
        deadline = time.monotonic() + 240
        while not (path / "offsets" / "4").exists():
            assert process.poll() is None, "the async query stopped"
            assert time.monotonic() < deadline, "the async query stored no batch 4"
            time.sleep(0.5)
        time.sleep(3)
    finally:
        stop_running(process)


def migrate(world: World, case: str, path: Path, *extra: str):  # noqa: ANN201
    return run_job(
        "migrate", "--config", world.config(case), "--checkpoint", str(path), "--idle", "0s",
        *extra,
    )  # fmt: skip


def offsets_files(path: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in (path / "offsets").iterdir() if p.name.isdigit()}


def ids(path: Path, log: str) -> list[int]:
    return sorted(int(p.name) for p in (path / log).iterdir() if p.name.isdigit())


def naive_pattern(world: World) -> str:
    """The source's pattern with the destination's prefix: it also finds the archive topic."""
    return f"source[.]{world.u}-pat-[ab]"


@pytest.fixture(scope="module")
def restarted(world):
    """Every case translated (`--execute`), then every query whose translation succeeded
    restarted on the destination in one application. Before the restart, copies for the
    controls: the DSv1 checkpoint with `offsets/N-1` put back as the source left it (what a
    translation of `offsets/N` alone leaves), the pattern checkpoint for a careless pattern."""
    results, starts = {}, {}
    for case in SOURCE_CASES:
        extra = ("--subscribe-pattern", naive_pattern(world)) if case == "pattern" else ()
        results[case] = migrate(world, case, world.checkpoint(case), "--execute", *extra)
    controls = world.tmp / "controls"
    if results["dsv1"].code == 0:
        shutil.copytree(world.tmp / "q" / "dsv1", controls / "dsv1")
        newest = ids(world.checkpoint("dsv1"), "offsets")[-1]
        original = world.checkpoint("dsv1", "untouched") / "offsets" / str(newest - 1)
        target = world.checkpoint("dsv1", "controls") / "offsets" / str(newest - 1)
        target.write_bytes(original.read_bytes())
        target.with_name(f".{target.name}.crc").unlink(missing_ok=True)
    if results["pattern"].code == 0:
        shutil.copytree(world.tmp / "q" / "pattern", controls / "pattern")
    starts["async"] = end_offsets(world.src.config, f"sink-{world.u}-async")
    to_run = [query(world, c, "dst") for c in SOURCE_CASES if results[c].code == 0]
    outcome = run_queries(world.tmp / "runs", to_run) if to_run else {}
    return {"migrate": results, "outcome": outcome, "sink_starts": starts}


@pytest.fixture(scope="module")
def controls(world, restarted):
    """The same restarts without Ferry's translation (one application): the identical-names
    checkpoint restarted as the source left it (a plain restart against the destination); the
    DSv1 checkpoint with only `offsets/N` translated; the pattern query with the careless
    pattern."""
    folder = world.tmp / "controls"
    shutil.copytree(world.tmp / "untouched" / "ident", folder / "ident")
    to_run = [query(world, "ident", "dst", "controls")]
    if (folder / "dsv1").exists():
        to_run.append(query(world, "dsv1", "dst", "controls"))
    if (folder / "pattern").exists():
        to_run.append(query(world, "pattern", "dst", "controls", pattern=naive_pattern(world)))
    return run_queries(world.tmp / "runs", to_run)


def the_source_run_went_as_planned(world: World, case: str) -> None:
    outcome = world.source_outcome
    if case in ("union", "assign", "v2"):  # stopped with the newest batch uncommitted
        assert "fails on purpose" in (outcome[f"{case}-src-q"] or ""), outcome
        path = world.checkpoint(case, "untouched")
        assert ids(path, "offsets")[-1] not in ids(path, "commits")
    else:
        assert outcome[f"{case}-src-q"] is None, outcome


def assert_exactly_once(world: World, restarted, case: str) -> None:
    result = restarted["migrate"][case]
    assert result.code == 0, f"{case}: migrate exit {result.code}: {result.stderr[-2000:]}"
    error = restarted["outcome"][f"{case}-dst-q"]
    assert error is None, f"{case}: the restarted query failed: {error}"
    seen = sink_values(world.sink(case))
    expected = world.source_records(*CASE_TOPICS[case])
    if case == "assign":  # partitions 0 and 2 only
        expected = Counter({kv: n for kv, n in expected.items() if kv[1].split("-")[-2] != "1"})
    missing, repeated = expected - seen, seen - expected
    assert not missing and not repeated, (
        f"{case}: {sum(missing.values())} missing ({sorted(missing)[:4]}), "
        f"{sum(repeated.values())} repeated or foreign ({sorted(repeated)[:4]})"
    )


# --------------------------------------------------------------------------------- the cases


@pytest.mark.slow
def test_dsv1_source_with_its_newest_batch_committed(world, restarted, controls):
    the_source_run_went_as_planned(world, "dsv1")
    untouched = world.checkpoint("dsv1", "untouched")
    newest = ids(untouched, "offsets")[-1]
    assert newest in ids(untouched, "commits") and newest >= 1
    rows = json.loads(
        migrate(world, "dsv1", world.checkpoint("dsv1", "untouched"), "-o", "json").stdout or "[]"
    )
    # Spark calls getBatch(offsets/N-1, offsets/N) on a DSv1 source: both are translated.
    assert {r["group"].split()[0] for r in rows} == {f"offsets/{newest - 1}", f"offsets/{newest}"}
    assert_exactly_once(world, restarted, "dsv1")
    # Control: offsets/N alone translated, offsets/N-1 as the source left it: Spark counts the
    # source's partitions as deleted and stops (failOnDataLoss=true, its default).
    control = controls.get("dsv1-dst-controls", "no control: the translation failed")
    assert control and ("deleted" in control or "data loss" in control.lower()), control


@pytest.mark.slow
def test_a_union_of_two_kafka_sources(world, restarted):
    the_source_run_went_as_planned(world, "union")
    path = world.checkpoint("union")
    result = restarted["migrate"]["union"]
    assert result.code == 0, result.stderr[-2000:]
    newest = ids(path, "offsets")
    # Both sources' lines of both files (N-1 and N) name the destination's topics.
    for batch in (2, 1):
        lines = (path / "offsets" / str(batch)).read_text().split("\n")[2:]
        assert [list(json.loads(line)) for line in lines] == [
            [world.remote("ua")],
            [world.remote("ub")],
        ], (batch, newest)
    assert_exactly_once(world, restarted, "union")


@pytest.mark.slow
def test_subscribe_pattern(world, restarted, controls):
    the_source_run_went_as_planned(world, "pattern")
    result = restarted["migrate"]["pattern"]
    assert result.code == 0, result.stderr[-2000:]
    assert_exactly_once(world, restarted, "pattern")
    # Spark's Kafka source keeps a topic when the pattern is *found* in its name
    # (`Regex.findFirstIn`, not a whole-name match): restarted with the careless pattern the
    # query also reads the archive topic, from earliest...
    error = controls.get("pattern-dst-controls")
    assert error is None, f"the careless pattern's restart failed: {error}"
    seen = sink_values(world.sink("pattern", "controls"))
    assert sum(n for (_k, v), n in seen.items() if v.startswith("archived-")) == 7
    # ...and the summary must say so.
    said = result.stdout + result.stderr
    assert world.archive in said, said[-1500:]


@pytest.mark.slow
def test_assign(world, restarted):
    the_source_run_went_as_planned(world, "assign")
    result = restarted["migrate"]["assign"]
    assert result.code == 0, result.stderr[-2000:]
    for batch in (0, 1):  # the newest (1) is not committed: both translated
        line = (world.checkpoint("assign") / "offsets" / str(batch)).read_text().split("\n")[2]
        assert sorted(json.loads(line)[world.remote("asg")]) == ["0", "2"]
    assert "assign" in result.stdout + result.stderr  # the restart hint: the assign JSON
    assert_exactly_once(world, restarted, "assign")


@pytest.mark.slow
def test_identical_topic_names(world, restarted, controls):
    """MM2 with IdentityReplicationPolicy: the same names on both clusters."""
    the_source_run_went_as_planned(world, "ident")
    assert_exactly_once(world, restarted, "ident")
    # Translating again: nothing to do, whatever the names.
    again = migrate(world, "ident", world.checkpoint("ident"), "--execute")
    assert again.code == 0 and "ALREADY_MIGRATED" in again.stdout, again.stdout + again.stderr
    # Control: a plain restart against the destination reads the wrong records (skips the
    # 5 the source deleted, reads the destination's 13 old ones and 13 records again).
    assert controls["ident-dst-controls"] is None, controls
    seen = sink_values(world.sink("ident", "controls"))
    expected = world.source_records("ident")
    assert sum((expected - seen).values()) >= DELETED and sum((seen - expected).values()) >= OLD
    # That checkpoint now holds destination positions under the source's names: refused.
    advanced = world.checkpoint("ident", "controls")
    before = offsets_files(advanced)
    refused = migrate(world, "ident", advanced, "--execute")
    assert refused.code == 1, refused.stdout + refused.stderr
    assert "ALREADY_MIGRATED" not in refused.stdout
    assert offsets_files(advanced) == before


@pytest.mark.slow
def test_async_progress_tracking(world, restarted):
    """Batch ids skip in storage and the newest batch stored is not committed (the query was
    killed in it): Spark runs it again from the previous batch *in storage*, not N-1, and
    the records from there on again (the Kafka sink is at-least-once). Every record from
    those positions on must reach the sink exactly once in the restarted run."""
    untouched = world.checkpoint("async", "untouched")
    stored, commits = ids(untouched, "offsets"), ids(untouched, "commits")
    print(f"async: offsets/ {stored}, commits/ {commits}")
    assert stored != list(range(len(stored))), f"no batch id skipped: {stored}"
    newest = stored[-1]
    assert newest not in commits, (stored, commits)
    restart_from = max(b for b in stored if b < newest)
    line = (untouched / "offsets" / str(restart_from)).read_text().split("\n")[2]
    positions = {int(p): o for p, o in json.loads(line)[world.topic("async")].items()}
    result = restarted["migrate"]["async"]
    assert result.code == 0, result.stderr[-2000:]
    error = restarted["outcome"]["async-dst-q"]
    assert error is None, f"the restarted query failed: {error}"
    seen = topic_sink_values(
        world.src.config, f"sink-{world.u}-async", restarted["sink_starts"]["async"]
    )
    expected = Counter(
        {
            kv: n
            for kv, n in world.source_records("async").items()
            if int(kv[1].split("-")[-1]) >= positions[int(kv[1].split("-")[-2])]
        }
    )
    missing, repeated = expected - seen, seen - expected
    assert not missing and not repeated, (sorted(missing)[:4], sorted(repeated)[:4])


@pytest.mark.slow
def test_v2_offset_log_with_named_sources(world, restarted):
    the_source_run_went_as_planned(world, "v2")
    untouched = world.checkpoint("v2", "untouched")
    newest = ids(untouched, "offsets")[-1]
    original = (untouched / "offsets" / str(newest)).read_text().split("\n")
    assert original[0] == "v2", original[0]
    result = restarted["migrate"]["v2"]
    assert result.code == 0, result.stderr[-2000:]
    translated = (world.checkpoint("v2") / "offsets" / str(newest)).read_text().split("\n")
    # Byte-compatible: the header, the metadata line and the sources' names and order kept.
    assert translated[:2] == original[:2]
    names = {"alpha": world.remote("v2a"), "beta": world.remote("v2b")}
    assert [ln.split(":", 1)[0] for ln in translated[2:]] == [
        ln.split(":", 1)[0] for ln in original[2:]
    ]
    for ln in translated[2:]:
        name, body = ln.split(":", 1)
        assert list(json.loads(body)) == [names[name]], ln
    assert_exactly_once(world, restarted, "v2")


@pytest.mark.slow
def test_a_batch_longer_than_idle_is_never_taken_for_stopped(world):
    """A running query whose batch sleeps longer than `--idle`: Ferry refuses it, or the run
    after flags that the query went on on the source (exit 1), never ALREADY_MIGRATED; the
    rollback works; once the query is stopped, the translation restarts it exactly once."""
    slow = query(world, "slow", "src", sleep_s=25, sleep_from_batch=1, trigger="1")
    path = Path(slow.checkpoint)
    process = start_running(world.tmp / "runs", [slow], every_s=1)
    try:
        deadline = time.monotonic() + 240
        while not ((path / "offsets" / "1").exists() and (path / "commits" / "0").exists()):
            assert process.poll() is None, "the slow query stopped"
            assert time.monotonic() < deadline, "the slow query wrote no batch 1"
            time.sleep(0.5)
        time.sleep(6)  # batch 1 runs on, its offsets/1 older than --idle
        idle = ("--idle", "5s")
        first = run_job(
            "migrate", "--config", world.config("slow"), "--checkpoint", str(path),
            "--execute", *idle,
        )  # fmt: skip
        assert "ALREADY_MIGRATED" not in first.stdout
        print(f"the run under the running batch: exit {first.code}: {first.stderr[-600:]}")
        if first.code == 0:
            # Translated under a running batch: the batch ends, the query writes batch 2
            # from the source's positions. The next run must say so.
            while not (path / "offsets" / "2").exists():
                assert process.poll() is None and time.monotonic() < deadline + 120
                time.sleep(0.5)
            time.sleep(6)
            second = run_job(
                "migrate", "--config", world.config("slow"), "--checkpoint", str(path),
                "--execute", *idle,
            )  # fmt: skip
            print(f"the next run: exit {second.code}: {second.stderr[-600:]}")
            assert second.code == 1, second.stdout + second.stderr
            assert "ALREADY_MIGRATED" not in second.stdout, second.stdout
            run_id = next(
                w.rstrip(";,.") for w in first.stdout.split() if w.startswith("migrate-checkpoint-")
            )
        else:
            assert first.code == 1, first.stdout + first.stderr
            run_id = None
    finally:
        stop_running(process)
    if run_id is not None:
        back = run_job(
            "migrate", "--config", world.config("slow"), "--checkpoint", str(path),
            "--rollback", run_id, "--execute",
        )  # fmt: skip
        assert back.code == 0, back.stdout + back.stderr
    # Stopped for real now: translated, restarted on the destination, exactly once.
    done = migrate(world, "slow", path, "--execute")
    assert done.code == 0, done.stdout + done.stderr
    outcome = run_queries(
        world.tmp / "runs", [query(world, "slow", "dst", trigger="available_now")]
    )
    assert outcome == {"slow-dst-q": None}, str(outcome)
    seen = sink_values(world.sink("slow"))
    # This query started after the source deleted its first records: it never read them.
    expected = Counter(
        (r.key.decode(), r.value.decode()) for r in read_all(world.src.config, world.topic("slow"))
    )
    missing, repeated = expected - seen, seen - expected
    assert not missing and not repeated, (sorted(missing)[:4], sorted(repeated)[:4])
