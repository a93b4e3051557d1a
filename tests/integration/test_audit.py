"""`audit` end to end on two real local brokers: destination offsets placed the way MirrorMaker
2 places them (at offset-sync points, behind), one placed ahead, exact ones, a group consuming
on the destination while the audit runs, a partition without a commit, transaction markers
between the committed and the exact offset, a replica that has not caught up (PENDING), and a
topic with another partition count on the destination (audited per destination partition).
Every field of every row is checked against the answer computed from how the world was built;
then the exit codes, the Delta table, and `migrate`'s dry-run `difference`."""

from __future__ import annotations

import csv
import json
import time
from collections.abc import Mapping

import pytest

from ferry.audit import AUDIT_SCHEMA
from ferry.testing.produce import (
    Record,
    commit_offsets,
    create_topics,
    produce,
    produce_transactions,
)
from ferry.testing.replicate import read_all, replicate

from .jobrunner import join_group, ledger_rows, run_job, write_migrate_config

pytestmark = pytest.mark.integration

BASE = 1_760_000_000_000
SHIFT = 20  # the destination of `orders` is the source from offset 20: exact = source - 20
SYNC_EVERY = 10  # MirrorMaker 2 offset syncs every 10 source offsets
TX = 3  # records per transaction on the destination of `tx` (then a marker offset)


def records(tag: str, n: int, base_ms: int = BASE) -> list[Record]:
    return [Record(f"k{i % 5}".encode(), f"{tag}-{i}".encode(), base_ms + i * 10) for i in range(n)]


def mm2_translation(committed: int) -> int:
    """MirrorMaker 2's translation (since KAFKA-12468): the latest offset sync at or before
    the committed offset, downstream + 1 unless the group sits exactly on it."""
    upstream = committed // SYNC_EVERY * SYNC_EVERY
    downstream = upstream - SHIFT
    return downstream if committed == upstream else downstream + 1


def tx_offset(i: int) -> int:
    """Destination offset of record i of `tx`: a marker offset after every TX records."""
    return i + i // TX


@pytest.fixture(scope="module")
def world(clusters, tmp_path_factory):
    src, dst = clusters
    u = f"a{int(time.time() * 1000) % 10**8}"
    orders, tx, tail, resized = (f"{u}-{n}" for n in ("orders", "tx", "tail", "resized"))
    create_topics(src.config, {orders: 3, tx: 1, tail: 1, resized: 2})
    create_topics(dst.config, {orders: 3, tx: 1, tail: 1, resized: 3})
    for p in range(3):
        recs = records(f"o{p}", 60)
        produce(src.config, orders, p, recs)
        produce(dst.config, orders, p, recs[SHIFT:])
    tx_recs = records("tx", 30)
    produce(src.config, tx, 0, tx_recs)
    got = produce_transactions(
        dst.config, tx, 0, [tx_recs[i : i + TX] for i in range(0, len(tx_recs), TX)]
    )
    assert got == [tx_offset(i) for i in range(30)]
    # tail: the replica has copied 20 of 40 recent records; the window has not passed
    tail_recs = records("tail", 40, base_ms=int(time.time() * 1000) - 1000)
    produce(src.config, tail, 0, tail_recs)
    produce(dst.config, tail, 0, tail_recs[:20])
    for p in range(2):
        keyed = [
            Record(f"key-{p}-{i}".encode(), f"r{p}-{i}".encode(), BASE + i * 10 + p)
            for i in range(30)
        ]
        produce(src.config, resized, p, keyed)
    mapping = replicate(src.config, resized, dst.config, resized, 3)

    o, t = orders, tx
    source = {
        f"{u}-mm2": {(o, 0): 47, (o, 1): 50, (o, 2): 58},
        f"{u}-ahead": {(o, 0): 30},
        f"{u}-exact": {(o, 0): 45, (o, 1): 33},
        f"{u}-nocommit": {(o, 0): 40, (o, 1): 40},
        f"{u}-live": {(o, 0): 30},
        f"{u}-tx": {(t, 0): 14},  # next record 14, at destination offset 18
        f"{u}-txgap": {(t, 0): 15},  # exact 19 is a marker; record 15 is at 20
        f"{u}-pending": {(tail, 0): 35},
    }
    # the group on `resized` stopped at one instant: the first 15 records of each partition
    source[f"{u}-resized"] = {(resized, 0): 15, (resized, 1): 15}
    destination = {
        f"{u}-mm2": {(o, p): mm2_translation(c) for (_, p), c in source[f"{u}-mm2"].items()},
        f"{u}-ahead": {(o, 0): 14},
        f"{u}-exact": {(o, 0): 25, (o, 1): 13},
        f"{u}-nocommit": {(o, 0): 20},
        f"{u}-live": {(o, 0): 35},
        f"{u}-tx": {(t, 0): 25},
        f"{u}-txgap": {(t, 0): 20},
        f"{u}-pending": {(tail, 0): 10},
    }
    # Reconciled: D_q is the first record on q the group has not consumed.
    exact_q = {}
    for q in range(3):
        unconsumed = [o for (p, so), (qq, o) in mapping.items() if qq == q and so >= 15]
        exact_q[q] = min(unconsumed)
    assert exact_q[0] >= 2 and all(v > 0 for v in exact_q.values())
    destination[f"{u}-resized"] = {
        (resized, 0): exact_q[0] - 2,
        (resized, 1): exact_q[1],
        (resized, 2): exact_q[2] + 1,
    }
    for group, offsets in source.items():
        commit_offsets(src.config, group, offsets)
    for group, offsets in destination.items():
        commit_offsets(dst.config, group, offsets)
    tmp = tmp_path_factory.mktemp("audit")
    config = write_migrate_config(
        tmp, src, dst, u, audit={"path": str(tmp / "audit")}, reader={"timeout_ms": 10000}
    )
    assert len(read_all(dst.config, resized)) == 60
    return {
        "u": u,
        "dst": dst,
        "config": config,
        "tmp": tmp,
        "topics": {"orders": orders, "tx": tx, "tail": tail, "resized": resized},
        "exact_q": exact_q,
    }


