"""`lag-snapshot` and `lag-status` end to end on a real local broker.

One module-scoped scenario takes four snapshots while test consumers advance, fall behind,
stall, stop and rewind; the tests then evaluate that history in different ways. Snapshot
times come from the clock; every expected status holds whatever the gaps between snapshots
(see the per-group comments), so nothing sleeps.
"""

from __future__ import annotations

import json
import textwrap
import time

import pytest
from confluent_kafka import Consumer, TopicPartition

from ferry import delta
from ferry.lag import history
from ferry.testing.produce import Record, commit_offsets, create_topics, produce

from .jobrunner import run_job

pytestmark = pytest.mark.integration

BASE = int(time.time() * 1000) - 3_600_000  # record i of a partition is BASE + i seconds

# Committed offset per snapshot (4 snapshots); topic `t` (1 partition) grows 10, 14, 18, 22,
# each partition of `u` grows 10, 12, 14, 16, topic `q` stays at 5.
ACTIVE = {  # consumers that are members of their group and commit themselves
    # lags 8, 8, 6, 4: falling -> OK
    "ok": {("t", 0): [2, 6, 12, 18]},
    # lags 9, 12, 15, 18: progressing but never decreasing -> WARN
    "warn": {("t", 0): [1, 2, 3, 4]},
    # lags 7, 11, 15, 19 at one offset while committing -> STALL
    "stall": {("t", 0): [3, 3, 3, 3]},
    # p0 lags 8, 7, 6, 7 -> OK; p1 lags 9, 11, 13, 15 -> STALL; group ERR
    "mixed": {("u", 0): [2, 5, 8, 9], ("u", 1): [1, 1, 1, 1]},
}
INACTIVE = {  # Empty groups whose offsets are set from outside, like a stopped consumer
    # committed once before the first snapshot, never again: every entry keeps the first
    # snapshot's time, so "now - last > last - first" (x > 0) -> STOP
    "stop": {("t", 0): [5, None, None, None]},
    # 5, 9, 4, 6: the 9 -> 4 drop never recovers; each new offset is stamped with the
    # snapshot that saw it, so the last entry is "now" and it is not STOP -> REWIND
    "rewind": {("t", 0): [5, 9, 4, 6]},
    # caught up on a quiet topic: current lag 0 -> OK
    "idle": {("q", 0): [5, None, None, None]},
}
EXPECTED = {  # (group, topic, partition) -> status with --window 4
    ("ok", "t", 0): "OK",
    ("warn", "t", 0): "WARN",
    ("stall", "t", 0): "STALL",
    ("mixed", "u", 0): "OK",
    ("mixed", "u", 1): "STALL",
    ("stop", "t", 0): "STOP",
    ("rewind", "t", 0): "REWIND",
    ("idle", "q", 0): "OK",
}
GROUP_EXPECTED = {
    "ok": "OK",
    "warn": "WARN",
    "stall": "ERR",
    "mixed": "ERR",
    "stop": "ERR",
    "rewind": "ERR",
    "idle": "OK",
}
GROWTH = {"t": 4, "u": 2, "q": 0}  # records added to each partition before snapshots 2-4
INITIAL = {"t": 10, "u": 10, "q": 5}


def records(topic: str, start: int, count: int) -> list[Record]:
    return [
        Record(b"k", f"{topic}-{i}".encode(), BASE + i * 1000) for i in range(start, start + count)
    ]


def join(config: dict, group: str, topics: list[str]) -> Consumer:
    consumer = Consumer(
        {
            **config,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            # A short session: a consumer that stops leaves the group within seconds.
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 1000,
        }
    )
    consumer.subscribe(topics)
    return consumer


