"""`migrate --checkpoint` where Spark reads a source's start offsets (`sources/KEY/0`) on
restart, and where the operator picks the sources (`--sources`), judged by real Structured
Streaming queries (Spark's own Kafka connector, `ferry.testing.streaming`).

One world for the module, three local clusters and three Spark applications: the queries run
on the source (one application; one more adds a source to the `v2` query), Ferry translates
each checkpoint, and every query is restarted on the destination in one application, which
must leave every record in its sink exactly once. The destination's topics are the source's
under the `source.` prefix, each with 13 records of its own on its last partition before the
copy, so that every destination offset there differs from the source's; the copies are
produced record for record (key, value, timestamp), as MirrorMaker 2 leaves them, without
starting it (this module is about Spark's restart, `test_checkpoint_modes.py` runs MM2).

Cases:
- a DSv1 `KafkaSource` whose only batch is committed: on restart Spark asks it for
  `getBatch(None, offsets/0)`, which takes its start offsets: left untranslated, the source's
  partitions count as deleted and the query stops (`failOnDataLoss`);
- the first batch not committed: Spark runs it again from the start offsets (today refused);
- a `v2` offset log whose query gained a named source (source evolution) in the newest,
  uncommitted batch: that source runs the batch from its start offsets;
- a union whose other source reads a third cluster's topic of the same name (with a partition
  the source's lacks): named and refused, and with `--sources` the other one translated and
  the third cluster's kept byte for byte, the restarted union exact.
"""

from __future__ import annotations

import json
import shutil
import time
from collections import Counter
from pathlib import Path

import pytest

from ferry.testing.produce import Record, create_topics, produce
from ferry.testing.streaming import Query, Source, run_queries, sink_values

from .jobrunner import run_job, write_migrate_config

pytestmark = pytest.mark.integration

FIRST, SECOND = 30, 20  # records per partition before the queries stop, and after
OLD = 13  # records each destination topic holds on its last partition before the copy
# topic (short name) -> partitions, on the source (copied to the destination)
TOPICS = {"one": 2, "first": 2, "alpha": 2, "beta": 2, "mine": 2}
THIRD = {"mine": 3}  # the third cluster's topic of the same name, one partition more
NOW_MS = int(time.time() * 1000)  # the records' timestamps: recent, never past retention
V2 = {  # an offset log of format v2; a named source needs source evolution on
    "spark.sql.streaming.offsetLog.formatVersion": "2",
    "spark.sql.streaming.queryEvolution.enableSourceEvolution": "true",
}


def records(label: str, topic: str, partition: int, start: int, n: int) -> list[Record]:
    """Records whose value names their cluster, topic, partition and offset; one timestamp
    each, so that a copy is the very record (key, value, timestamp)."""
    return [
        Record(f"k{i % 4}".encode(), f"{label}-{topic}-{partition}-{i}".encode(), NOW_MS + i)
        for i in range(start, start + n)
    ]


class World:
    def __init__(self, src, dst, third, tmp: Path) -> None:  # noqa: ANN001 - LocalBrokers
        self.src, self.dst, self.third, self.tmp = src, dst, third, tmp
        self.u = f"cs{int(time.time() * 1000) % 10**8}"
        self.config = ""
        self.outcome: dict[str, str | None] = {}

    def topic(self, short: str) -> str:
        return f"{self.u}-{short}"

    def remote(self, short: str) -> str:
        return f"source.{self.topic(short)}"

    def checkpoint(self, case: str, folder: str = "q") -> Path:
        return self.tmp / folder / case / "checkpoint"

    def sink(self, case: str) -> str:
        return str(self.tmp / "q" / case / "sink")

    def expected(self, *shorts: str, third: bool = False) -> Counter:
        """Every record of these topics on the source (and the third cluster's)."""
        out: Counter = Counter()
        for short in shorts:
            for label, parts in (("src", TOPICS[short]), ("third", THIRD.get(short, 0))):
                if label == "third" and not third:
                    continue
                for p in range(parts):
                    batch = records(label, self.topic(short), p, 0, FIRST + SECOND)
                    out.update((r.key.decode(), r.value.decode()) for r in batch)
        return out


