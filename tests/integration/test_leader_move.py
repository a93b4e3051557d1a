"""A partition leader moving mid-run on a three-node Apache Kafka cluster: `migrate --execute`
and `lag-snapshot` finish exact, exit 0.

The source is a three-node KRaft cluster (topics replicated three ways). Every scenario puts
the leaders of the partitions it reads, and the coordinator of its first group, on one node,
and stops that node while the job runs: mid-read (armed in the read loop: after the first
records of the moving cluster arrived, the read goes on once the node is down) or between
stages (after discovery, after the group listing; the job goes on while the node stops).
Killed (SIGKILL: the controller notices after `broker.session.timeout.ms`, 9 s, and only then
elects new leaders) or stopped gracefully (a controlled shutdown hands leadership over
first). The node is started again after each scenario.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import yaml
from confluent_kafka.admin import AdminClient

import ferry.migrate
from ferry import kafka
from ferry.groups import selection
from ferry.kafka import reader
from ferry.testing.brokers import start_broker
from ferry.testing.produce import Record, commit_offsets, create_topics, produce

from .jobrunner import group_statuses, run_job, write_migrate_config

pytestmark = [pytest.mark.integration, pytest.mark.faults]

BASE = 1_760_000_000_000
PARTITIONS = 3
N = 200
VALUE = 2000  # bytes: records of ~2 KB in small batches, so a read takes many fetches
# Records are produced in batches of about two, and the moving cluster's client properties
# (passed through to the reading consumer) make each fetch bring about one batch per
# partition and the consumer fetch ahead no more than one response: a read of a few hundred
# records is many fetches, and the node is stopped between them, not after the consumer has
# every record in its queue.
SMALL_BATCHES = {"batch.size": 4096}
SMALL_FETCHES = {
    "max.partition.fetch.bytes": 4096,
    "fetch.max.bytes": 16384,
    "message.max.bytes": 16384,
    "queued.min.messages": 1,
    "queued.max.messages.kbytes": 1,
    "fetch.queue.backoff.ms": 0,  # fetch again as soon as the queue has room (default 1 s)
}
AFTER_STOP = 50  # records a mid-read stop must leave to read (many more than the queue holds)


@pytest.fixture(scope="module")
def brokers():
    """A three-node source cluster and a one-node destination, started together."""
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = [
            pool.submit(start_broker, "moving", nodes=3),
            pool.submit(start_broker, "steady"),
        ]
    started = [f.result() for f in futures if f.exception() is None]
    try:
        assert len(started) == 2, [f.exception() for f in futures]
        # A first commit creates `__consumer_offsets` (retried while it loads), so that the
        # coordinator of a new group can be asked at once.
        create_topics(started[0].config, {"seed": 1})
        commit_offsets(started[0].config, "seed", {("seed", 0): 0})
        yield tuple(started)
    finally:
        for broker in started:
            broker.stop()


def records(tag: str, partition: int) -> list[Record]:
    pad = b"x" * VALUE
    return [
        Record(f"k{i % 7}".encode(), f"{tag}-{partition}-{i}".encode() + pad, BASE + i * 10)
        for i in range(N)
    ]


def leaders(config: dict, topic: str) -> set[int]:
    meta = AdminClient({**config, "log_level": 0}).list_topics(topic, timeout=10)
    return {p.leader for p in meta.topics[topic].partitions.values()}


def coordinator(config: dict, group: str) -> int:
    """The node coordinating `group` (the leader of its `__consumer_offsets` partition); a
    fresh cluster creates that topic on the first ask and answers "not available" meanwhile."""
    admin = AdminClient({**config, "log_level": 0})
    deadline = time.monotonic() + 30
    while True:
        try:
            answer = admin.describe_consumer_groups([group])[group].result(timeout=30)
            return answer.coordinator.id
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def world(moving, steady, unique: str) -> tuple[str, int]:
    """A topic of 3 partitions on the moving cluster whose leaders, and the coordinator of
    the scenario's first group, are one node (returned); the steady destination holds a copy
    from offset 20."""
    topic = f"{unique}-t"
    node = coordinator(moving.config, f"{unique}-a")
    others = [n.node_id for n in moving.nodes if n.node_id != node]
    create_topics(moving.config, {topic: PARTITIONS}, replicas={topic: [[node, *others]] * 3})
    create_topics(steady.config, {topic: PARTITIONS})
    for p in range(PARTITIONS):
        recs = records(topic, p)
        produce({**moving.config, **SMALL_BATCHES}, topic, p, recs)
        produce(steady.config, topic, p, recs[20:])
    assert leaders(moving.config, topic) == {node}
    return topic, node


class Stopper:
    """Stops one node of the moving cluster once, in a thread, when `fire` is called."""

    def __init__(self, broker, node: int, graceful: bool) -> None:
        self.broker, self.node, self.graceful = broker, node, graceful
        self.thread: threading.Thread | None = None

    def fire(self) -> None:
        if self.thread is None:
            self.thread = threading.Thread(
                target=self.broker.stop_node, args=(self.node, self.graceful)
            )
            self.thread.start()

    def restart(self) -> None:
        assert self.thread is not None, "the node was never stopped"
        self.thread.join()
        self.broker.start_node(self.node)


def arm_mid_read(monkeypatch, moving, stopper: Stopper) -> dict:
    """Stop the node as soon as a read of the moving cluster has yielded its first records,
    and go on reading once it is down; counts what that read yields afterwards."""
    original = reader.RangeReader.read
    seen = {"after": 0}

    def read(self, ranges, **kwargs):  # noqa: ANN001, ANN202
        is_moving = self.cluster.conf.get("bootstrap.servers") == moving.bootstrap
        for item in original(self, ranges, **kwargs):
            if is_moving and stopper.thread is not None:
                seen["after"] += len(item[1])
            yield item
            if is_moving and stopper.thread is None:
                stopper.fire()
                stopper.thread.join()

    monkeypatch.setattr(reader.RangeReader, "read", read)
    return seen


def arm_after(monkeypatch, owner, name: str, stopper: Stopper) -> None:
    """Stop the node right after `owner.name` (a stage of the job) returns."""
    original = getattr(owner, name)

    def stage(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        out = original(*args, **kwargs)
        stopper.fire()
        return out

    monkeypatch.setattr(owner, name, stage)


@pytest.mark.parametrize("how", ["killed mid-read", "stopped after discovery"])
def test_migrate_finishes_exact_when_the_source_leader_moves(
    brokers, tmp_path, unique, monkeypatch, how
):
    moving, steady = brokers
    topic, node = world(moving, steady, unique)
    sources = {
        f"{unique}-a": {(topic, 0): 60, (topic, 1): 120, (topic, 2): 180},
        f"{unique}-b": {(topic, 0): 150, (topic, 1): 40},
    }
    for group, offsets in sources.items():
        commit_offsets(moving.config, group, offsets)
    config = write_migrate_config(
        tmp_path,
        moving,
        steady,
        unique,
        source=SMALL_FETCHES,
        reader={"timeout_ms": 30000},
        matching={"context": 100},  # the source read: every record of the partitions
    )
    stopper = Stopper(moving, node, graceful=how.startswith("stopped"))
    if how == "killed mid-read":
        seen = arm_mid_read(monkeypatch, moving, stopper)
    else:
        seen = None
        arm_after(monkeypatch, ferry.migrate, "discover", stopper)
    try:
        started = time.monotonic()
        run = run_job("migrate", "--config", config, "--execute", "-o", "json", "--quiet")
        took = time.monotonic() - started
        assert stopper.thread is not None, "the node was not stopped"
        stopper.thread.join()
        assert run.code == 0, run.stderr
        assert node not in leaders(moving.config, topic)
    finally:
        monkeypatch.undo()
        if stopper.thread is not None:
            stopper.restart()
    assert set(group_statuses(run).values()) == {"COMMITTED"}, run.stdout
    if seen is not None:
        assert seen["after"] > AFTER_STOP, f"only {seen['after']} records read after the stop"
    steady_cluster = kafka.Cluster("d", steady.config)
    got = kafka.committed_offsets(steady_cluster, list(sources))
    for group, offsets in sources.items():
        assert got[group] == {tp: o - 20 for tp, o in offsets.items()}, (group, took)


@pytest.mark.parametrize("how", ["stopped mid-read", "killed after the group listing"])
def test_lag_snapshot_finishes_exact_when_the_leader_moves(
    brokers, tmp_path, unique, monkeypatch, spark, how
):
    moving, steady = brokers
    topic, node = world(moving, steady, unique)
    # Positions far apart on a partition are read as one span: many fetches.
    offsets = {
        f"{unique}-a": {(topic, 0): 5, (topic, 1): 8, (topic, 2): N},
        f"{unique}-b": {(topic, 0): 190, (topic, 1): 195, (topic, 2): 12},
    }
    for group, committed in offsets.items():
        commit_offsets(moving.config, group, committed)
    config = tmp_path / "lag.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "cluster": {"bootstrap.servers": moving.bootstrap, **SMALL_FETCHES},
                "reader": {"timeout_ms": 30000},
                "history": {"path": str(tmp_path / "history")},
            }
        )
    )
    stopper = Stopper(moving, node, graceful=how.startswith("stopped"))
    if how == "stopped mid-read":
        seen = arm_mid_read(monkeypatch, moving, stopper)
    else:
        seen = None
        arm_after(monkeypatch, selection, "matching_groups", stopper)
    try:
        before = int(time.time() * 1000)
        run = run_job("lag-snapshot", "--config", config, "--group", f"{unique}-.*", "--quiet")
        after = int(time.time() * 1000)
        assert stopper.thread is not None, "the node was not stopped"
        stopper.thread.join()
        assert run.code == 0, run.stderr
        assert node not in leaders(moving.config, topic)
        assert coordinator(moving.config, f"{unique}-a") != node
    finally:
        monkeypatch.undo()
        if stopper.thread is not None:
            stopper.restart()
    if seen is not None:
        assert seen["after"] > AFTER_STOP, f"only {seen['after']} records read after the stop"
    from ferry.lag import history

    rows = [r.asDict() for r in history.read_history(spark, str(tmp_path / "history")).collect()]
    assert len(rows) == 6, rows
    for row in rows:
        c = offsets[row["group"]][(row["topic"], row["partition"])]
        where = (row["group"], row["partition"])
        assert row["committed_offset"] == c, where
        assert (row["log_start_offset"], row["log_end_offset"], row["lag"]) == (0, N, N - c), where
        if c == N:
            assert row["time_lag_ms"] == 0, where
        else:
            ts = BASE + c * 10  # the next record's timestamp
            assert before - ts <= row["time_lag_ms"] <= after - ts, where
        assert row["group_state"] == "EMPTY", where
