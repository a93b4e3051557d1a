"""Ferry judged on real MirrorMaker 2's output (`ferry.testing.mm2`), with both replication
policies (default: `source.` prefix; identity: same names).

MM2 replicates the topics and translates the groups' offsets itself; the groups stop at points
chosen from the offset syncs MM2 actually wrote: between two syncs, right at one, at offset 0,
mid-transaction and on a transaction marker of a transactional topic, several partitions at
random, and on a partition MM2 has not caught up on (MM2 stopped, records produced after).
Nothing here predicts MM2's translation: each expectation is read from the clusters.

For every group partition: `audit`'s `difference` on MM2's translation equals what a plain
consumer counts reading the destination between MM2's offset and the copy of the record after
the source group's last consumed one (found by content); then `migrate --execute`; then a
consumer of each group on the destination reads the source's remaining records, record by
record, from the very next one.
"""

from __future__ import annotations

import json
import random
import time

import pytest

from ferry.testing.mm2 import mirror_maker, wait_offset_syncs, wait_replicated, wait_synced
from ferry.testing.produce import (
    Record,
    commit_offsets,
    create_topics,
    produce,
    produce_transactions,
)
from ferry.testing.replicate import committed_offsets, consume_from_committed, read_all

from .jobrunner import run_job, write_migrate_config

pytestmark = [pytest.mark.integration, pytest.mark.slow]

BASE = 1_760_000_000_000
N = 60  # records per partition of `orders`
LAG = 10  # offset.lag.max: MM2 writes an offset sync about every 10 records
CHUNK = 15  # records produced per partition at a time while MM2 runs


def records(tag: str, n: int, start: int = 0) -> list[Record]:
    return [
        Record(f"k{i % 7}".encode(), f"{tag}-{i}".encode(), BASE + i * 10)
        for i in range(start, start + n)
    ]


