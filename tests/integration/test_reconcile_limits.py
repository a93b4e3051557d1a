"""Reconcile mode's refusals on real brokers: a group with no position on a partition, a band
wider than `matching.max_band_ms`, a replica that has not copied what was consumed (PENDING,
then resolved), and groups that may not be written."""

from __future__ import annotations

import json

import pytest

from ferry.testing.produce import Record, commit_offsets, create_topics, produce

from .jobrunner import run_job, write_migrate_config

pytestmark = pytest.mark.integration

BASE = 1_760_000_000_000
HOUR = 3_600_000


def rows_of(result) -> dict[tuple[str, int], dict]:
    return {(r["group"], r["dst_partition"]): r for r in json.loads(result.stdout)}


@pytest.fixture
def two_to_three(clusters, unique):
    """Source topic with 2 partitions, destination with 3; partition 0's records an hour
    before partition 1's. Returns (topic, source records per partition, copy)."""
    src, dst = clusters
    topic = f"{unique}-t"
    create_topics({"bootstrap.servers": src.bootstrap}, {topic: 2})
    create_topics({"bootstrap.servers": dst.bootstrap}, {topic: 3})
    records = {
        p: [
            Record(f"k{p}-{i}".encode(), f"v{p}-{i}".encode(), BASE + p * HOUR + i)
            for i in range(6)
        ]
        for p in range(2)
    }
    for p, rs in records.items():
        produce({"bootstrap.servers": src.bootstrap}, topic, p, rs)

    def copy(upto: dict[int, int]) -> None:
        """Copy records[p][:upto[p]] of each partition p to destination partition p."""
        for p, n in upto.items():
            produce({"bootstrap.servers": dst.bootstrap}, topic, p, records[p][:n])

    return topic, records, copy


def test_no_position_and_band_too_wide_are_unresolved(tmp_path, clusters, unique, two_to_three):
    src, dst = clusters
    topic, _, copy = two_to_three
    copy({0: 6, 1: 6})
    conf = {"bootstrap.servers": src.bootstrap}
    commit_offsets(conf, f"{unique}-half", {(topic, 0): 3})  # nothing on partition 1
    # Partition 0 stopped an hour before partition 1: consumed and unconsumed records
    # interleave over an hour.
    commit_offsets(conf, f"{unique}-apart", {(topic, 0): 3, (topic, 1): 5})
    commit_offsets(conf, f"{unique}-drained", {(topic, 0): 6, (topic, 1): 6})
    cfg = write_migrate_config(tmp_path, src, dst, unique)
    result = run_job(
        "migrate",
        "--config",
        cfg,
        "-o",
        "json",
        "--execute",
        "--set",
        "matching.max_band_ms=600000",
    )
    assert result.code == 1, result.stderr
    rows = rows_of(result)
    assert {rows[(f"{unique}-half", q)]["status"] for q in range(3)} == {"NO_POSITION"}
    assert f"not migrated: {unique}-half: 3 of 3 partitions unresolved (NO_POSITION): " in (
        result.stderr
    )
    assert f"no committed offset on {topic}[1]" in result.stderr
    assert {rows[(f"{unique}-apart", q)]["status"] for q in range(3)} == {"BAND_TOO_WIDE"}
    assert "frontier band is 60 min wide" in result.stderr
    assert f"first unconsumed record on {topic}[0]" in result.stderr
    assert f"last consumed on {topic}[1]" in result.stderr
    # The drained group in the same run is committed: both partitions' ends, and q=2 (empty).
    drained = [rows[(f"{unique}-drained", q)] for q in range(3)]
    assert [r["destination_offset"] for r in drained] == [6, 6, 0]
    assert {r["group_status"] for r in drained} == {"COMMITTED"}

    wider = run_job(
        "migrate", "--config", cfg, "-o", "json", "--set", "matching.max_band_ms=7200000"
    )
    apart = [rows_of(wider)[(f"{unique}-apart", q)] for q in range(3)]
    assert [r["destination_offset"] for r in apart] == [3, 5, 0]
    assert {r["status"] for r in apart} == {"RECONCILED"}


def test_pending_until_the_replica_copied_what_was_consumed(
    tmp_path, clusters, unique, two_to_three
):
    src, dst = clusters
    topic, records, copy = two_to_three
    copy({0: 6, 1: 2})  # partition 1's replication lags
    commit_offsets(
        {"bootstrap.servers": src.bootstrap}, f"{unique}-g", {(topic, 0): 6, (topic, 1): 4}
    )
    cfg = write_migrate_config(tmp_path, src, dst, unique, matching={"max_band_ms": 7_200_000})
    pending = run_job("migrate", "--config", cfg, "-o", "json", "--execute")
    assert pending.code == 75, pending.stderr
    rows = rows_of(pending)
    assert {r["status"] for r in rows.values()} == {"PENDING"}
    assert "2 consumed records of the band not on the destination yet" in pending.stderr

    produce({"bootstrap.servers": dst.bootstrap}, topic, 1, records[1][2:])
    done = run_job("migrate", "--config", cfg, "-o", "json", "--execute")
    assert done.code == 0, done.stderr
    rows = rows_of(done)
    assert [rows[(f"{unique}-g", q)]["destination_offset"] for q in range(3)] == [6, 4, 0]
    assert {r["group_status"] for r in rows.values()} == {"COMMITTED"}
