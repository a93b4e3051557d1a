"""`lag-status` held to Burrow 1.2.1 (Debian's `burrow`) on the same groups; docs/conformance.md
is the table this checks.

Burrow cannot talk to Kafka 4 (ferry.testing.burrow), so this one suite runs on its own Apache
Kafka 3.9 cluster (KRaft). Live consumers commit once a round while their topic grows; after
every round's commits Ferry's `lag-snapshot` runs, so both see the same offsets on the same
schedule: Burrow through `__consumer_offsets` (commit times), Ferry through its snapshots.
With Burrow's `intervals` equal to Ferry's `--window` the statuses agree per group and
partition. Burrow judges by the wall clock (STOP: now − last commit > last − first commit), so
the scenario waits, bounded, until that holds before comparing.
"""

from __future__ import annotations

import json
import textwrap
import time

import pytest
from confluent_kafka import Consumer, TopicPartition

from ferry.testing.artifacts import KAFKA_39
from ferry.testing.brokers import start_broker
from ferry.testing.burrow import start_burrow
from ferry.testing.produce import Record, create_topics, produce

from .jobrunner import run_job

pytestmark = [pytest.mark.integration, pytest.mark.slow]

WINDOW = 4  # Burrow's intervals and Ferry's --window
ROUNDS = 8
GROWTH = 4  # records added to topic t before every round after the first; it starts at 10
ENDS = [10 + GROWTH * r for r in range(ROUNDS)]  # 10, 14, ..., 38
PLANS = {  # group -> committed offset of t[0] per round (None: the consumer has left)
    # lags 8, 10, 10, 10, 8, 6, 4, 0: catches up -> OK
    "catchup": [2, 4, 8, 12, 18, 24, 30, 38],
    # lags 9, 12, ..., 30: advancing but falling behind -> WARN
    "lagging": [1, 2, 3, 4, 5, 6, 7, 8],
    # committing, never moving, lag growing -> STALL
    "stall": [3] * ROUNDS,
    # commits STOP_BURST in the first round, then its consumer stops (leaves the group) -> STOP
    "stop": [8, None, None, None, None, None, None, None],
    # the last window 21, 25, 9, 12: went back -> REWIND
    "rewind": [5, 9, 13, 17, 21, 25, 9, 12],
}
# The stopped group's commits, a little over a second apart (Burrow keeps one commit per
# `min-distance`, 1 s): its window spans ~4 s, so by the end "now - last > last - first" holds
# for it, while the groups committing every round (a window of 3 rounds) are evaluated within
# one round of their last commit and are not STOP.
STOP_BURST = [2, 4, 6, 8]
EXPECTED = {
    "catchup": ("OK", "OK"),
    "lagging": ("WARN", "WARN"),
    "stall": ("STALL", "ERR"),
    "stop": ("STOP", "ERR"),
    "rewind": ("REWIND", "ERR"),
}


def records(start: int, count: int) -> list[Record]:
    now = int(time.time() * 1000)
    return [Record(b"k", f"t-{i}".encode(), now) for i in range(start, start + count)]