@pytest.fixture(scope="module")
def world(cluster, tmp_path_factory):
    u = f"lag{int(time.time() * 1000) % 10**8}"
    topics = {"t": f"{u}-t", "u": f"{u}-u", "q": f"{u}-q"}
    counts = {"t": 1, "u": 2, "q": 1}
    create_topics(cluster.config, {topics[k]: n for k, n in counts.items()})
    ends = {}
    for key, name in topics.items():
        for p in range(counts[key]):
            produce(cluster.config, name, p, records(key, 0, INITIAL[key]))
            ends[(key, p)] = [INITIAL[key]]
    tmp = tmp_path_factory.mktemp("lag")
    config = tmp / "lag.yaml"
    config.write_text(
        textwrap.dedent(
            f"""\
            cluster:
              bootstrap.servers: {cluster.bootstrap}
            reader:
              timeout_ms: 10000
            history:
              path: {tmp / "history"}
              window: 10
            """
        )
    )
    group = {name: f"{u}-{name}" for name in (*ACTIVE, *INACTIVE)}
    consumers = {
        name: join(cluster.config, group[name], sorted({topics[t] for t, _ in plan}))
        for name, plan in ACTIVE.items()
    }
    snapshots = []
    try:
        deadline = time.monotonic() + 30
        while not all(c.assignment() for c in consumers.values()):
            assert time.monotonic() < deadline, "test consumers did not join"
            for consumer in consumers.values():
                consumer.poll(0.05)
        for i in range(4):
            if i > 0:
                for (key, p), history in ends.items():
                    produce(cluster.config, topics[key], p, records(key, history[-1], GROWTH[key]))
                    history.append(history[-1] + GROWTH[key])
            for name, plan in ACTIVE.items():
                offsets = [TopicPartition(topics[t], p, o[i]) for (t, p), o in plan.items()]
                consumers[name].commit(offsets=offsets, asynchronous=False)
            for name, plan in INACTIVE.items():
                offsets = {(topics[t], p): o[i] for (t, p), o in plan.items() if o[i] is not None}
                if offsets:
                    commit_offsets(cluster.config, group[name], offsets)
            result = run_job("lag-snapshot", "--config", config, "--group", f"{u}-.*", "--quiet")
            assert result.code == 0, result.stderr
            snapshots.append(result.stdout)
    finally:
        for consumer in consumers.values():
            consumer.close()
    return {
        "u": u,
        "topics": topics,
        "group": group,
        "config": str(config),
        "tmp": tmp,
        "ends": ends,
        "snapshots": snapshots,
    }


def lag_status(world, *argv) -> object:
    return run_job("lag-status", "--config", world["config"], "--quiet", *argv)


def history_rows(spark, world) -> list[dict]:
    df = history.read_history(spark, str(world["tmp"] / "history"))
    rows = [r.asDict() for r in df.collect()]
    for r in rows:
        r["snapshot_ms"] = round(r["snapshot_time"].timestamp() * 1000)
    return rows


def snapshot_times(spark, world) -> list[int]:
    return sorted({r["snapshot_ms"] for r in history_rows(spark, world)})


def by_key(world, answers: list[dict]) -> dict:
    """(group name, topic key, partition) -> Burrow partition dict, from -o json answers."""
    names = {v: k for k, v in world["group"].items()}
    topics = {v: k for k, v in world["topics"].items()}
    return {
        (names[a["status"]["group"]], topics[p["topic"]], p["partition"]): p
        for a in answers
        for p in a["status"]["partitions"]
    }


def test_snapshots_record_lag_time_lag_and_group_state(spark, world):
    for line in world["snapshots"]:
        assert "8 partitions of 7 groups appended to history" in line
        assert line.rstrip().endswith(("via deltalake", "via delta-spark"))
    rows = history_rows(spark, world)
    df = history.read_history(spark, str(world["tmp"] / "history"))
    assert [(f.name, f.dataType) for f in df.schema] == [
        (f.name, f.dataType) for f in history.HISTORY_SCHEMA
    ]
    times = snapshot_times(spark, world)
    assert len(times) == 4 and len(rows) == 4 * 8
    names = {v: k for k, v in world["group"].items()}
    topics = {v: k for k, v in world["topics"].items()}
    plans = {**ACTIVE, **INACTIVE}
    for row in rows:
        name, key, i = names[row["group"]], topics[row["topic"]], times.index(row["snapshot_ms"])
        committed = [o for o in plans[name][(key, row["partition"])][: i + 1] if o is not None][-1]
        end = world["ends"][(key, row["partition"])][i]
        where = (name, key, row["partition"], i)
        assert row["committed_offset"] == committed, where
        assert (row["log_start_offset"], row["log_end_offset"]) == (0, end), where
        assert row["lag"] == end - committed, where
        # The next unread record is number `committed`, stamped BASE + committed seconds.
        expected_time_lag = (
            0 if committed == end else row["snapshot_ms"] - (BASE + committed * 1000)
        )
        assert row["time_lag_ms"] == expected_time_lag, where
        is_active = name in ACTIVE
        assert row["group_state"] == ("STABLE" if is_active else "EMPTY"), where
        assert row["is_consuming"] is is_active, where
        assert row["cluster"] == world_bootstrap(world)


