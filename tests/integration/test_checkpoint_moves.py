"""`migrate --checkpoint` over several runs, judged by real Structured Streaming queries (Spark's
own Kafka connector, `ferry.testing.streaming`): a checkpoint moved A→B, run on B, then moved
back B→A (failback), and a run that found its query running while it wrote (aborted), then
the next scheduled run.

One world: two clusters, topics of the **same names** on both (MirrorMaker 2's
IdentityReplicationPolicy: only the run's records tell a translated file), records copied
between them by `ferry.testing.replicate` (keys chosen so that each record keeps its
partition, as MirrorMaker 2 does). `fb` (failback): B held 9 records of its own per partition
before the copies, so B's offsets are 9 higher than A's for A's records, and records produced
on B while the query ran there are copied back to A. `ab` (aborted run): B's copy lacks A's
first 6 records per partition (B's offsets 6 lower: the case where the query's source batch
goes on from the translation). Every record must reach the query's sink exactly once. Three
Spark applications: the queries on A; `fb` on B beside `ab` running on A (while Ferry
writes); both restarted at the end.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from ferry.testing.produce import Record, create_topics, produce
from ferry.testing.replicate import destination_partition, read_all, replicate
from ferry.testing.streaming import Query, run_queries, sink_values, start_running, stop_running

from .jobrunner import ROOT, JobResult, ledger_rows, run_job, write_migrate_config

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PARTITIONS = 2
FIRST = 30  # records per partition the query reads on A before the first move
OLD = 9  # fb: B's own records per partition before the copies (never the query's)
MISSING = 6  # ab: A's first records per partition B's copy lacks
KEYS = {  # four keys per partition that the default partitioner puts there
    p: [k for k in (f"k{i}".encode() for i in range(200)) if destination_partition(k, 2, 0) == p][
        :4
    ]
    for p in range(PARTITIONS)
}


def records(topic: str, origin: str, partition: int, start: int, n: int) -> list[Record]:
    """Records whose value names their topic, the cluster they were produced on, partition
    and number."""
    return [
        Record(KEYS[partition][i % 4], f"{topic}-{origin}-{partition}-{i}".encode())
        for i in range(start, start + n)
    ]


def produce_on(cluster, topic: str, origin: str, start: int, n: int) -> None:  # noqa: ANN001
    for p in range(PARTITIONS):
        produce(cluster.config, topic, p, records(topic, origin, p, start, n))


def copy(frm, to, topic: str, keep) -> None:  # noqa: ANN001
    """The records of `frm`'s topic that `keep(record)` selects, copied to `to`'s topic of the
    same name, each to its own partition, in order, timestamps kept."""
    chosen = [r for r in read_all(frm.config, topic) if keep(r)]
    mapping = replicate(frm.config, topic, to.config, topic, PARTITIONS, records=chosen)
    assert all(src[0] == dst[0] for src, dst in mapping.items()), "a record changed partition"


def value(r) -> str:  # noqa: ANN001 - a SourceRecord
    return (r.value or b"").decode()


class World:
    def __init__(self, a, b, tmp: Path) -> None:  # noqa: ANN001 - LocalBrokers
        stamp = int(time.time() * 1000) % 10**8
        self.a, self.b, self.tmp = a, b, tmp
        self.u = f"mv{stamp}"
        self.ledger = str(tmp / "ledger")
        self.configs = {}
        for name, (src, dst) in {"AB": (a, b), "BA": (b, a), "AA": (a, a)}.items():
            folder = tmp / f"config-{name}"
            folder.mkdir()
            self.configs[name] = write_migrate_config(
                folder, src, dst, self.u, ledger={"path": self.ledger}
            )

    def topic(self, short: str) -> str:
        return f"{self.u}-{short}"

    def checkpoint(self, short: str) -> Path:
        return self.tmp / short / "checkpoint"

    def query(self, short: str, on, **kwargs) -> Query:  # noqa: ANN001, ANN003
        return Query(
            name=f"{short}-{'A' if on is self.a else 'B'}-{len(kwargs)}",
            bootstrap=on.bootstrap,
            topic=self.topic(short),
            checkpoint=str(self.checkpoint(short)),
            sink=str(self.tmp / short / "sink"),
            max_offsets_per_trigger=20,
            **kwargs,
        )

    def migrate(self, config: str, short: str, *extra: str):  # noqa: ANN201
        return run_job(
            "migrate", "--config", self.configs[config], "--checkpoint",
            str(self.checkpoint(short)), "--idle", "0s", *extra,
        )  # fmt: skip


@pytest.fixture(scope="module")
def world(clusters, tmp_path_factory):
    a, b = clusters
    world = World(a, b, tmp_path_factory.mktemp("checkpoint-moves"))
    fb, ab = world.topic("fb"), world.topic("ab")
    create_topics(a.config, {fb: PARTITIONS, ab: PARTITIONS})
    create_topics(b.config, {fb: PARTITIONS, ab: PARTITIONS})
    produce_on(b, fb, "old", 0, OLD)
    produce_on(a, fb, "A", 0, FIRST)
    produce_on(a, ab, "A", 0, FIRST)
    copy(a, b, fb, lambda r: True)
    copy(a, b, ab, lambda r: r.offset >= MISSING)
    outcome = run_queries(world.tmp / "runs", [world.query("fb", a), world.query("ab", a)])
    assert set(outcome.values()) == {None}, outcome
    return world


def newest_positions(path: Path) -> tuple[int, dict[int, int]]:
    """The newest offsets file's batch and its one Kafka line's positions."""
    newest = max(int(p.name) for p in (path / "offsets").iterdir() if p.name.isdigit())
    line = (path / "offsets" / str(newest)).read_text().split("\n")[2]
    (parts,) = json.loads(line).values()
    return newest, {int(p): o for p, o in parts.items()}


def exactly_once(world: World, short: str, expected: Counter) -> None:
    seen = sink_values(str(world.tmp / short / "sink"))
    missing, repeated = expected - seen, seen - expected
    assert not missing and not repeated, (
        f"{sum(missing.values())} missing ({sorted(missing)[:4]}), "
        f"{sum(repeated.values())} repeated or foreign ({sorted(repeated)[:4]})"
    )


def caught_up(path: Path, ends: dict[int, int]):  # noqa: ANN201 - a condition
    """Whether the query's newest batch read to `ends` and is committed."""

    def done() -> bool:
        newest, positions = newest_positions(path)
        return positions == ends and (path / "commits" / str(newest)).exists()

    return done


