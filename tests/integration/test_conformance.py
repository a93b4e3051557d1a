"""`groups` held to the real `kafka-consumer-groups` (Apache Kafka 4.3.1's `ConsumerGroupCommand`)
on the same cluster state, field by field; docs/conformance.md is the table this checks.

One cluster state for the module: topic `a` (3 partitions of 30 records, one minute apart,
ending half an hour ago; DeleteRecords moved a[2]'s log start to 10), topic `b` (2 partitions
of 10), and groups that are Empty (`empty`, `partial`: one partition of three committed,
`behind`: committed before the log start), Stable (`stable`: a live consumer on `b`, only b[0]
committed) and Dead (`none`: never existed). The tool runs once per spec for every group (its
JVM start is the cost), several at a time; Ferry's dry runs run in this process.
"""

from __future__ import annotations

import json
import textwrap
import time

import pytest

from ferry import kafka
from ferry.testing import consumer_groups as tool
from ferry.testing.produce import Record, commit_offsets, create_topics, delete_records, produce

from .jobrunner import join_group, run_job

# Seventeen tool JVMs and a describe: 1.5-3 minutes on a shared 2-core machine, so `slow`.
pytestmark = [pytest.mark.integration, pytest.mark.slow]

MINUTE = 60_000
NOW_MS = int(time.time() * 1000)
BASE = NOW_MS - 60 * MINUTE  # record i of each partition at BASE + i minutes
RECORDS = 30
LOG_START_A2 = 10


