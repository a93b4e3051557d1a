"""Hundreds of groups in one run, written in batches smaller than the group count, on real
local brokers: every group exact, the ledger complete (one intent and one outcome row per
group partition, one outcome commit per batch), and the checks right before each batch's
writes still refuse what they must."""

from __future__ import annotations

import random

import pytest

from ferry import delta, kafka
from ferry.kafka import groups as kafka_groups
from ferry.kafka.cluster import Cluster
from ferry.testing.produce import create_topics, produce
from ferry.write import commit, ledger

from .jobrunner import group_statuses, join_group, ledger_rows, run_job
from .test_migrate import committed, replicate, unique_records, write_config

pytestmark = pytest.mark.integration

SHIFT = 5  # the destination holds records[SHIFT:]: destination offset = source offset - SHIFT
BATCH = 7


def _world(src, dst, unique: str, n_groups: int, partitions: int = 8) -> dict[str, dict]:
    """`n_groups` stopped groups on 2-4 partitions each of one topic; returns each group's
    expected destination offsets."""
    topic = f"{unique}-t"
    create_topics(src.config, {topic: partitions})
    create_topics(dst.config, {topic: partitions})
    for p in range(partitions):
        recs = unique_records(f"{topic}{p}", 25)
        produce(src.config, topic, p, recs)
        produce(dst.config, topic, p, replicate(recs, SHIFT))
    rng = random.Random(13)
    sources = {
        f"{unique}-g{i:03d}": {
            (topic, p): rng.randrange(SHIFT + 1, 26)
            for p in rng.sample(range(partitions), rng.randint(2, 4))
        }
        for i in range(n_groups)
    }
    errors = kafka.alter_offsets_each(Cluster("source", src.config), sources)
    assert not any(errors.values()), errors
    return {g: {tp: o - SHIFT for tp, o in offs.items()} for g, offs in sources.items()}