def query(world: World, case: str, on_dst: bool, **kwargs) -> Query:  # noqa: ANN003
    def name(short: str) -> str:
        return world.remote(short) if on_dst else world.topic(short)

    where = world.dst if on_dst else world.src
    base = {
        "name": f"{case}-{'dst' if on_dst else 'src'}",
        "bootstrap": where.bootstrap,
        "topic": "",
        "checkpoint": str(world.checkpoint(case)),
        "sink": world.sink(case),
    }
    if case == "dsv1":  # one batch on the source, committed
        base |= {"topic": name("one"), "reader": "v1"}
    elif case == "first":  # the first batch fails: offsets/0 written, not committed
        base |= {"topic": name("first"), "fail_at_batch": None if on_dst else 0}
    elif case == "v2":
        sources = [Source(subscribe=name("alpha"), name="alpha")]
        if kwargs.pop("evolved", on_dst):
            sources.append(Source(subscribe=name("beta"), name="beta"))
        base |= {"sources": sources, "max_offsets_per_trigger": 20, "conf": dict(V2)}
        if on_dst:  # Spark 4.2 restarts an uncommitted v2 batch only so (test_checkpoint_modes)
            base["conf"]["spark.sql.streaming.checkUnfinishedRepartitionOnRestart"] = "false"
    elif case == "union":
        base |= {
            "sources": [
                Source(subscribe=name("mine")),
                Source(subscribe=world.topic("mine"), bootstrap=world.third.bootstrap),
            ],
            "max_offsets_per_trigger": 40,
        }
    else:
        raise ValueError(case)
    base.update(kwargs)
    return Query(**base)


def produce_topics(world: World, start: int, n: int) -> None:
    """`n` more records per partition on the source (copied to the destination) and on the
    third cluster."""
    for short, parts in TOPICS.items():
        for p in range(parts):
            batch = records("src", world.topic(short), p, start, n)
            produce(world.src.config, world.topic(short), p, batch)
            produce(world.dst.config, world.remote(short), p, batch)
    for short, parts in THIRD.items():
        for p in range(parts):
            produce(
                world.third.config,
                world.topic(short),
                p,
                records("third", world.topic(short), p, start, n),
            )


@pytest.fixture(scope="module")
def third():
    from ferry.testing.brokers import local_brokers

    with local_brokers("third") as brokers:
        yield brokers[0]


@pytest.fixture(scope="module")
def world(clusters, third, tmp_path_factory):
    src, dst = clusters
    world = World(src, dst, third, tmp_path_factory.mktemp("checkpoint-sources"))
    create_topics(src.config, {world.topic(s): n for s, n in TOPICS.items()})
    create_topics(dst.config, {world.remote(s): n for s, n in TOPICS.items()})
    create_topics(third.config, {world.topic(s): n for s, n in THIRD.items()})
    for short, parts in TOPICS.items():
        old = [Record(b"x", f"old-{i}".encode(), NOW_MS - 1000 + i) for i in range(OLD)]
        produce(dst.config, world.remote(short), parts - 1, old)
    produce_topics(world, 0, FIRST)
    cases = [query(world, c, False) for c in ("dsv1", "first", "v2", "union")]
    world.outcome = run_queries(world.tmp / "runs", cases)
    produce_topics(world, FIRST, SECOND)
    # The v2 query gains a source (`beta`) and stops in its first batch: offsets/N names
    # beta for the first time, not committed.
    newest = max(
        int(p.name) for p in (world.checkpoint("v2") / "offsets").iterdir() if p.name.isdigit()
    )
    evolved = query(world, "v2", False, evolved=True, fail_at_batch=newest + 1)
    world.outcome |= run_queries(world.tmp / "runs", [evolved])
    folder = world.tmp / "config"
    folder.mkdir()
    rename = [{"match": "^(.*)$", "replace": "source.\\1"}]
    world.config = write_migrate_config(folder, src, dst, world.u, topics={"rename": rename})
    shutil.copytree(world.tmp / "q", world.tmp / "untouched")
    return world


def migrate(world: World, case: str, *extra: str):  # noqa: ANN201
    path = str(world.checkpoint(case))
    return run_job(
        "migrate", "--config", world.config, "--checkpoint", path, "--idle", "0s", *extra
    )


@pytest.fixture(scope="module")
def restarted(world):
    """Every case translated (`--execute`; the union first without `--sources`, refused),
    then every translated query restarted on the destination in one application."""
    results = {c: migrate(world, c, "--execute") for c in ("dsv1", "first", "v2")}
    results["union-all"] = migrate(world, "union", "--execute")
    results["union"] = migrate(world, "union", "--sources", "0", "--execute")
    to_run = [
        query(world, c, True) for c in ("dsv1", "first", "v2", "union") if results[c].code == 0
    ]
    outcome = run_queries(world.tmp / "runs", to_run) if to_run else {}
    return {"migrate": results, "outcome": outcome}