def iso(ms: int) -> str:
    """A UTC date-time both tools read the same way (the tool wants milliseconds)."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms / 1000)) + f".{ms % 1000:03d}Z"


def commits(u: str) -> dict[str, dict[tuple[str, int], int]]:
    a = f"{u}-a"
    return {
        f"{u}-empty": {(a, 0): 5, (a, 1): 30, (a, 2): 12},
        f"{u}-partial": {(a, 0): 7},
        f"{u}-behind": {(a, 2): 3},  # before a[2]'s log start (10)
    }


@pytest.fixture(scope="module")
def world(cluster, tmp_path_factory):
    u = f"cf{int(time.time() * 1000) % 10**8}"
    a, b = f"{u}-a", f"{u}-b"
    create_topics(cluster.config, {a: 3, b: 2})
    for p in range(3):
        produce(
            cluster.config,
            a,
            p,
            [Record(b"k", f"{p}-{i}".encode(), BASE + i * MINUTE) for i in range(RECORDS)],
        )
    for p in range(2):
        produce(cluster.config, b, p, [Record(None, b"b", BASE + i * MINUTE) for i in range(10)])
    assert delete_records(cluster.config, {(a, 2): LOG_START_A2}) == {(a, 2): LOG_START_A2}
    for group, offsets in commits(u).items():
        commit_offsets(cluster.config, group, offsets)
    stable = join_group(cluster.config, f"{u}-stable", b)
    from confluent_kafka import TopicPartition

    stable.commit(offsets=[TopicPartition(b, 0, 4)], asynchronous=False)
    tmp = tmp_path_factory.mktemp("conformance")
    config = tmp / "groups.yaml"
    config.write_text(
        textwrap.dedent(
            f"""\
            cluster:
              bootstrap.servers: {cluster.bootstrap}
            ledger:
              path: {tmp / "ledger"}
            """
        )
    )
    yield {"u": u, "a": a, "b": b, "config": str(config), "tmp": tmp, "cluster": cluster}
    stable.close()


def ferry(world, verb: str, *argv: str):  # noqa: ANN201
    return run_job("groups", verb, "--config", world["config"], "--quiet", *argv)


def committed(world, group: str) -> dict[tuple[str, int], int]:
    admin = kafka.Cluster("c", world["cluster"].config)
    return kafka.committed_offsets(admin, [group]).get(group, {})


# ------------------------------------------------------------------------------- describe


def test_describe_matches_the_tool_field_by_field(world):
    u = world["u"]
    names = [f"{u}-{n}" for n in ("empty", "partial", "behind", "stable")]
    rows, done = tool.describe(world["cluster"].bootstrap, names)
    assert done.code == 0, done.stderr
    theirs = {(r.group, r.topic, r.partition): r for r in rows}

    result = ferry(world, "describe", "--group", f"{u}-(empty|partial|behind|stable)", "-o", "json")
    assert result.code == 0, result.stderr
    ours = {
        (p["group"], p["topic"], p["partition"]): p
        for g in json.loads(result.stdout)
        for p in g["partitions"]
    }
    # Same rows: an Empty group's committed partitions; a Stable group's assigned ones, with
    # or without a commit (b[1] has none).
    assert set(ours) == set(theirs)
    assert (f"{u}-stable", world["b"], 1) in ours
    for key, t in theirs.items():
        o = ours[key]
        assert o["committed_offset"] == t.current_offset, key
        assert o["log_end_offset"] == t.log_end_offset, key
        assert o["lag"] == t.lag, key
        assert o["member_id"] == t.consumer_id, key
        assert o["host"] == t.host, key
        assert o["client_id"] == t.client_id, key
    # The cases the table names, as the tool printed them.
    stable_b1 = theirs[(f"{u}-stable", world["b"], 1)]
    assert (stable_b1.current_offset, stable_b1.lag, stable_b1.log_end_offset) == (None, None, 10)
    assert stable_b1.consumer_id and stable_b1.host == "/127.0.0.1"
    behind = theirs[(f"{u}-behind", world["a"], 2)]
    assert (behind.current_offset, behind.lag) == (3, 27)  # lag counts deleted records too
    assert f"Consumer group '{u}-empty' has no active members." in done.stderr


def test_describe_of_a_dead_group(world):
    """A group that does not exist: the tool prints an error naming it (its exit code is 0);
    Ferry exits 1 naming what selected nothing."""
    dead = f"{world['u']}-none"
    done = tool.run(world["cluster"].bootstrap, "--describe", "--group", dead)
    assert f"Group {dead} not found." in done.stdout + done.stderr
    result = ferry(world, "describe", "--group", dead)
    assert result.code == 1 and f"matches --group {dead}" in result.stderr


# ---------------------------------------------------------------------------------- reset

FROM_FILE = "from-file"
SPECS = {  # name: (scope, spec) as both tools take them
    "to-earliest": (["--all-topics"], ["--to-earliest"]),
    "to-latest": (["--all-topics"], ["--to-latest"]),
    "to-current": (["--all-topics"], ["--to-current"]),
    "to-current, topic scope": (["--topic", "{a}"], ["--to-current"]),
    "to-earliest, partitions": (["--topic", "{a}:0,2"], ["--to-earliest"]),
    "to-offset": (["--all-topics"], ["--to-offset", "20"]),
    "to-offset past log end": (["--all-topics"], ["--to-offset", "100"]),
    "to-offset before log start": (["--all-topics"], ["--to-offset", "2"]),
    "shift-by": (["--all-topics"], ["--shift-by", "4"]),
    "shift-by before log start": (["--all-topics"], ["--shift-by", "-8"]),
    "shift-by past log end": (["--all-topics"], ["--shift-by", "100"]),
    "to-datetime": (["--all-topics"], ["--to-datetime", iso(BASE + 10 * MINUTE + 30_000)]),
    "to-datetime at a record": (["--all-topics"], ["--to-datetime", iso(BASE + 12 * MINUTE)]),
    "to-datetime before every record": (["--all-topics"], ["--to-datetime", iso(BASE - MINUTE)]),
    "to-datetime after every record": (["--all-topics"], ["--to-datetime", iso(NOW_MS)]),
    # now - 45.5 min = BASE + 14.5 min: offset 15, half a minute from either record, so the
    # seconds between the two tools' "now" do not matter.
    "by-duration": (["--all-topics"], ["--by-duration", "PT45M30S"]),
    FROM_FILE: ([], ["--from-file", "{file}"]),
}


def _fill(args: list[str], world) -> list[str]:
    return [x.format(a=world["a"], file=world["tmp"] / "offsets.csv") for x in args]


@pytest.fixture(scope="module")
def tool_resets(world):
    """Every spec's `--reset-offsets --dry-run --export`, for the three Empty groups at once."""
    u, a = world["u"], world["a"]
    # Out of range on purpose: below a[2]'s log start, past a[0]'s log end.
    (world["tmp"] / "offsets.csv").write_text(
        f"{u}-empty,{a},0,50\n{u}-empty,{a},2,3\n{u}-partial,{a},1,6\n{u}-behind,{a},2,25\n"
    )
    groups = list(commits(u))
    invocations = [
        tool.reset_args(groups, _fill(scope, world), _fill(spec, world))
        for scope, spec in SPECS.values()
    ]
    runs = tool.run_many(world["cluster"].bootstrap, invocations)
    return dict(zip(SPECS, runs, strict=True))