def test_hundreds_of_groups_in_small_batches(clusters, spark, tmp_path, unique):
    src, dst = clusters
    expected = _world(src, dst, unique, 250)
    groups = sorted(expected)
    # Two groups the destination already has: one moved on (left alone), one mixed (refused).
    ahead, mixed = groups[3], groups[40]
    moved_on = {tp: o + 1 for tp, o in expected[ahead].items()}
    (first, *rest) = sorted(expected[mixed])
    half = {first: expected[mixed][first] + 1, **{tp: 0 for tp in rest}}
    for group, offsets in ((ahead, moved_on), (mixed, half)):
        assert kafka.alter_offsets_each(Cluster("d", dst.config), {group: offsets}) == {
            group: None
        }
    config = write_config(tmp_path, src, dst, unique)
    result = run_job(
        "migrate",
        "--config",
        config,
        "--execute",
        "--quiet",
        "-o",
        "json",
        "--set",
        f"admin.batch_groups={BATCH}",
    )
    assert result.code == 1, result.stderr  # the mixed group is refused
    statuses = group_statuses(result)
    assert statuses.pop(ahead) == "ALREADY_MIGRATED"
    assert statuses.pop(mixed) == "REFUSED"
    assert set(statuses.values()) == {"COMMITTED"}
    actual = {g: committed(dst, g) for g in groups}
    wrong = [g for g in statuses if actual[g] != expected[g]]
    assert not wrong, [(g, actual[g], expected[g]) for g in wrong[:3]]
    assert actual[ahead] == moved_on and actual[mixed] == half

    rows = [r for r in ledger_rows(tmp_path / "ledger") if r["group"] in expected]
    for phase in ("intent", "outcome"):
        got = {(r["group"], r["topic"], r["partition"]) for r in rows if r["phase"] == phase}
        want = {(g, t, p) for g in statuses for (t, p) in expected[g]}
        assert got == want, (phase, len(got), len(want))
    outcomes = [r for r in rows if r["phase"] == "outcome"]
    assert all(r["is_committed"] and r["status"] == "COMMITTED" for r in outcomes)
    assert all(r["new_offset"] == expected[r["group"]][(r["topic"], r["partition"])]
               for r in outcomes)  # fmt: skip
    plan_rows = {r["group"] for r in rows if r["phase"] == "plan"}
    assert plan_rows == {ahead, mixed}  # decided at planning: never announced
    history = delta.commit_metadata(spark, str(tmp_path / "ledger"), 1000)
    phases = [m.get("ferry.phase") for _, m in sorted(history)]
    n_batches = -(-len(statuses) // BATCH)
    assert phases == ["intent"] + ["outcome"] * n_batches, phases


def test_a_batch_refuses_its_active_group_and_writes_the_rest(clusters, spark, tmp_path, unique):
    """The state check right before a batch's writes (not only the one at planning)."""
    _, dst = clusters
    topic = f"{unique}-t"
    create_topics(dst.config, {topic: 2})
    for p in range(2):
        produce(dst.config, topic, p, unique_records(f"{topic}{p}", 20))
    cluster = Cluster("destination", dst.config)
    groups = [f"{unique}-g{i}" for i in range(10)]
    active = groups[4]
    kafka.alter_offsets_each(cluster, {active: {(topic, 0): 2}})
    targets = {g: {(topic, 0): 10 + i, (topic, 1): 5} for i, g in enumerate(groups)}
    writes = [
        commit.GroupWrite(
            g,
            offsets,
            [
                {"cluster": dst.bootstrap, "group": g, "topic": t, "partition": p, "new_offset": o}
                for (t, p), o in offsets.items()
            ],  # fmt: skip
        )
        for g, offsets in targets.items()
    ]
    run = ledger.Ledger(spark, str(tmp_path / "ledger"), ledger.new_run_id("t"), "migrate", True)
    consumer = join_group(dst.config, active, topic)  # joins after planning, before the write
    try:
        outcomes = commit.execute_writes(cluster, writes, [], run, 60_000, lambda _m: None, 4)
    finally:
        consumer.close()
    statuses = {g: o.status for g, o in outcomes.items()}
    assert statuses.pop(active) == "REFUSED", outcomes[active]
    assert set(statuses.values()) == {"COMMITTED"}
    assert "is Stable, not Empty or Dead; refused" in (outcomes[active].message or "")
    for g in statuses:
        assert committed(dst, g) == targets[g]
    assert committed(dst, active) == {(topic, 0): 2}


def test_a_write_to_a_group_that_gained_members_is_refused_by_the_broker(clusters, unique):
    """Past the state check, the broker is the last guard: it takes a commit without a member
    id only while the group is Empty. A consumer that joins in between gets the write refused,
    reported as the group being active, and its offsets stay as they were."""
    _, dst = clusters
    topic = f"{unique}-t"
    create_topics(dst.config, {topic: 1})
    produce(dst.config, topic, 0, unique_records(topic, 10))
    cluster = Cluster("destination", dst.config)
    group = f"{unique}-g"
    assert kafka.alter_offsets_each(cluster, {group: {(topic, 0): 2}}) == {group: None}
    consumer = join_group(dst.config, group, topic)
    try:
        errors = kafka.alter_offsets_each(cluster, {group: {(topic, 0): 7}})
    finally:
        consumer.close()
    assert isinstance(errors[group], kafka.GroupActiveError), errors
    assert "gained members before its write" in str(errors[group])
    assert committed(dst, group) == {(topic, 0): 2}


def test_offsets_of_more_groups_than_a_wave_are_all_fetched(clusters, unique, monkeypatch):
    """Committed offsets are fetched in waves (`kafka.groups.FETCH_WAVE`, 1,000: a burst of
    10,000 in flight sometimes went unanswered until the attempt timeout): every wave's
    answers are kept, and a group with nothing committed is answered empty wherever it falls."""
    src, dst = clusters
    expected = _world(src, dst, unique, 24)
    monkeypatch.setattr(kafka_groups, "FETCH_WAVE", 5)
    groups = [*sorted(expected), f"{unique}-none"]  # 5 waves, the group never committed last
    errors: dict = {}
    got = kafka.committed_offsets(Cluster("source", src.config), groups, errors)
    assert errors == {}
    assert got == {
        **{g: {tp: o + SHIFT for tp, o in offs.items()} for g, offs in expected.items()},
        f"{unique}-none": {},
    }
