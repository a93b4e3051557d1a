"""`groups` verbs end to end on a real local broker."""

from __future__ import annotations

import json
import textwrap
import time

import pytest

from ferry import kafka
from ferry.testing.produce import Record, commit_offsets, create_topics, produce

from .jobrunner import join_group, run_job

pytestmark = pytest.mark.integration

NOW_MS = int(time.time() * 1000)
BASE = NOW_MS - 3_600_000  # records one second apart, starting an hour ago


@pytest.fixture(scope="module")
def world(cluster, tmp_path_factory):
    """Topic `a` with 3 partitions of 10/20/30 records, topic `b` with 1 of 5 records."""
    u = f"g{int(time.time() * 1000) % 10**8}"
    a, b = f"{u}-a", f"{u}-b"
    create_topics(cluster.config, {a: 3, b: 1})
    for p, n in enumerate((10, 20, 30)):
        produce(
            cluster.config,
            a,
            p,
            [Record(b"k", f"{p}-{i}".encode(), BASE + i * 1000) for i in range(n)],
        )
    produce(cluster.config, b, 0, [Record(None, b"b", BASE + i * 1000) for i in range(5)])
    tmp = tmp_path_factory.mktemp("groups")
    config = tmp / "groups.yaml"
    config.write_text(
        textwrap.dedent(
            f"""\
            cluster:
              bootstrap.servers: {cluster.bootstrap}
            reader:
              timeout_ms: 10000
            ledger:
              path: {tmp / "ledger"}
            """
        )
    )
    return {"u": u, "a": a, "b": b, "config": str(config), "tmp": tmp}


def committed(cluster, group) -> dict:
    admin = kafka.Cluster("c", cluster.config)
    return kafka.committed_offsets(admin, [group])[group]


def groups(world, *argv) -> object:
    return run_job("groups", argv[0], "--config", world["config"], "--quiet", *argv[1:])


def test_list_and_describe_match_independent_offsets(cluster, world, unique):
    a, b = world["a"], world["b"]
    group = f"{world['u']}-{unique}"
    commit_offsets(cluster.config, group, {(a, 0): 4, (a, 1): 20, (a, 2): 7, (b, 0): 0})

    listed = groups(world, "list", "--group", group, "-o", "json")
    assert listed.code == 0, listed.stderr
    assert json.loads(listed.stdout) == [
        {
            "group": group,
            "state": "EMPTY",
            "protocol_type": "",  # offsets committed by an admin, never joined: a simple group
            "members": 0,
            "topics": 2,
            "partitions": 4,
        }
    ]

    before = int(time.time() * 1000)
    described = groups(world, "describe", "--group", group, "-o", "json")
    after = int(time.time() * 1000)
    assert described.code == 0, described.stderr
    [result] = json.loads(described.stdout)
    rows = {(r["topic"], r["partition"]): r for r in result["partitions"]}
    expected = {  # committed, log end, lag, time lag (record at the committed offset)
        (a, 0): (4, 10, 6, BASE + 4000),
        (a, 1): (20, 20, 0, None),  # caught up
        (a, 2): (7, 30, 23, BASE + 7000),
        (b, 0): (0, 5, 5, BASE),
    }
    assert set(rows) == set(expected)
    for key, (offset, end, lag, ts) in expected.items():
        row = rows[key]
        assert (row["committed_offset"], row["log_start_offset"]) == (offset, 0), key
        assert (row["log_end_offset"], row["lag"]) == (end, lag), key
        if ts is None:
            assert row["time_lag_ms"] == 0, key
        else:
            assert before - ts <= row["time_lag_ms"] <= after - ts, key
    assert result["lag"] == 34 and result["partition_count"] == 4
    assert before - BASE <= result["time_lag_ms"] <= after - BASE

    table = groups(world, "describe", "--group", group, "--topic", a)
    assert table.code == 0 and b not in table.stdout and "TIME_LAG_MS" in table.stdout