@pytest.mark.parametrize("name", list(SPECS))
def test_reset_plan_matches_the_tool(world, tool_resets, name):
    done = tool_resets[name]
    assert done.code == 0, done.stderr
    theirs = tool.parse_export(done.stdout)
    assert theirs, done.stdout
    scope, spec = SPECS[name]
    u = world["u"]
    result = ferry(
        world,
        "reset",
        "--group",
        f"{u}-(empty|partial|behind)",
        *_fill(scope, world),
        *_fill(spec, world),
        "--export",
    )
    assert result.code == 0, result.stderr
    ours = tool.parse_export(result.stdout)
    assert ours == theirs
    for group, offsets in commits(u).items():
        assert committed(world, group) == offsets  # both were dry runs


def test_shift_by_without_a_commit_is_refused_by_both(world):
    """--shift-by where a partition has no commit: the tool stops with an error naming the
    partition (nothing is reset); Ferry names it too and leaves that group alone."""
    u, a = world["u"], world["a"]
    done = tool.run(
        world["cluster"].bootstrap,
        *tool.reset_args([f"{u}-partial"], ["--topic", a], ["--shift-by", "-5"]),
    )
    assert done.code == 1
    assert f"Cannot shift offset for partition {a}-1 since there is no current committed" in (
        done.stderr
    )
    result = ferry(world, "reset", "--group", f"{u}-partial", "--topic", a, "--shift-by", "-5")
    assert result.code == 1
    assert f"group {u}-partial: {a}[1] has no committed offset to shift" in result.stderr


def test_an_active_group_is_refused_by_both(world):
    u = world["u"]
    stable = f"{u}-stable"
    done = tool.run(
        world["cluster"].bootstrap,
        *tool.reset_args([stable], ["--all-topics"], ["--to-earliest"]),
    )
    message = (
        f"Assignments can only be reset if the group '{stable}' is inactive, "
        "but the current state is Stable."
    )
    assert message in done.stdout + done.stderr and tool.parse_export(done.stdout) == {}
    result = ferry(world, "reset", "--group", stable, "--all-topics", "--to-earliest")
    assert result.code == 1 and message in result.stderr


# ------------------------------------------------------------------- export, then --execute


def test_export_applied_by_the_tool_lands_where_ferrys_execute_does(world):
    """Ferry's `reset --export` CSV, applied with `kafka-consumer-groups --reset-offsets
    --from-file --execute`, leaves the groups exactly where Ferry's own --execute leaves twins
    that started at the same offsets: one group (topic,partition,offset) and several
    (group,topic,partition,offset)."""
    u, a, bootstrap = world["u"], world["a"], world["cluster"].bootstrap
    start = {(a, 0): 5, (a, 1): 20, (a, 2): 12}
    pairs = {  # applied by the tool → executed by Ferry
        f"{u}-one-tool": f"{u}-one-ferry",
        f"{u}-many-tool-1": f"{u}-many-ferry-1",
        f"{u}-many-tool-2": f"{u}-many-ferry-2",
    }
    for group in [*pairs, *pairs.values()]:
        commit_offsets(world["cluster"].config, group, start)
    spec = ("--all-topics", "--shift-by", "-8")  # a[0] and a[2] clamp to their log starts

    one = ferry(world, "reset", "--group", f"{u}-one-tool", *spec, "--export")
    many = ferry(world, "reset", "--group", f"{u}-many-tool-.*", *spec, "--export")
    assert one.code == 0 and many.code == 0, one.stderr + many.stderr
    assert one.stdout.count(",") == 2 * 3 and many.stdout.count(",") == 3 * 6  # 3 and 4 columns
    (world["tmp"] / "one.csv").write_text(one.stdout)
    (world["tmp"] / "many.csv").write_text(many.stdout)
    applied = tool.run_many(
        bootstrap,
        [
            ["--reset-offsets", "--group", f"{u}-one-tool", "--from-file",
             str(world["tmp"] / "one.csv"), "--execute"],
            ["--reset-offsets", "--group", f"{u}-many-tool-1", "--group", f"{u}-many-tool-2",
             "--from-file", str(world["tmp"] / "many.csv"), "--execute"],
        ],
    )  # fmt: skip
    for done in applied:
        assert done.code == 0 and not tool.warnings(done), done.stdout + done.stderr

    for pattern in (f"{u}-one-ferry", f"{u}-many-ferry-.*"):
        result = ferry(world, "reset", "--group", pattern, *spec, "--execute")
        assert result.code == 0, result.stderr
    expected = {(a, 0): 0, (a, 1): 12, (a, 2): LOG_START_A2}
    for by_tool, by_ferry in pairs.items():
        assert committed(world, by_tool) == committed(world, by_ferry) == expected, by_tool