def join(config: dict, group: str, topic: str) -> Consumer:
    consumer = Consumer(
        {
            **config,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            # Generous: the consumers poll only once a round, and a round on a busy machine
            # can take long; the stopped one leaves by closing, not by timing out.
            "session.timeout.ms": 30000,
            "max.poll.interval.ms": 900000,
        }
    )
    consumer.subscribe([topic])
    return consumer


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("burrow")
    broker = start_broker("kafka39", artifacts=KAFKA_39)
    try:
        u = f"bw{int(time.time() * 1000) % 10**8}"
        topic = f"{u}-t"
        create_topics(broker.config, {topic: 1})
        produce(broker.config, topic, 0, records(0, ENDS[0]))
        config = tmp / "lag.yaml"
        config.write_text(
            textwrap.dedent(
                f"""\
                cluster:
                  bootstrap.servers: {broker.bootstrap}
                reader:
                  timeout_ms: 10000
                history:
                  path: {tmp / "history"}
                  window: {WINDOW}
                """
            )
        )
        with start_burrow(broker.bootstrap, WINDOW, f"^{u}-.*$") as burrow:
            group = {name: f"{u}-{name}" for name in PLANS}
            consumers = {n: join(broker.config, g, topic) for n, g in group.items()}
            try:
                deadline = time.monotonic() + 30
                while not all(c.assignment() for c in consumers.values()):
                    assert time.monotonic() < deadline, "test consumers did not join"
                    for consumer in consumers.values():
                        consumer.poll(0.05)
                for r in range(ROUNDS):
                    if r > 0:
                        produce(broker.config, topic, 0, records(ENDS[r - 1], GROWTH))
                        # Burrow reads log ends every second: let it see this round's before
                        # the commits it computes lag for.
                        time.sleep(2.5)
                    for consumer in consumers.values():
                        consumer.poll(0)  # keeps each a member (no record is used)
                    for name, plan in PLANS.items():
                        if plan[r] is None:
                            if name in consumers:
                                consumers.pop(name).close()  # leaves the group
                            continue
                        burst = STOP_BURST if name == "stop" else [plan[r]]
                        for i, offset in enumerate(burst):
                            if i:
                                time.sleep(1.2)
                            consumers[name].commit(
                                offsets=[TopicPartition(topic, 0, offset)], asynchronous=False
                            )
                    result = run_job(
                        "lag-snapshot", "--config", str(config), "--group", f"{u}-.*", "--quiet"
                    )
                    assert result.code == 0, result.stderr
                answers = _burrow_answers(burrow, group)
            finally:
                for consumer in consumers.values():
                    consumer.close()
        yield {"u": u, "topic": topic, "group": group, "config": str(config), "burrow": answers}
    finally:
        broker.stop()


def _burrow_answers(burrow, group: dict[str, str]) -> dict[str, dict]:
    """Each group's `/lag` answer once Burrow has every group's last commit in its window
    (it reads `__consumer_offsets` asynchronously), or after 60 s."""
    last = {name: [o for o in plan if o is not None][-1] for name, plan in PLANS.items()}
    deadline = time.monotonic() + 60
    while True:
        answers = {name: burrow.status(g) for name, g in group.items()}
        seen = {
            name: [p["end"]["offset"] for p in a.get("partitions") or [] if p.get("end")]
            for name, a in answers.items()
        }
        if all(seen[n] == [last[n]] for n in PLANS) or time.monotonic() > deadline:
            return answers
        time.sleep(1)


def test_lag_status_agrees_with_burrow(world):
    result = run_job(
        "lag-status", "--config", world["config"], "--quiet", "--window", str(WINDOW),
        "--group", f"{world['u']}-.*", "--all-partitions", "-o", "json",
    )  # fmt: skip
    assert result.code == 0, result.stderr
    ours = {a["status"]["group"]: a["status"] for a in json.loads(result.stdout)}
    for name, (partition_status, group_status) in EXPECTED.items():
        theirs = world["burrow"][name]
        mine = ours[world["group"][name]]
        assert [p["status"] for p in theirs["partitions"]] == [partition_status], (name, theirs)
        assert [p["status"] for p in mine["partitions"]] == [partition_status], (name, mine)
        assert theirs["status"] == mine["status"] == group_status, name
        t, m = theirs["partitions"][0], mine["partitions"][0]
        assert m["current_lag"] == t["current_lag"], name
        assert mine["totallag"] == theirs["totallag"], name
        assert (mine["complete"], theirs["complete"]) == (1.0, 1.0), name
        if name == "stop":
            continue
        # A group committing every round: the same window, offsets and lags at both ends.
        for end in ("start", "end"):
            assert (m[end]["offset"], m[end]["lag"]) == (t[end]["offset"], t[end]["lag"]), name
    # A stopped group's window: Burrow's is its last commits (lags as they were then),
    # Ferry's its last snapshots of the one offset it stopped at (lags as they grew since).
    t, m = world["burrow"]["stop"]["partitions"][0], ours[world["group"]["stop"]]["partitions"][0]
    assert (t["start"]["offset"], t["end"]["offset"]) == (STOP_BURST[0], STOP_BURST[-1])
    assert (m["start"]["offset"], m["end"]["offset"]) == (STOP_BURST[-1], STOP_BURST[-1])
    assert (t["end"]["lag"], m["end"]["lag"]) == (ENDS[0] - 8, ENDS[-1] - 8)