def test_group_regex_matching_nothing(world):
    for verb in ("list", "describe", "delete"):
        result = groups(world, verb, "--group", "no-such-group-.*")
        assert result.code == 1, (verb, result.stderr)
        assert "error: no group on cluster" in result.stderr
        assert "matches --group no-such-group-.*" in result.stderr
    result = groups(world, "reset", "--group", "no-such-.*", "--all-topics", "--to-earliest")
    assert result.code == 1 and "matches --group no-such-.*" in result.stderr
    bad = groups(world, "describe", "--group", "(")
    assert bad.code == 2 and "--group '(' is not a valid regex" in bad.stderr


def _reset(world, group, *spec, execute=True):
    extra = ("--execute",) if execute else ()
    return groups(world, "reset", "--group", group, *spec, *extra, "-o", "json")


@pytest.mark.parametrize(
    "spec, expected",
    [
        (["--to-earliest"], {0: 0, 1: 0, 2: 0}),
        (["--to-latest"], {0: 10, 1: 20, 2: 30}),
        (["--to-current"], {0: 4, 1: 15, 2: 30}),  # no commit on p2: log end
        (["--to-offset", "12"], {0: 10, 1: 12, 2: 12}),  # clamped to log end on p0
        (["--shift-by", "-5"], None),  # p2 has no committed offset: refused
        (["--to-datetime", "2001-01-01T00:00:00"], {0: 0, 1: 0, 2: 0}),
        (["--to-datetime", "2999-01-01T00:00:00Z"], {0: 10, 1: 20, 2: 30}),  # beyond: log end
    ],
)
def test_reset_specs(cluster, world, unique, spec, expected):
    a = world["a"]
    group = f"{world['u']}-{unique}"
    commit_offsets(cluster.config, group, {(a, 0): 4, (a, 1): 15})
    result = _reset(world, group, "--topic", a, *spec)
    if expected is None:
        assert result.code == 1
        assert f"group {group}: {a}[2] has no committed offset to shift" in result.stderr
        assert committed(cluster, group) == {(a, 0): 4, (a, 1): 15}
        return
    assert result.code == 0, result.stderr
    assert committed(cluster, group) == {(a, p): o for p, o in expected.items()}
    plan = {r["partition"]: r for r in json.loads(result.stdout)}
    assert {p: r["new_offset"] for p, r in plan.items()} == expected
    assert all(r["status"] == "COMMITTED" for r in plan.values())


def test_reset_datetime_and_duration_between_records(cluster, world, unique):
    a = world["a"]
    group = f"{world['u']}-{unique}"
    commit_offsets(cluster.config, group, {(a, 0): 1, (a, 1): 1, (a, 2): 1})
    when = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime((BASE + 12_500) / 1000))
    millis = f"{(BASE + 12_500) % 1000:03d}"
    result = _reset(world, group, "--all-topics", "--to-datetime", f"{when}.{millis}")
    assert result.code == 0, result.stderr
    # first record at or after BASE + 12.5 s is offset 13; partition 0 has only 10 records
    assert committed(cluster, group) == {(a, 0): 10, (a, 1): 13, (a, 2): 13}
    ago_s = (int(time.time() * 1000) - (BASE + 25_500)) // 1000  # ~25 s after BASE
    result = _reset(world, group, "--all-topics", "--by-duration", f"PT{ago_s}S")
    assert result.code == 0, result.stderr
    got = committed(cluster, group)
    assert got[(a, 0)] == 10 and got[(a, 1)] == 20 and 25 <= got[(a, 2)] <= 27, got


