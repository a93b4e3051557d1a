"""The first `migrate --execute` against a destination cluster started for the purpose (issue
38): no warm-up, no earlier client, no group ever committed there — `__consumer_offsets` does
not exist until the run's first coordinator lookup creates it, and its coordinators answer
NOT_COORDINATOR while they load, the answer on which librdkafka's AdminClient crashes an
offset fetch (librdkafka issue 5040). Every run must exit 0 and move every group exactly.

- back-to-back first runs against newly started destinations, beside CPU busy loops, and no
  worker crash at all (the fetch waits for its coordinators first);
- a coordinator that does not answer for several seconds, staged by the fault proxy answering
  the destination's group reads NOT_COORDINATOR (describes and offset fetches, or offset
  fetches only: the crash itself, on the wire), is waited out within `admin.retry_ms`; past
  the budget the run fails with one line naming the cluster and the call;
- the coordinator's broker of a three-node destination restarted while discovery runs.

Marked `faults`: each scenario starts destination clusters of its own (and the first keeps
the machine busy on purpose), which `make test` cannot afford; they are broker faults.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import pytest
from confluent_kafka.admin import AdminClient

from ferry.kafka import isolated
from ferry.kafka.coordinators import OFFSETS_TOPIC, partition_for
from ferry.testing.brokers import start_broker
from ferry.testing.produce import Record, commit_offsets, create_topics, produce
from ferry.testing.proxy import API_CONSUMER_GROUP_DESCRIBE, API_OFFSET_FETCH, NOT_COORDINATOR
from ferry.testing.replicate import committed_offsets

from .jobrunner import run_job, write_migrate_config

pytestmark = [pytest.mark.integration, pytest.mark.faults]

BASE = 1_760_000_000_000
N = 40  # records per partition on the source
START = 10  # the destination holds the source's records from this offset: dst = src - 10
ROUNDS = 2  # fresh destinations in a row: each one crashed the old fetch (see docs/kafka.md)
BUSY_LOOPS = 1  # half the machine: with 2 or 4 the one-node brokers starved (below)
HOLD_S = 15.0  # how long a staged coordinator does not answer (five back-to-back
# attempts of the old worker took up to 8 s on a loaded machine)
RETRY_MS = 40_000  # admin.retry_ms of the runs that wait it out
BUDGET_MS = 16_000  # admin.retry_ms of the runs that do not
READ_MS = 120_000  # reader.timeout_ms of the runs beside the busy loops


@pytest.fixture(scope="module")
def source():
    broker = start_broker("fresh-source")
    try:
        yield broker
    finally:
        broker.stop()


def prepare(src, dst, prefix: str) -> dict[str, dict[tuple[str, int], int]]:
    """A topic of two partitions on both clusters (the destination replicated from offset
    10, written by a plain producer: no group client) and three stopped groups on the source;
    returns each group's expected destination offsets."""
    topic = f"{prefix}-t"
    create_topics(src.config, {topic: 2})
    create_topics(dst.config, {topic: 2})
    for p in range(2):
        records = [
            Record(f"k{i % 5}".encode(), f"{topic}-{p}-{i}".encode(), BASE + i * 10)
            for i in range(N)
        ]
        produce(src.config, topic, p, records)
        produce(dst.config, topic, p, records[START:])
    expected = {}
    for i, (a, b) in enumerate([(15, 20), (30, 12), (40, 33)]):
        group = f"{prefix}-g{i}"
        commit_offsets(src.config, group, {(topic, 0): a, (topic, 1): b})
        expected[group] = {(topic, 0): a - START, (topic, 1): b - START}
    return expected


def migrate(  # noqa: ANN201
    tmp_path, src, dst, prefix: str, retry_ms: int = RETRY_MS, **sections: dict
):
    tmp_path.mkdir(parents=True, exist_ok=True)
    config = write_migrate_config(
        tmp_path, src, dst, prefix, admin={"timeout_ms": 5000, "retry_ms": retry_ms}, **sections
    )
    return run_job("migrate", "--config", config, "--execute", "--quiet")


def assert_exact(dst, expected: dict) -> None:
    for group, offsets in expected.items():
        assert committed_offsets(dst.config, group) == offsets, group