def choose(syncs: list[int], rng: random.Random) -> dict[str, int]:
    """Positions on a partition from MM2's sync upstream offsets: between two, at one."""
    inner = sorted(s for s in syncs if 0 < s < N - 2)
    assert inner, f"MM2 wrote no offset sync inside the partition: {syncs}"
    at = inner[len(inner) // 2]
    between = next((o for o in range(at + 1, N - 1) if o not in syncs), at + 1)
    return {"at": at, "between": between, "random": rng.randrange(1, N)}


@pytest.fixture(scope="module", params=["default", "identity"])
def world(request, clusters, tmp_path_factory):
    src, dst = clusters
    identity = request.param == "identity"
    u = f"m{request.param[0]}{int(time.time() * 1000) % 10**8}"
    orders, tx, late = f"{u}-orders", f"{u}-tx", f"{u}-late"
    create_topics(src.config, {orders: 3, tx: 1, late: 1})
    rng = random.Random(29)
    tmp = tmp_path_factory.mktemp(f"mm2-{request.param}")
    with mirror_maker(
        src, dst, f"{u}-.*", f"{u}-.*", identity=identity, offset_lag_max=LAG, log_dir=tmp
    ) as mm:
        # Produced while MM2 runs, a chunk at a time, as a live topic is: MM2 writes offset
        # syncs as it copies (a backlog copied in one batch would leave only the first and last)
        for start in range(0, N, CHUNK):
            for p in range(3):
                produce(src.config, orders, p, records(f"o{p}", CHUNK, start))
            if start < 30:
                produce(src.config, late, 0, records("late", CHUNK, start))
            wait_replicated(mm, [orders, late])
        # 10 committed transactions of 3 records: records at 4k..4k+2, a marker at 4k+3
        tx_offsets = produce_transactions(
            src.config, tx, 0, [records("tx", 3, 3 * k) for k in range(10)]
        )
        assert tx_offsets == [i + i // 3 for i in range(30)]
        wait_replicated(mm, [tx], records={(tx, 0): 30})
        last = {**{(orders, p): N - 1 for p in range(3)}, (tx, 0): 38, (late, 0): 29}
        syncs = wait_offset_syncs(mm, last)
        at = {p: choose(syncs[(orders, p)], rng) for p in range(3)}
        source = {
            f"{u}-between": {(orders, 0): at[0]["between"]},
            f"{u}-at": {(orders, 1): at[1]["at"]},
            f"{u}-zero": {(orders, 2): 0, (orders, 0): 0},
            f"{u}-random": {(orders, p): at[p]["random"] for p in range(3)},
            f"{u}-txmid": {(tx, 0): 13},  # read 4k..4k+1 of transaction 3: next is 14
            f"{u}-txmarker": {(tx, 0): 19},  # a marker: the next record is at 20
            f"{u}-late": {(late, 0): 12},
        }
        for group, offsets in source.items():
            commit_offsets(src.config, group, offsets)
        wait_synced(mm, {g: list(o) for g, o in source.items()})
    # MM2 stopped: the `late` partition moves on without it (the group consumed records MM2
    # has not copied)
    produce(src.config, late, 0, records("late", 30, start=30))
    source[f"{u}-late"] = {(late, 0): 45}
    commit_offsets(src.config, f"{u}-late", source[f"{u}-late"])
    rename = [] if identity else [{"match": "^(.*)$", "replace": "source.\\1"}]
    config = write_migrate_config(
        tmp, src, dst, u, topics={"rename": rename}, reader={"timeout_ms": 10000}
    )
    return {
        "u": u,
        "mm": mm,
        "src": src,
        "dst": dst,
        "config": config,
        "source": source,
        "syncs": syncs,
        "at": at,
        "topics": (orders, tx, late),
        "reads": {},
    }


def records_of(world, side: str, topic: str, partition: int) -> list:
    """One partition's records on "src" or "dst" (the remote topic), read once per state of
    the clusters (`world["reads"]` is emptied when records are produced)."""
    name = topic if side == "src" else world["mm"].remote_topic(topic)
    if (side, name) not in world["reads"]:
        world["reads"][(side, name)] = read_all(world[side].config, name)
    return [r for r in world["reads"][(side, name)] if r.partition == partition]


def next_copy(world, topic: str, partition: int, committed: int) -> tuple[int | None, list]:
    """The destination offset of the copy of the source record at or after `committed` (found
    by value), or None if MM2 has not copied it; and the destination partition's records."""
    following = [r for r in records_of(world, "src", topic, partition) if r.offset >= committed]
    copies = records_of(world, "dst", topic, partition)
    where = {r.value: r.offset for r in copies}
    return where.get(following[0].value), copies


def counted(copies, committed: int, exact: int) -> int:
    """committed - exact in records a plain consumer reads between the two offsets."""
    low, high = sorted((committed, exact))
    n = sum(1 for r in copies if low <= r.offset < high)
    return n if committed >= exact else -n


def audit_rows(world) -> dict[tuple[str, str, int], dict]:
    result = run_job("audit", "--config", world["config"], "-o", "json")
    doc = json.loads(result.stdout)
    rows = {(r["group"], r["topic"], r["partition"]): r for r in doc["rows"]}
    return {"code": result.code, "stderr": result.stderr, "rows": rows}


def check_reads_on(world, group: str) -> None:
    """A consumer of `group` on the destination reads exactly the source's records from the
    group's committed offset on, in order (key, value, timestamp)."""
    mm = world["mm"]
    for (topic, p), committed in world["source"][group].items():
        want = [r.content for r in records_of(world, "src", topic, p) if r.offset >= committed]
        got = [
            r.content
            for r in consume_from_committed(world["dst"].config, group, mm.remote_topic(topic))
            if r.partition == p
        ]
        assert got == want, (group, topic, p, got[:2], want[:2])


def test_audit_counts_mm2_translation_then_migrate_lands_exactly(world):
    u, mm, source = world["u"], world["mm"], world["source"]
    late_group, late_topic = f"{u}-late", world["topics"][2]
    assert world["at"][1]["at"] in world["syncs"][(world["topics"][0], 1)]
    assert world["at"][0]["between"] not in world["syncs"][(world["topics"][0], 0)]
    audited = audit_rows(world)
    rows = audited["rows"]
    assert audited["code"] == 75, audited["stderr"]  # only the late group is PENDING
    verdicts = set()
    for group, offsets in source.items():
        translated = committed_offsets(world["dst"].config, group)
        for (topic, p), committed in offsets.items():
            remote = mm.remote_topic(topic)
            row = rows[(group, remote, p)]
            assert row["committed_offset"] == translated[(remote, p)], (group, row)
            exact, copies = next_copy(world, topic, p, committed)
            if group == late_group:
                assert exact is None and row["verdict"] == "PENDING", row
                continue
            assert row["exact_offset"] == exact, (group, row)
            assert row["difference"] == counted(copies, row["committed_offset"], exact), row
            verdicts.add(row["verdict"])
    # MM2 left groups behind (the point of the exercise) and got some exactly
    assert {"BEHIND", "EXACT"} <= verdicts, verdicts

    first = run_job("migrate", "--config", world["config"], "--execute", "--quiet")
    assert first.code == 75, first.stderr  # the late group waits for MM2
    for group in source:
        if group != late_group:
            check_reads_on(world, group)
    before = committed_offsets(world["dst"].config, late_group)

    # MM2 back: it copies the rest and moves the late group forward itself, behind again
    with mirror_maker(
        world["src"], world["dst"], f"{u}-.*", f"{u}-.*", identity=mm.identity, offset_lag_max=LAG
    ) as again:
        wait_replicated(again, [late_topic])
        remote = (again.remote_topic(late_topic), 0)
        deadline = time.monotonic() + 120
        while committed_offsets(world["dst"].config, late_group) == before:
            assert time.monotonic() < deadline, "MM2 did not move the late group"
            time.sleep(0.5)
        wait_synced(again, {late_group: [(late_topic, 0)]})
    world["reads"].clear()
    row = audit_rows(world)["rows"][(late_group, remote[0], 0)]
    exact, copies = next_copy(world, late_topic, 0, 45)
    assert row["exact_offset"] == exact is not None
    assert row["difference"] == counted(copies, row["committed_offset"], exact), row
    second = run_job("migrate", "--config", world["config"], "--execute", "--quiet")
    assert second.code == 0, second.stderr
    for group in source:
        check_reads_on(world, group)