def ids(path: Path, log: str) -> list[int]:
    return sorted(int(p.name) for p in (path / log).iterdir() if p.name.isdigit())


def assert_exactly_once(world: World, restarted, case: str, expected: Counter) -> None:
    result = restarted["migrate"][case]
    assert result.code == 0, f"{case}: migrate exit {result.code}: {result.stderr[-2000:]}"
    error = restarted["outcome"][f"{case}-dst"]
    assert error is None, f"{case}: the restarted query failed: {error[:1500]}"
    seen = sink_values(world.sink(case))
    missing, repeated = expected - seen, seen - expected
    assert not missing and not repeated, (
        f"{case}: {sum(missing.values())} missing ({sorted(missing)[:4]}), "
        f"{sum(repeated.values())} repeated or foreign ({sorted(repeated)[:4]})"
    )


def start_file(path: Path, key: str) -> bytes:
    return (path / "sources" / key / "0").read_bytes()


@pytest.mark.slow
def test_dsv1_with_its_only_batch_committed(world, restarted):
    untouched = world.checkpoint("dsv1", "untouched")
    assert world.outcome["dsv1-src"] is None, world.outcome
    assert ids(untouched, "offsets") == [0] and ids(untouched, "commits") == [0]
    assert_exactly_once(world, restarted, "dsv1", world.expected("one"))
    result = restarted["migrate"]["dsv1"]
    assert "sources/0/0" in result.stderr, result.stderr[-1500:]  # the plan says it
    translated = start_file(world.checkpoint("dsv1"), "0")
    assert translated.startswith(b"\x00v1\n") and world.remote("one").encode() in translated
    assert start_file(untouched, "0") != translated


@pytest.mark.slow
def test_the_first_batch_not_committed(world, restarted):
    untouched = world.checkpoint("first", "untouched")
    assert "fails on purpose" in (world.outcome["first-src"] or ""), world.outcome
    assert ids(untouched, "offsets") == [0] and ids(untouched, "commits") == []
    assert_exactly_once(world, restarted, "first", world.expected("first"))


@pytest.mark.slow
def test_a_v2_source_added_in_the_newest_uncommitted_batch(world, restarted):
    untouched = world.checkpoint("v2", "untouched")
    assert "fails on purpose" in (world.outcome["v2-src"] or ""), world.outcome
    offsets, commits = ids(untouched, "offsets"), ids(untouched, "commits")
    newest = offsets[-1]
    assert newest not in commits and newest - 1 in commits, (offsets, commits)
    lines = (untouched / "offsets" / str(newest)).read_text().split("\n")[2:]
    before = (untouched / "offsets" / str(newest - 1)).read_text().split("\n")[2:]
    assert sorted(ln.split(":", 1)[0] for ln in lines) == ["alpha", "beta"]
    assert [ln.split(":", 1)[0] for ln in before] == ["alpha"]  # beta first seen in N
    assert_exactly_once(world, restarted, "v2", world.expected("alpha", "beta"))
    path = world.checkpoint("v2")
    assert world.remote("beta").encode() in start_file(path, "beta")
    assert start_file(path, "alpha") == start_file(untouched, "alpha")  # not read: kept


@pytest.mark.slow
def test_a_union_with_a_source_on_a_third_cluster(world, restarted):
    assert world.outcome["union-src"] is None, world.outcome
    untouched = world.checkpoint("union", "untouched")
    refused = restarted["migrate"]["union-all"]
    assert refused.code == 1, refused.stdout + refused.stderr
    said = refused.stderr.strip().splitlines()[-1]
    assert "source 1 does not fit the source cluster" in said, refused.stderr[-1500:]
    assert "--sources 0" in said
    # The plan listed both sources with their topics (the same name).
    assert f"source 0: {world.topic('mine')}" in refused.stderr
    assert f"source 1: {world.topic('mine')}" in refused.stderr
    result = restarted["migrate"]["union"]
    assert result.code == 0, result.stderr[-2000:]
    path = world.checkpoint("union")
    for batch in ids(untouched, "offsets")[-2:]:
        new = (path / "offsets" / str(batch)).read_text().split("\n")
        old = (untouched / "offsets" / str(batch)).read_text().split("\n")
        assert list(json.loads(new[2])) == [world.remote("mine")]
        assert new[3] == old[3]  # the third cluster's source: byte for byte
    assert start_file(path, "1") == start_file(untouched, "1")
    expected = world.expected("mine", third=True)
    assert_exactly_once(world, restarted, "union", expected)