def refusal_clock(proxy) -> list[float]:  # noqa: ANN001 - a FaultProxy
    """A list that receives the moment the proxy first answers a request with an error."""
    seen: list[float] = []

    def watch() -> None:
        deadline = time.monotonic() + 600
        while not proxy.refused and time.monotonic() < deadline:
            time.sleep(0.02)
        seen.append(time.monotonic())

    threading.Thread(target=watch, daemon=True).start()
    return seen


def broker_state(broker) -> str:  # noqa: ANN001 - a LocalBroker
    """Whether the broker's process still runs, and its log's last lines: what a failed run
    met (a read once went unanswered for 120 s, "1/1 brokers are down")."""
    node = broker.nodes[0]
    state = "running" if node.is_running() else f"exited {node.process.returncode}"
    try:
        tail = broker.log_path.read_text(errors="replace").splitlines()[-15:]
    except OSError as e:
        tail = [f"(no log: {e})"]
    return "\n".join([f"broker {state}", *tail])


def busy_loops(n: int, seconds: float) -> list[subprocess.Popen]:
    """`n` processes spinning a CPU each, every one ending by itself after `seconds`."""
    spin = f"import time\nend = time.time() + {seconds}\nwhile time.time() < end:\n    pass\n"
    return [subprocess.Popen([sys.executable, "-c", spin]) for _ in range(n)]


def test_first_runs_on_fresh_destinations_beside_busy_loops(source, tmp_path):
    for round_ in range(ROUNDS):
        # The loops start once the world is ready: what they slow down is the first run's
        # coordinator load, not the test's own set-up. 4, then 2, loops on 2 cores starved
        # the one-node brokers themselves in whole-suite runs (a controller event took 8.7 s):
        # a new broker silent for 90 s, reads unanswered for 30 and 120 s, a coordinator
        # silent for 40 s, a leader epoch fenced, a crash after every coordinator answered.
        # Without the wait for coordinators the test fails with no loops at all.
        dst = start_broker(f"fresh-dst{round_}")
        loops: list[subprocess.Popen] = []
        try:
            prefix = f"fr{round_}-{int(time.time() * 1000) % 10**8}"
            expected = prepare(source, dst, prefix)
            loops = busy_loops(BUSY_LOOPS, 420)
            crashed = len(isolated.crashes())
            # Reads get the patience of a starved machine: beside the loops a fresh broker
            # once left a 30-record read without a fetch answer for the default 30 s (exit 1,
            # "timed out ... reading"). What is under test is the coordinator load.
            result = migrate(
                tmp_path / f"r{round_}", source, dst, prefix, reader={"timeout_ms": READ_MS}
            )
            assert result.code == 0, (round_, result.stderr, broker_state(dst))
            assert_exact(dst, expected)
            # The fetch waited for its coordinators: the client never met the crash.
            assert isolated.crashes()[crashed:] == [], round_
        finally:
            for loop in loops:
                loop.kill()
                loop.wait()
            dst.stop()


@pytest.mark.parametrize(
    "refused",
    [(API_CONSUMER_GROUP_DESCRIBE, API_OFFSET_FETCH), (API_OFFSET_FETCH,)],
    ids=["group-reads", "offset-fetch-only"],
)
def test_a_coordinator_not_answering_for_seconds_is_waited_out(source, tmp_path, refused):
    dst = start_broker("held-dst", proxied=True)
    try:
        prefix = f"held-{int(time.time() * 1000) % 10**8}"
        expected = prepare(source, dst, prefix)
        for api_key in refused:
            dst.proxy.refuse(api_key, NOT_COORDINATOR)
        threading.Timer(HOLD_S, dst.proxy.allow).start()
        crashed = len(isolated.crashes())
        started = time.monotonic()
        result = migrate(tmp_path, source, dst, prefix)
        assert result.code == 0, result.stderr
        assert time.monotonic() - started >= HOLD_S
        assert_exact(dst, expected)
        assert dst.proxy.refused.get(API_OFFSET_FETCH, 0) > 0 or len(refused) == 2
        crashes = isolated.crashes()[crashed:]
        if API_CONSUMER_GROUP_DESCRIBE in refused:
            # The describes were answered "not coordinator" and waited for: no fetch crashed.
            assert dst.proxy.refused[API_CONSUMER_GROUP_DESCRIBE] > 1 and crashes == []
        else:
            # Only the fetch is refused: it crashes the worker, again and again, with backoff.
            assert crashes and set(crashes) == {"exit -11"}, crashes
    finally:
        dst.stop()