def test_reset_clamping_is_reported_and_partitions_scoped(cluster, world, unique):
    a = world["a"]
    group = f"{world['u']}-{unique}"
    commit_offsets(cluster.config, group, {(a, 0): 4, (a, 1): 5, (a, 2): 6})
    dry = _reset(world, group, "--topic", f"{a}:0,2", "--shift-by", "25", execute=False)
    assert dry.code == 0, dry.stderr
    plan = {r["partition"]: r for r in json.loads(dry.stdout)}
    assert set(plan) == {0, 2}
    assert plan[0]["new_offset"] == 10 and plan[0]["note"] == "clamped from 29 to log end 10"
    assert plan[2]["new_offset"] == 30 and plan[2]["note"] == "clamped from 31 to log end 30"
    assert plan[0]["status"] == "READY"
    assert committed(cluster, group) == {(a, 0): 4, (a, 1): 5, (a, 2): 6}  # dry run
    low = _reset(world, group, "--topic", f"{a}:1", "--to-offset", "0")
    assert low.code == 0 and committed(cluster, group)[(a, 1)] == 0
    bad = _reset(world, group, "--topic", f"{a}:9", "--to-earliest")
    assert bad.code == 2 and f"topic {a} has 3 partitions; there is no partition 9" in bad.stderr


def test_reset_refuses_an_active_group(cluster, world, unique):
    a = world["a"]
    group = f"{world['u']}-{unique}"
    commit_offsets(cluster.config, group, {(a, 0): 4})
    consumer = join_group(cluster.config, group, a)
    try:
        result = _reset(world, group, "--all-topics", "--to-earliest")
        assert result.code == 1
        assert (
            f"Assignments can only be reset if the group '{group}' is inactive, "
            "but the current state is Stable." in result.stderr
        )
    finally:
        consumer.close()
    assert committed(cluster, group)[(a, 0)] == 4


def test_csv_round_trips(cluster, world, unique, tmp_path):
    a, b = world["a"], world["b"]
    g1, g2 = f"{world['u']}-{unique}-1", f"{world['u']}-{unique}-2"
    commit_offsets(cluster.config, g1, {(a, 0): 3, (a, 1): 9, (b, 0): 2})
    commit_offsets(cluster.config, g2, {(a, 2): 11})
    one = groups(world, "reset", "--group", g1, "--all-topics", "--to-current", "--export")
    assert one.code == 0, one.stderr
    # --all-topics is the committed partitions (a[2] has no commit), as the stock tool's
    assert one.stdout == f"{a},0,3\n{a},1,9\n{b},0,2\n"
    # move g1 away, then restore it from the exported file
    assert _reset(world, g1, "--all-topics", "--to-earliest").code == 0
    path = tmp_path / "g1.csv"
    path.write_text(one.stdout)
    back = groups(world, "reset", "--group", g1, "--from-file", str(path), "--execute")
    assert back.code == 0, back.stderr
    assert committed(cluster, g1) == {(a, 0): 3, (a, 1): 9, (b, 0): 2}

    many = groups(
        world, "reset", "--group", f"{world['u']}-{unique}-.*", "--topic", a, "--to-latest",
        "--export",
    )
    assert many.code == 0, many.stderr
    lines = many.stdout.splitlines()
    assert lines == [f"{g},{a},{p},{e}" for g in (g1, g2) for p, e in ((0, 10), (1, 20), (2, 30))]
    path.write_text(many.stdout.replace(f"{g2},{a},2,30", f"{g2},{a},2,17"))
    applied = groups(world, "reset", "--from-file", str(path), "--execute")
    assert applied.code == 0, applied.stderr
    assert committed(cluster, g2) == {(a, 0): 10, (a, 1): 20, (a, 2): 17}
    assert committed(cluster, g1)[(a, 0)] == 10

    path.write_text(f"{a},0,1\n{a},zero,2\n")
    bad = groups(world, "reset", "--group", g1, "--from-file", str(path))
    assert bad.code == 2
    assert f"{path} line 2: partition and offset must be integers" in bad.stderr
    assert "Traceback" not in bad.stderr


