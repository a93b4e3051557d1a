"""Reconcile mode through broker faults (the fault proxy of `test_faults`): a topic
re-partitioned 2 → 3, large enough to be read narrowly (timestamp lookups and slices), with
connections dropped mid-run, and the destination lost right after the first commit and then
run again. Every committed offset must be the reconciled one, never half a group."""

from __future__ import annotations

import json

import pytest

from ferry.testing.produce import Record, commit_offsets, create_topics, produce
from ferry.testing.proxy import API_FETCH, API_LIST_GROUPS, API_OFFSET_COMMIT
from ferry.testing.replicate import end_offsets, read_all, replicate

from .jobrunner import group_statuses, run_job, write_migrate_config
from .test_faults import healthy, proxied  # noqa: F401 - the proxied brokers, restored per test
from .test_migrate import committed
from .test_reconcile import drained, expected_plan, offsets_at

pytestmark = [pytest.mark.integration, pytest.mark.faults]

BASE = 1_760_000_000_000
N = 400  # records per source partition: each destination partition holds more than 128


def _world(src, dst, tmp_path, unique: str, **admin: int) -> tuple[str, str, dict]:  # noqa: ANN001
    """Three stopped groups on a 2 → 3 topic; returns (config, topic, group → {(topic, q):
    reconciled offset})."""
    topic = f"{unique}-t"
    create_topics(src.config, {topic: 2})
    create_topics(dst.config, {topic: 3})
    for p in range(2):
        produce(src.config, topic, p, [
            Record(f"k{(i * 7 + p) % 23}".encode(), f"{p}-{i}".encode(), BASE + i // 2)
            for i in range(N)
        ])  # fmt: skip
    records = read_all(src.config, topic)
    mapping = replicate(src.config, topic, dst.config, topic, 3, order="time")
    ends = end_offsets(dst.config, topic)
    groups = {
        f"{unique}-g1": offsets_at(records, BASE + 60),
        f"{unique}-g2": offsets_at(records, BASE + 151),
        f"{unique}-g3": drained(records),
    }
    expected = {}
    for group, offsets in groups.items():
        commit_offsets(src.config, group, {(topic, p): o for p, o in offsets.items()})
        plan = expected_plan(mapping, offsets, ends)
        assert {d for _, d in plan.values()} == {0}  # time order: no duplicates
        expected[group] = {(topic, q): o for q, (o, _) in plan.items()}
    config = write_migrate_config(
        tmp_path,
        src,
        dst,
        unique,
        matching={"hash": ["key", "value"]},
        reader={"timeout_ms": 8000},
        admin={"timeout_ms": 3000, "retry_ms": 30000, **admin},
    )
    return config, topic, expected


def test_connections_dropped_mid_run_still_reconcile_exactly(proxied, tmp_path, unique):  # noqa: F811
    src, dst = proxied
    config, _, expected = _world(src, dst, tmp_path, unique)
    fired = [
        src.proxy.arm(API_LIST_GROUPS, "drop"),  # while the groups are listed (their states)
        src.proxy.arm(API_FETCH, "drop"),  # while the source is read (frontiers first)
        dst.proxy.arm(API_FETCH, "drop"),  # while the destination's slices are looked up
        dst.proxy.arm(API_OFFSET_COMMIT, "drop"),  # the first commit never reaches the broker
    ]
    result = run_job("migrate", "--config", config, "--execute", "--quiet", "-o", "json")
    assert [f.is_set() for f in fired] == [True] * 4, ("a fault was not staged", result.stderr)
    assert result.code == 0, result.stderr
    rows = json.loads(result.stdout)
    assert {(r["status"], r["group_status"]) for r in rows} == {("RECONCILED", "COMMITTED")}
    for group, offsets in expected.items():
        assert committed(dst, group) == offsets, group


def test_destination_lost_after_first_commit_then_rerun(proxied, tmp_path, unique):  # noqa: F811
    src, dst = proxied
    config, _, expected = _world(
        src, dst, tmp_path, unique, timeout_ms=1500, retry_ms=4000, batch_groups=1
    )
    cut = dst.proxy.arm(API_OFFSET_COMMIT, "cut_after")
    first = run_job("migrate", "--config", config, "--execute", "--quiet", "-o", "json")
    assert cut.is_set()
    assert first.code == 1, first.stderr
    dst.proxy.restore()
    landed = {g for g in expected if committed(dst, g)}
    assert len(landed) == 1, landed  # only the first group's commit reached the broker
    for group, offsets in expected.items():
        assert committed(dst, group) in ({}, offsets), f"{group} half committed"
    statuses = group_statuses(first)
    assert {statuses[g] for g in landed} <= {"COMMITTED", "UNKNOWN"}
    assert {s for g, s in statuses.items() if g not in landed} == {"FAILED"}, statuses

    again = run_job("migrate", "--config", config, "--execute", "--quiet", "-o", "json")
    assert again.code == 0, again.stderr
    for group, offsets in expected.items():
        assert committed(dst, group) == offsets, group
    assert group_statuses(again) == {
        g: ("ALREADY_MIGRATED" if g in landed else "COMMITTED") for g in expected
    }