@pytest.fixture(scope="module")
def live(world):
    """A member in the destination group `live` (an active, Stable group) while the tests that
    need it run; it never commits."""
    consumer = join_group(world["dst"].config, f"{world['u']}-live", world["topics"]["orders"])
    yield
    consumer.close()


def audit(world, *argv: str):  # noqa: ANN001, ANN201 - a JobResult
    return run_job("audit", "--config", world["config"], *argv)


def by_key(rows) -> dict[tuple[str, str, int], dict]:  # noqa: ANN001
    return {(r["group"], r["topic"], r["partition"]): r for r in rows}


FIELDS = ("committed_offset", "exact_offset", "difference", "verdict", "is_live", "group_state")


def expected_rows(world: Mapping) -> dict[tuple[str, str, int], tuple]:
    """(group, topic, partition) → the FIELDS of its row."""
    u, t, q = world["u"], world["topics"], world["exact_q"]
    o, r = t["orders"], t["resized"]
    empty = "EMPTY"
    return {
        # MM2: 47 -> 21 (exact 27): 6 records again; 50 is a sync point: exact; 58 -> 31 (38)
        (f"{u}-mm2", o, 0): (21, 27, -6, "BEHIND", False, empty),
        (f"{u}-mm2", o, 1): (30, 30, 0, "EXACT", False, empty),
        (f"{u}-mm2", o, 2): (31, 38, -7, "BEHIND", False, empty),
        (f"{u}-ahead", o, 0): (14, 10, 4, "AHEAD", False, empty),
        (f"{u}-exact", o, 0): (25, 25, 0, "EXACT", False, empty),
        (f"{u}-exact", o, 1): (13, 13, 0, "EXACT", False, empty),
        (f"{u}-nocommit", o, 0): (20, 20, 0, "EXACT", False, empty),
        (f"{u}-nocommit", o, 1): (None, 20, None, "NO_COMMIT", False, empty),
        (f"{u}-live", o, 0): (35, 10, 25, "AHEAD", True, "STABLE"),
        # 7 offsets [18, 25), 2 of them markers: 5 records skipped
        (f"{u}-tx", t["tx"], 0): (25, 18, 5, "AHEAD", False, empty),
        (f"{u}-txgap", t["tx"], 0): (20, 19, 0, "EXACT", False, empty),
        (f"{u}-pending", t["tail"], 0): (10, None, None, "PENDING", False, empty),
        (f"{u}-resized", r, 0): (q[0] - 2, q[0], -2, "BEHIND", False, empty),
        (f"{u}-resized", r, 1): (q[1], q[1], 0, "EXACT", False, empty),
        (f"{u}-resized", r, 2): (q[2] + 1, q[2], 1, "AHEAD", False, empty),
    }