def run_id(result: JobResult) -> str:
    """The run id a checkpoint run's summary names."""
    found = re.search(r"run (migrate-checkpoint-[^;\s]+)", result.stdout)
    return found.group(1) if found else "none"


def wait_for(what: str, done, alive=None, timeout_s: float = 300) -> None:  # noqa: ANN001
    deadline = time.monotonic() + timeout_s
    while not done():
        assert alive is None or alive(), f"stopped before {what}"
        assert time.monotonic() < deadline, f"no {what}"
        time.sleep(0.3)


def index(r) -> int:  # noqa: ANN001 - a SourceRecord
    """The record's number on the cluster it was produced on."""
    return int(value(r).rsplit("-", 1)[1])


def migrate_held(world: World, release: Path) -> subprocess.Popen:
    """`migrate --execute` A→B of `ab` in a process of its own, held after its first offsets
    file is rewritten until `release` exists (`ferry.write.kill_points.hold_point`)."""
    command = [
        sys.executable, str(ROOT / "jobs" / "migrate.py"), "--config", world.configs["AB"],
        "--checkpoint", str(world.checkpoint("ab")), "--idle", "0s", "--execute",
    ]  # fmt: skip
    env = {
        **os.environ,
        "FERRY_HOLD_AT": "checkpoint.file",
        "FERRY_HOLD_UNTIL": str(release),
        "FERRY_MASTER": "local[1]",
    }
    return subprocess.Popen(
        command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


@pytest.fixture(scope="module")
def moved(world):
    """Both stories up to the final restart (module docstring); what each run said."""
    a, b, fb, ab = world.a, world.b, world.topic("fb"), world.topic("ab")
    out: dict = {}
    # fb: A→B, then a config from A (the checkpoint is on B now)
    produce_on(a, fb, "A", FIRST, 10)
    copy(a, b, fb, lambda r: index(r) >= FIRST and "-A-" in value(r))
    out["there"] = world.migrate("AB", "fb", "--execute")
    if out["there"].code != 0:
        pytest.fail(f"A→B: exit {out['there'].code}: {out['there'].stderr[-2000:]}")
    out["elsewhere"] = world.migrate("AA", "fb")
    produce_on(b, fb, "B", 0, 8)  # produced on B while the query runs there
    ends = {p: OLD + FIRST + 10 + 8 for p in range(PARTITIONS)}
    ab_path = world.checkpoint("ab")
    # One application: fb's query on B reads what is there and stops; ab's runs on A.
    app = start_running(
        world.tmp / "runs",
        [world.query("fb", b, trigger="available_now"), world.query("ab", a, trigger="1")],
    )
    try:
        fb_path = world.checkpoint("fb")
        running = lambda: app.poll() is None  # noqa: E731
        wait_for("fb read to B's end", caught_up(fb_path, ends), running, timeout_s=900)
        produce_on(a, ab, "A", FIRST, 5)
        at = {p: FIRST + 5 for p in range(PARTITIONS)}
        wait_for("ab read to A's end", caught_up(ab_path, at), running)
        copy(a, b, ab, lambda r: index(r) >= FIRST)
        release = world.tmp / "release-ab"
        job = migrate_held(world, release)
        alive = lambda: job.poll() is None  # noqa: E731
        try:
            wait_for("the hold", Path(f"{release}.held").exists, alive, timeout_s=900)
        except AssertionError as exc:
            job.kill()
            raise AssertionError(f"{exc}: {job.communicate()[1][-3000:]}") from None
        produce_on(a, ab, "A", FIRST + 5, 5)  # the running query writes a batch now
        at = {p: FIRST + 10 for p in range(PARTITIONS)}
        wait_for("ab's batches during the write", caught_up(ab_path, at), running)
        release.touch()
        stdout, stderr = job.communicate(timeout=600)
        out["aborted"] = JobResult(job.returncode, stdout, stderr)
    finally:
        stop_running(app)
    # fb: B's own records copied back to A, then B→A with the config's clusters swapped
    produce_on(b, fb, "B", 8, 5)  # after the query stopped on B
    copy(b, a, fb, lambda r: "-B-" in value(r))
    out["on_b"] = newest_positions(world.checkpoint("fb"))[1]
    out["back"] = world.migrate("BA", "fb", "--execute")
    out["fb_translated"] = newest_positions(world.checkpoint("fb"))[1]
    out["back_again"] = world.migrate("BA", "fb", "--execute")
    for name, run in (("first", out["there"]), ("second", out["back"])):  # dry runs
        out[f"rollback_{name}"] = world.migrate("BA", "fb", "--rollback", run_id(run))
    # ab: the query stopped; the same command again
    copy(a, b, ab, lambda r: index(r) >= FIRST + 5)
    out["ab_on_a"] = newest_positions(ab_path)[1]  # where the query stopped on A
    out["ab_again"] = world.migrate("AB", "ab", "--execute")
    out["ab_translated"] = newest_positions(ab_path)[1]
    produce_on(a, ab, "A", FIRST + 10, 4)
    copy(a, b, ab, lambda r: index(r) >= FIRST + 10)
    to_run = [world.query("fb", a), world.query("ab", b)]
    out["restarted"] = run_queries(world.tmp / "runs", to_run)
    return out


def test_failback_a_to_b_to_a_delivers_every_record_exactly_once(world, moved):
    """A→B (exact), the query runs on B (on A's records copied there and B's own), then B→A
    with the config's clusters swapped: translated from the positions the query reached on B.
    Before, the second run read the first run's translation under the newer batches as "the
    query ran on the translation": exit 0, ALREADY_MIGRATED, B's offsets left for A."""
    there, elsewhere = moved["there"], moved["elsewhere"]
    assert there.code == 0, there.stdout + there.stderr
    assert moved["on_b"] == {p: OLD + FIRST + 10 + 8 for p in range(PARTITIONS)}
    back = moved["back"]
    said = back.stdout + back.stderr
    assert back.code == 0, said
    assert "ALREADY_MIGRATED" not in back.stdout, f"B's offsets left for A: {said[-1500:]}"
    # the next record on B (B's 9th own record) is at FIRST + 10 + 8 on A
    assert moved["fb_translated"] == {p: FIRST + 10 + 8 for p in range(PARTITIONS)}, said
    # The checkpoint was on B after the first move: a config from A was refused, one line.
    assert elsewhere.code == 1, elsewhere.stdout + elsewhere.stderr
    assert "not where the checkpoint is" in elsewhere.stderr, elsewhere.stderr
    again = moved["back_again"]
    assert again.code == 0 and "ALREADY_MIGRATED" in again.stdout, again.stdout + again.stderr
    # --rollback: the newest run first (the first run's originals under the second's would
    # mix two moves)
    first, second = moved["rollback_first"], moved["rollback_second"]
    assert first.code == 1 and "roll it back first" in first.stderr, first.stdout + first.stderr
    assert second.code == 0 and "would be restored" in second.stdout, second.stderr
    assert moved["restarted"]["fb-A-0"] is None, moved["restarted"]
    fb = world.topic("fb")
    # A's own records and B's copied back: every record once
    expected = Counter((r.key.decode(), value(r)) for r in read_all(world.a.config, fb))
    assert sum(expected.values()) == PARTITIONS * (FIRST + 10 + 8 + 5)
    exactly_once(world, "fb", expected)


def test_an_aborted_run_then_the_next_scheduled_run_translates_afresh(world, moved):
    """The query runs on A while Ferry writes: a batch appears, the originals go back, exit 1,
    the run marked aborted in its folder and the ledger. The query stops; the same command
    again translates afresh (before: exit 0 ALREADY_MIGRATED over source offsets, the aborted
    run's `ready` read as a translation) and the restarted query is exact."""
    aborted = moved["aborted"]
    assert aborted.code == 1, aborted.stdout + aborted.stderr
    assert "its query is running" in aborted.stderr, aborted.stderr[-1500:]
    again = moved["ab_again"]
    said = again.stdout + again.stderr
    assert "ALREADY_MIGRATED" not in again.stdout, f"source offsets left: {said[-1500:]}"
    assert again.code == 0, said
    # B's copy lacks A's first MISSING records: B's offsets are that much lower
    on_a = moved["ab_on_a"]
    assert moved["ab_translated"] == {p: o - MISSING for p, o in on_a.items()}, said
    path = world.checkpoint("ab")
    (run_id,) = [
        d.name
        for d in (path / "ferry").iterdir()
        if (d / "aborted").exists() and (d / "aborting").exists()
    ]
    statuses = {r["status"] for r in ledger_rows(world.ledger) if r["run_id"] == run_id}
    assert "ABORTED" in statuses and "COMMITTED" not in statuses, statuses
    assert moved["restarted"]["ab-B-0"] is None, moved["restarted"]
    ab = world.topic("ab")
    expected = Counter((r.key.decode(), value(r)) for r in read_all(world.a.config, ab))
    assert sum(expected.values()) == PARTITIONS * (FIRST + 14)
    exactly_once(world, "ab", expected)