def test_copy_into_several_groups_with_topic_filter_and_rollback(cluster, world, unique):
    a, b = world["a"], world["b"]
    old, new1, new2 = (f"{world['u']}-{unique}-{n}" for n in ("old", "n1", "n2"))
    commit_offsets(cluster.config, old, {(a, 0): 3, (a, 2): 8, (b, 0): 4})
    commit_offsets(cluster.config, new2, {(a, 0): 1})

    dry = groups(world, "copy", "--from", old, "--to", new1, "--to", new2, "--topic", a)
    assert dry.code == 0, dry.stderr
    assert committed(cluster, new1) == {}
    done = groups(
        world, "copy", "--from", old, "--to", new1, "--to", new2, "--topic", a, "--execute"
    )
    assert done.code == 0, done.stderr
    assert committed(cluster, new1) == {(a, 0): 3, (a, 2): 8}
    assert committed(cluster, new2) == {(a, 0): 3, (a, 2): 8}
    run_id = done.stdout.split("; run ")[1].split(";")[0]

    undo = groups(world, "rollback", run_id, "--execute")
    assert committed(cluster, new1) == {}  # did not exist before: deleted
    # new2 had a[0]=1; a[2] cannot be un-committed, so its rollback is reported incomplete
    assert committed(cluster, new2)[(a, 0)] == 1
    assert undo.code == 1
    assert f"not rolled back: {new2}: group {new2}: 1 partitions had no offset" in undo.stderr


def test_copy_refusals_and_delete_source(cluster, world, unique):
    a = world["a"]
    old, busy, new = (f"{world['u']}-{unique}-{n}" for n in ("old", "busy", "new"))
    commit_offsets(cluster.config, old, {(a, 1): 6})
    commit_offsets(cluster.config, busy, {(a, 2): 1})
    consumer = join_group(cluster.config, busy, a)
    try:
        refused = groups(world, "copy", "--from", old, "--to", busy, "--to", new, "--execute")
        assert refused.code == 1
        assert f"not done: {busy}: group {busy} is STABLE, not Empty; refused" in refused.stderr
        assert committed(cluster, new) == {(a, 1): 6}  # other groups go on

        active = groups(world, "copy", "--from", busy, "--to", f"{new}-2")
        assert active.code == 1 and "not Empty; its offsets are still moving" in active.stderr
    finally:
        consumer.close()

    moved = groups(
        world, "copy", "--from", old, "--to", f"{new}-3", "--delete-source", "--execute"
    )
    assert moved.code == 0, moved.stderr
    assert committed(cluster, f"{new}-3") == {(a, 1): 6}
    assert committed(cluster, old) == {}


def test_delete_and_rollback(cluster, world, unique):
    a = world["a"]
    group = f"{world['u']}-{unique}"
    commit_offsets(cluster.config, group, {(a, 0): 2, (a, 1): 3})
    dry = groups(world, "delete", "--group", group)
    assert dry.code == 0 and committed(cluster, group) == {(a, 0): 2, (a, 1): 3}
    done = groups(world, "delete", "--group", group, "--execute")
    assert done.code == 0, done.stderr
    assert committed(cluster, group) == {}
    run_id = done.stdout.split("; run ")[1].split(";")[0]
    # the same broker under another name: the run changed 127.0.0.1:PORT, not this cluster
    other_name = cluster.bootstrap.replace("127.0.0.1", "localhost")
    elsewhere = groups(
        world, "rollback", "--rollback", run_id, "--execute", "--set",
        f"cluster.bootstrap.servers={other_name}",
    )
    assert elsewhere.code == 2 and f"run {run_id} changed {cluster.bootstrap}" in elsewhere.stderr
    assert committed(cluster, group) == {}
    unreachable = groups(
        world, "rollback", run_id, "--execute", "--set", "cluster.bootstrap.servers=127.0.0.1:9",
        "--set", "reader.timeout_ms=1000",
    )
    assert unreachable.code == 1
    assert "cannot reach cluster (127.0.0.1:9) within 1s" in unreachable.stderr
    undo = groups(world, "rollback", "--rollback", run_id, "--execute")
    assert undo.code == 0, undo.stderr
    assert committed(cluster, group) == {(a, 0): 2, (a, 1): 3}