def test_every_row_and_the_summary(world, live):
    u, orders = world["u"], world["topics"]["orders"]
    result = audit(world, "-o", "json")
    assert result.code == 1, result.stderr  # AHEAD on stopped groups, and a PENDING row
    doc = json.loads(result.stdout)
    assert set(doc) == {"run_id", "audited_at", "exit_code", "total", "groups", "rows"}
    rows = by_key(doc["rows"])
    expected = expected_rows(world)
    assert {k: tuple(r[f] for f in FIELDS) for k, r in rows.items()} == expected
    for key, row in rows.items():
        assert row["is_counted"] is (None if row["difference"] is None else True), key
        assert row["members"] >= 0 and row["source_state"] == "EMPTY", key
        if row["verdict"] in ("BEHIND", "AHEAD") and not row["is_live"]:
            assert row["note"] is None, key
    tx, tail = world["topics"]["tx"], world["topics"]["tail"]
    assert "live on the destination" in rows[(f"{u}-live", orders, 0)]["note"]
    assert "19..19 hold no record" in rows[(f"{u}-txgap", tx, 0)]["note"]
    assert "auto.offset.reset" in rows[(f"{u}-nocommit", orders, 1)]["note"]
    assert "run again" in rows[(f"{u}-pending", tail, 0)]["note"]

    groups = {g["group"]: g for g in doc["groups"]}
    assert groups[f"{u}-mm2"]["records_delivered_again"] == 13
    assert groups[f"{u}-live"]["is_live"] and groups[f"{u}-live"]["records_skipped"] == 0
    assert groups[f"{u}-live"]["records_ahead_live"] == 25
    assert groups[f"{u}-live"]["exit_code"] == 0 and groups[f"{u}-ahead"]["exit_code"] == 1
    assert groups[f"{u}-pending"]["exit_code"] == 75
    total = doc["total"]
    assert (total["groups"], total["live_groups"], total["partitions"]) == (9, 1, 15)
    assert (total["exact"], total["behind"], total["ahead"]) == (6, 3, 4)
    assert (total["no_commit"], total["unresolved"], total["pending"]) == (1, 1, 1)
    assert total["records_delivered_again"] == 15 and total["records_skipped"] == 4 + 5 + 1
    assert total["records_ahead_live"] == 25 and total["exit_code"] == doc["exit_code"] == 1
    assert "audited 9 groups (1 live on the destination), 15 partitions" in result.stderr

    table = ledger_rows(world["tmp"] / "audit")
    assert [f.name for f in AUDIT_SCHEMA.fields] == list(table[0])
    assert {r["run_id"] for r in table} == {doc["run_id"]} and len(table) == 15
    assert {
        (r["group"], r["topic"], r["partition"]): tuple(r[f] for f in FIELDS) for r in table
    } == expected
    assert f"appended to {world['tmp'] / 'audit'} via deltalake" in result.stderr


def test_exit_codes_csv_and_the_counting_bound(world, live):
    u, orders = world["u"], world["topics"]["orders"]
    # behind, exact, without a commit, markers only, and ahead on a live group: fine; the
    # live group's 25 offsets are more than the bound lets be read
    ok = audit(
        world, "--group", f"{u}-(mm2|exact|nocommit|txgap|live)", "-o", "csv",
        "--set", "audit.path=", "--set", "audit.max_count_offsets=20",
    )  # fmt: skip
    assert ok.code == 0, ok.stderr
    lines = ok.stdout.splitlines()
    assert lines[0] == ",".join(
        [
            "group",
            "topic",
            "partition",
            "committed_offset",
            "exact_offset",
            "difference",
            "verdict",
            "is_live",
            "group_state",
            "note",
            "is_counted",
            "members",
            "source_state",
        ]
    )
    rows = by_key(csv.DictReader(lines))
    assert len(rows) == 9
    bounded = rows[(f"{u}-live", orders, "0")]
    assert (bounded["difference"], bounded["is_counted"], bounded["verdict"]) == (
        "25",
        "False",
        "AHEAD",
    )
    assert "upper bound" in bounded["note"] and "live on the destination" in bounded["note"]
    assert rows[(f"{u}-mm2", orders, "0")]["is_counted"] == "True"
    assert f"{u}-mm2: EMPTY: 3 partitions, 1 exact, 2 behind (13 records delivered again)" in (
        ok.stderr
    )
    assert "25 records read on the destination by its live consumers: expected" in ok.stderr
    # only a replica that has not caught up stands in the way: run again later
    pending = audit(world, "--group", f"{u}-pending", "-o", "json", "--set", "audit.path=")
    assert pending.code == 75, pending.stderr
    [row] = json.loads(pending.stdout)["rows"]
    assert (row["verdict"], row["committed_offset"], row["exact_offset"]) == ("PENDING", 10, None)
    assert audit(world, "--group", "(").code == 2
    assert audit(world, "--group", f"{u}-nothing-.*").code == 1


def test_migrate_dry_run_shows_the_difference_of_already_migrated_groups(world):
    u = world["u"]
    result = run_job(
        "migrate", "--config", world["config"], "-o", "json",
        "--set", f"groups.include=['{u}-(ahead|tx|mm2)']",
    )  # fmt: skip
    assert result.code == 0, result.stderr
    rows = {(r["group"], r["dst_partition"]): r for r in json.loads(result.stdout)}
    assert rows[(f"{u}-ahead", 0)]["group_status"] == "ALREADY_MIGRATED"
    assert rows[(f"{u}-ahead", 0)]["difference"] == 4
    assert rows[(f"{u}-tx", 0)]["difference"] == 5  # 7 offsets, 2 markers
    assert rows[(f"{u}-mm2", 0)]["group_status"] == "READY"
    assert rows[(f"{u}-mm2", 0)]["difference"] is None