def world_bootstrap(world) -> str:
    text = (world["tmp"] / "lag.yaml").read_text()
    return text.split("bootstrap.servers:")[1].split()[0]


def test_status_burrow_json_over_last_four_snapshots(spark, world):
    result = lag_status(world, "--window", "4", "--all-partitions", "-o", "json")
    assert result.code == 0, result.stderr
    answers = json.loads(result.stdout)
    assert "7 groups evaluated (2 OK, 1 WARN, 4 ERR)" in result.stderr
    assert {a["status"]["group"]: a["status"]["status"] for a in answers} == {
        world["group"][n]: s for n, s in GROUP_EXPECTED.items()
    }
    parts = by_key(world, answers)
    assert {k: p["status"] for k, p in parts.items()} == EXPECTED
    times = snapshot_times(spark, world)

    # Burrow's /v3/kafka/(cluster)/consumer/(group)/status (here /lag: every partition).
    mixed = next(a for a in answers if a["status"]["group"] == world["group"]["mixed"])
    assert set(mixed) == {"error", "message", "status", "request"}
    assert mixed["error"] is False and mixed["message"] == "consumer status returned"
    assert mixed["request"]["url"].endswith(f"/consumer/{world['group']['mixed']}/lag")
    status = mixed["status"]
    assert set(status) == {
        "cluster",
        "group",
        "status",
        "complete",
        "partitions",
        "partition_count",
        "maxlag",
        "totallag",
    }
    assert status["cluster"] == world_bootstrap(world)
    assert (status["complete"], status["partition_count"], status["totallag"]) == (1.0, 2, 22)
    stalled = parts[("mixed", "u", 1)]
    assert status["maxlag"] == stalled
    assert set(stalled) == {
        "topic",
        "partition",
        "owner",
        "client_id",
        "status",
        "start",
        "end",
        "current_lag",
        "complete",
    }
    assert stalled["current_lag"] == 15 and stalled["complete"] == 1.0
    # An active consumer committing: every entry is stamped with its snapshot.
    assert stalled["start"] == {
        "offset": 1,
        "timestamp": times[0],
        "observedAt": times[0],
        "lag": 9,
    }
    assert stalled["end"] == {"offset": 1, "timestamp": times[3], "observedAt": times[3], "lag": 15}
    # A stopped consumer: the offset keeps the time it was first seen.
    stopped = parts[("stop", "t", 0)]
    assert stopped["start"] == {
        "offset": 5,
        "timestamp": times[0],
        "observedAt": times[0],
        "lag": 5,
    }
    assert stopped["end"] == {"offset": 5, "timestamp": times[0], "observedAt": times[3], "lag": 17}
    assert parts[("rewind", "t", 0)]["end"]["timestamp"] == times[3]


def test_status_default_window_is_incomplete_and_lists_only_bad_partitions(world):
    result = lag_status(world, "-o", "json")  # history.window: 10, four snapshots so far
    assert result.code == 0, result.stderr
    answers = json.loads(result.stdout)
    parts = by_key(world, answers)
    assert {k: p["status"] for k, p in parts.items()} == {
        k: s for k, s in EXPECTED.items() if s != "OK"
    }
    assert all(p["complete"] == 0.4 for p in parts.values())
    ok = next(a for a in answers if a["status"]["group"] == world["group"]["ok"])
    assert ok["status"]["partitions"] == [] and ok["status"]["complete"] == 0.0
    assert ok["status"]["maxlag"]["current_lag"] == 4
    assert ok["request"]["url"].endswith("/status")


def test_status_as_of_an_earlier_snapshot_and_later_now(spark, world):
    times = snapshot_times(spark, world)
    # As of the second snapshot: `ok` and `rewind` had lags 8, 8 and 5, 5 (not decreasing yet).
    early = lag_status(
        world, "--window", "4", "--all-partitions", "-o", "json", "--now", str(times[1])
    )
    assert early.code == 0, early.stderr
    parts = by_key(world, json.loads(early.stdout))
    assert {k: p["status"] for k, p in parts.items()} == {
        **EXPECTED,
        ("ok", "t", 0): "WARN",
        ("rewind", "t", 0): "WARN",
    }
    assert all(p["end"]["observedAt"] <= times[1] for p in parts.values())

    # An hour after the last snapshot with no newer one, lagging partitions have stopped —
    # except `ok`, whose last offset (18) is above a log end seen in the window (10, 14):
    # Burrow's "recently caught up" rule delays its STOP.
    late = lag_status(
        world, "--window", "4", "--all-partitions", "-o", "json", "--now", str(times[3] + 3_600_000)
    )
    assert late.code == 0, late.stderr
    parts = by_key(world, json.loads(late.stdout))
    assert {k: p["status"] for k, p in parts.items()} == {
        k: ("OK" if k[0] in ("idle", "ok") else "STOP") for k in EXPECTED
    }


