"""The destination search (ferry.migrate.search) on real brokers: narrow reads give the plan a
full-window read gives, at a fraction of the reads, on the edge cases of widening.

Every topic is busy in miniature: 10 records per millisecond, so the ±200 ms matching window
holds most of a partition and a full read reads all of that. Each case runs a dry run twice, narrow
(the default) and `matching.search: full`, and compares the plans.
"""

from __future__ import annotations

import json
import re
import time

import pytest

from ferry.testing.produce import (
    Record,
    commit_offsets,
    create_topics,
    produce,
    produce_transactions,
)

from .jobrunner import run_job, write_migrate_config

pytestmark = pytest.mark.integration

BASE = 1_750_000_000_000
PER_MS = 10
K = 4  # matching.context: runs of 2K + 1 identical records are what tells copies apart
WINDOW_MS = 200
SHIFT_MS = 150  # a replicator that rewrites timestamps to its own, later, append time


def busy(tag: str, n: int, start_ms: int = BASE) -> list[Record]:
    return [
        Record(f"k{i % 7}".encode(), f"{tag}-{i}".encode(), start_ms + i // PER_MS)
        for i in range(n)
    ]


def shifted(records: list[Record], ms: int) -> list[Record]:
    return [Record(r.key, r.value, r.timestamp_ms + ms) for r in records]


@pytest.fixture(scope="module")
def world(clusters, tmp_path_factory):
    src, dst = clusters
    u = f"s{int(time.time() * 1000) % 10**8}"
    names = ("busy", "repeat", "outside", "ends", "late", "gaps")
    t = {n: f"{u}-{n}" for n in names}
    create_topics(src.config, {name: 1 for name in t.values()})
    create_topics(dst.config, {name: 1 for name in t.values()})
    expected: dict[str, dict] = {}
    groups: dict[str, dict] = {}

    # busy: 4,000 records replicated from offset 100; the group stopped mid-way.
    recs = busy("busy", 4000)
    produce(src.config, t["busy"], 0, recs)
    dst_offsets = produce(dst.config, t["busy"], 0, recs[100:])
    groups[f"{u}-busy"] = {(t["busy"], 0): 2500}
    expected[f"{u}-busy"] = dst_offsets[2400]
    groups[f"{u}-busy2"] = {(t["busy"], 0): 3333}  # a second position: timestamp lookups in layers
    expected[f"{u}-busy2"] = dst_offsets[3233]

    # repeat: the 2K + 1 records around the anchor occur again WINDOW_MS later, at the
    # window's edge. A full read finds two full matches (AMBIGUOUS); the narrow search accepts
    # the one with the anchor's own timestamp (the documented rule).
    recs = busy("repeat", 4000)
    run = [Record(b"r", f"run-{j}".encode(), None) for j in range(2 * K + 1)]
    for j, r in enumerate(run):
        recs[1000 + j] = Record(r.key, r.value, recs[1000 + j].timestamp_ms)
        edge = 1000 + WINDOW_MS * PER_MS + j
        recs[edge] = Record(r.key, r.value, recs[edge].timestamp_ms)
    produce(src.config, t["repeat"], 0, recs)
    dst_offsets = produce(dst.config, t["repeat"], 0, recs)
    groups[f"{u}-repeat"] = {(t["repeat"], 0): 1000 + K + 1}  # anchor: the run's middle
    expected[f"{u}-repeat"] = dst_offsets[1000 + K + 1]

    # outside: the same run again, but a millisecond past the window: no read may see it.
    recs = busy("outside", 3000)
    for j, r in enumerate(run):
        recs[500 + j] = Record(r.key, r.value, recs[500 + j].timestamp_ms)
        far = 500 + (WINDOW_MS + 1) * PER_MS + j
        recs[far] = Record(r.key, r.value, recs[far].timestamp_ms)
    produce(src.config, t["outside"], 0, recs)
    dst_offsets = produce(dst.config, t["outside"], 0, recs)
    groups[f"{u}-outside"] = {(t["outside"], 0): 500 + K + 1}
    expected[f"{u}-outside"] = dst_offsets[500 + K + 1]

    # ends: anchors at the destination's log start (replicated from source offset 50) and at
    # the log end (a drained group: C = the source's log end).
    recs = busy("ends", 600)
    produce(src.config, t["ends"], 0, recs)
    dst_offsets = produce(dst.config, t["ends"], 0, recs[50:])
    groups[f"{u}-start"] = {(t["ends"], 0): 51}
    expected[f"{u}-start"] = dst_offsets[1]
    groups[f"{u}-end"] = {(t["ends"], 0): 600}
    expected[f"{u}-end"] = dst_offsets[-1] + 1

    # late: destination timestamps rewritten SHIFT_MS later: the search widens forward.
    recs = busy("late", 3000)
    produce(src.config, t["late"], 0, recs)
    dst_offsets = produce(dst.config, t["late"], 0, shifted(recs, SHIFT_MS))
    groups[f"{u}-late"] = {(t["late"], 0): 1200}
    expected[f"{u}-late"] = dst_offsets[1200]

    # gaps: the destination has a transaction marker after every 6 records, across the window
    # (to a reader a marker is an offset without a record, like a compaction gap).
    recs = busy("gaps", 1500)
    produce(src.config, t["gaps"], 0, recs)
    dst_offsets = produce_transactions(
        dst.config, t["gaps"], 0, [recs[i : i + 6] for i in range(0, len(recs), 6)]
    )
    groups[f"{u}-gaps"] = {(t["gaps"], 0): 700}
    expected[f"{u}-gaps"] = dst_offsets[700]

    for group, offsets in groups.items():
        commit_offsets(src.config, group, offsets)
    tmp = tmp_path_factory.mktemp("search")
    config = write_migrate_config(
        tmp,
        src,
        dst,
        u,
        matching={"window_before_ms": WINDOW_MS, "window_after_ms": WINDOW_MS, "context": K},
        reader={"timeout_ms": 10000},
    )
    return {"u": u, "config": config, "expected": expected}


def dry_run(world, search: str) -> tuple[dict[str, dict], str]:
    result = run_job(
        "migrate", "--config", world["config"], "-o", "json", "--set", f"matching.search={search}"
    )
    assert result.code in (0, 1), result.stderr
    return {r["group"]: r for r in json.loads(result.stdout)}, result.stderr


def offsets_read(stderr: str) -> int:
    narrow = re.search(r"destination: read (\d+) offsets for (\d+) anchor positions", stderr)
    if narrow:
        return int(narrow.group(1))
    return int(re.search(r"destination: reading \d+ windows \((\d+) offsets\)", stderr).group(1))


def test_narrow_search_plans_what_a_full_read_plans(world):
    narrow, narrow_err = dry_run(world, "narrow")
    full, full_err = dry_run(world, "full")
    u = world["u"]
    for group, offset in world["expected"].items():
        row = narrow[group]
        assert (row["status"], row["destination_offset"]) == ("MATCHED", offset), (group, row)
        if group == f"{u}-repeat":
            # the rule chosen: a full-context match at the anchor's own timestamp is the copy;
            # the full read sees the same run at the window's edge and cannot choose
            assert full[group]["status"] == "AMBIGUOUS", full[group]
            continue
        keys = ("status", "destination_offset", "candidate_count")
        assert {k: full[group][k] for k in keys} == {k: row[k] for k in keys}, group
    # A full read reads every window whole (~13,000 offsets); the narrow search reads a few
    # hundred around each anchor, and a window whole only where it cannot decide early: the
    # rewritten timestamps of `late` (3,000) and the context cut short at the log start.
    # `gaps`: the broker answers its lookup with the first marker (newer than the records),
    # and the first read shows it: that one is looked up again, and found exactly above
    assert "1 timestamp lookups landed before their first record" in narrow_err, narrow_err
    narrow_read, full_read = offsets_read(narrow_err), offsets_read(full_err)
    assert full_read > 10_000, full_err
    assert narrow_read < 3000 + 550 + 6 * 400, narrow_err