@pytest.mark.parametrize(
    "refused",
    [(API_CONSUMER_GROUP_DESCRIBE, API_OFFSET_FETCH), (API_OFFSET_FETCH,)],
    ids=["group-reads", "offset-fetch-only"],
)
def test_a_coordinator_not_answering_past_the_budget_fails_in_one_line(source, tmp_path, refused):
    dst = start_broker("gone-dst", proxied=True)
    try:
        prefix = f"gone-{int(time.time() * 1000) % 10**8}"
        expected = prepare(source, dst, prefix)
        for api_key in refused:
            dst.proxy.refuse(api_key, NOT_COORDINATOR)
        first_refusal = refusal_clock(dst.proxy)
        result = migrate(tmp_path, source, dst, prefix, retry_ms=BUDGET_MS)
        ended = time.monotonic()
        errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
        assert result.code == 1, result.stderr
        assert len(errors) == 1 and "Traceback" not in result.stderr, result.stderr
        assert errors[0].startswith(
            f"error: destination ({dst.bootstrap}): fetch committed offsets "
        ), errors[0]
        if API_CONSUMER_GROUP_DESCRIBE in refused:  # the wait for the coordinators ran out
            assert "not answering) failed (retried for 16s): " in errors[0], errors[0]
            assert errors[0].endswith("Broker: Not coordinator"), errors[0]
        else:  # the fetch itself crashed until the budget was spent
            assert "failed (retried for 16s): the Kafka client crashed" in errors[0], errors[0]
        # It kept asking until the budget was spent, not five times back to back. The budget
        # starts with the fetch call, before the worker has started and the fresh cluster's
        # topic exists (up to 6 s on a loaded machine), the first refusal after that.
        assert first_refusal and ended - first_refusal[0] >= BUDGET_MS / 2000
        dst.proxy.allow()
        assert all(committed_offsets(dst.config, g) == {} for g in expected)
    finally:
        dst.stop()


def test_the_coordinators_broker_restarted_mid_discovery_on_three_nodes(source, tmp_path):
    dst = start_broker("restarted-dst", nodes=3)
    try:
        prefix = f"rs-{int(time.time() * 1000) % 10**8}"
        expected = prepare(source, dst, prefix)
        first_group = sorted(expected)[0]
        outcome: list = []
        job = threading.Thread(
            target=lambda: outcome.append(migrate(tmp_path, source, dst, prefix)), daemon=True
        )
        job.start()
        # The run's first coordinator lookup creates `__consumer_offsets` (metadata requests
        # do not): stop the node that leads its first group's partition at that moment.
        admin = AdminClient({**dst.config, "log_level": 0})
        deadline = time.monotonic() + 120
        leader = None
        while leader is None and time.monotonic() < deadline and job.is_alive():
            topic = admin.list_topics(topic=OFFSETS_TOPIC, timeout=5).topics.get(OFFSETS_TOPIC)
            if topic is not None and topic.error is None and topic.partitions:
                partition = topic.partitions[partition_for(first_group, len(topic.partitions))]
                leader = partition.leader if partition.leader >= 0 else None
            else:
                time.sleep(0.05)
        assert leader is not None, "the run never looked up a coordinator"
        dst.stop_node(leader)  # a controlled shutdown: its coordinators move to the others
        dst.start_node(leader)
        job.join(300)
        assert outcome and outcome[0].code == 0, outcome and outcome[0].stderr
        assert_exact(dst, expected)
        # The broker's own coordinator for each group is the leader of `partition_for`'s
        # partition (the rule the fetch waits by).
        leaders = {
            p: m.leader
            for p, m in admin.list_topics(topic=OFFSETS_TOPIC, timeout=10)
            .topics[OFFSETS_TOPIC]
            .partitions.items()
        }
        described = admin.describe_consumer_groups(sorted(expected), request_timeout=10)
        for group, future in described.items():
            assert future.result().coordinator.id == leaders[partition_for(group, len(leaders))]
    finally:
        dst.stop()