def test_status_table_output_and_status_table(spark, world):
    status_path = world["tmp"] / "status"
    argv = ("--window", "4", "--set", f"history.status_path={status_path}")
    first = lag_status(world, *argv)
    assert first.code == 0, first.stderr
    assert f"status appended to {status_path} via deltalake" in first.stdout or (
        "via delta-spark" in first.stdout
    )
    lines = first.stdout.splitlines()
    assert lines[0].split() == [
        c.upper()
        for c in (
            "group",
            "topic",
            "partition",
            "status",
            "current_lag",
            "complete",
            "start_offset",
            "end_offset",
            "end_committed_at",
            "owner",
        )
    ]
    names = {v: k for k, v in world["group"].items()}
    shown = [line.split() for line in lines[1 : lines.index("")]]
    assert sorted((names[cells[0]], cells[3]) for cells in shown) == sorted(
        (k[0], s) for k, s in EXPECTED.items() if s != "OK"
    )
    groups_table = lines[lines.index("") + 1 :]
    assert groups_table[0].split()[:3] == ["CLUSTER", "GROUP", "STATUS"]
    mixed_line = next(line for line in groups_table if world["group"]["mixed"] in line)
    assert mixed_line.split()[2:7] == ["ERR", "1.0", "2", "22", f"{world['topics']['u']}[1]"]
    assert lag_status(world, *argv, "--group", f"{world['u']}-(ok|idle)").code == 0

    df = delta.read(spark, str(status_path))
    assert [(f.name, f.dataType) for f in df.schema] == [
        (f.name, f.dataType) for f in history.STATUS_SCHEMA
    ]
    rows = [r.asDict() for r in df.collect()]
    assert len(rows) == 8 + 2 and len({r["evaluated_at"] for r in rows}) == 2
    mixed = {r["partition"]: r for r in rows if r["group"] == world["group"]["mixed"]}
    assert {p: r["status"] for p, r in mixed.items()} == {0: "OK", 1: "STALL"}
    assert {p: r["is_maxlag"] for p, r in mixed.items()} == {0: False, 1: True}
    assert all(
        (r["group_status"], r["group_totallag"], r["window"], r["allowed_lag"]) == ("ERR", 22, 4, 0)
        for r in mixed.values()
    )


def test_allowed_lag_counts_small_lag_as_caught_up(world):
    result = lag_status(world, "--window", "4", "--allowed-lag", "20", "-o", "json")
    assert result.code == 0, result.stderr
    # Every current lag is at most 19: nothing is judged.
    answers = json.loads(result.stdout)
    assert len(answers) == 7 and all(a["status"]["status"] == "OK" for a in answers)
    assert by_key(world, answers) == {}


def test_errors_are_one_line_with_exit_codes(world, tmp_path):
    bare = tmp_path / "bare.yaml"
    bare.write_text(f"cluster:\n  bootstrap.servers: {world_bootstrap(world)}\n")
    missing = run_job("lag-snapshot", "--config", bare)
    assert missing.code == 2 and "missing required config key 'history.path'" in missing.stderr
    nothing = run_job(
        "lag-snapshot", "--config", world["config"], "--group", "no-such-.*", "--quiet"
    )
    assert nothing.code == 1 and "matches --group no-such-.*" in nothing.stderr
    bad = run_job("lag-snapshot", "--config", world["config"], "--group", "(")
    assert bad.code == 2 and "not a valid regex" in bad.stderr

    no_table = lag_status(world, "--set", f"history.path={tmp_path / 'none'}")
    assert no_table.code == 1 and "no lag history at history.path" in no_table.stderr
    assert lag_status(world, "--window", "0").code == 2
    assert lag_status(world, "--allowed-lag", "-1").code == 2
    assert lag_status(world, "--now", "yesterday").code == 2
    unmatched = lag_status(world, "--group", "no-such-.*")
    assert unmatched.code == 1 and "no snapshots of groups matching --group" in unmatched.stderr
    for result in (missing, nothing, bad, no_table, unmatched):
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
