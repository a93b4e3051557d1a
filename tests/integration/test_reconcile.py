"""Reconcile mode end to end: topics re-partitioned by a replicator (4 → 7, 6 → 3, and a
forced reconcile at the same count), groups drained, stopped at one instant, stopped unevenly,
and identical records. The expected reconciled offsets come from where the test replicator
(`ferry.testing.replicate`) put every source record; a consumer started from the committed
destination offsets must then read every record the group had not consumed."""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Mapping, Sequence

import pytest

from ferry.testing.produce import Record, commit_offsets, create_topics, produce
from ferry.testing.replicate import (
    SourceRecord,
    committed_offsets,
    consume_from_committed,
    destination_partition,
    end_offsets,
    murmur2,
    read_all,
    replicate,
)

from .jobrunner import run_job, write_migrate_config

pytestmark = pytest.mark.integration

BASE = 1_760_000_000_000
Location = tuple[int, int]


def write_config(tmp_path, src, dst, unique: str, partitioning: str = "auto") -> str:
    rename = {"match": f"^{unique}-renamed$", "replace": f"mm2.{unique}-renamed"}
    return write_migrate_config(
        tmp_path,
        src,
        dst,
        unique,
        topics={"rename": [rename]},
        matching={"hash": ["key", "value"], "partitioning": partitioning},
    )


def migrate(cfg: str, *flags: str):  # noqa: ANN201 - a JobResult
    return run_job("migrate", "--config", cfg, "-o", "json", *flags)


def rows_by_group(result) -> dict[str, dict[int, dict]]:  # noqa: ANN001
    """group → dst_partition → row."""
    out: dict[str, dict[int, dict]] = {}
    for r in json.loads(result.stdout):
        out.setdefault(r["group"], {})[r["dst_partition"]] = r
    return out


def produce_source(config: Mapping[str, str], topic: str, records: Mapping[int, list[Record]]):
    for p, rs in records.items():
        produce(config, topic, p, rs)


def offsets_at(records: Sequence[SourceRecord], instant_ms: int) -> dict[int, int]:
    """A group stopped at one instant: on each source partition, the first record with a
    timestamp >= instant (the log end when there is none)."""
    out: dict[int, int] = {}
    for r in records:
        end = out.setdefault(r.partition, 0)
        if r.timestamp_ms < instant_ms and r.offset + 1 > end:
            out[r.partition] = r.offset + 1
    return out


def drained(records: Sequence[SourceRecord]) -> dict[int, int]:
    return offsets_at(records, 2**62)


def expected_plan(
    mapping: Mapping[Location, Location],
    committed: Mapping[int, int],
    dst_ends: Mapping[int, int],
) -> dict[int, tuple[int, int]]:
    """dst_partition → (D_q, duplicates): D_q is the first offset on q whose source record the
    group has not consumed (q's end when there is none), duplicates the consumed records at or
    after D_q."""
    consumed_at: dict[int, dict[int, bool]] = {q: {} for q in dst_ends}
    for (p, o), (q, dst_o) in mapping.items():
        consumed_at[q][dst_o] = o < committed[p]
    out = {}
    for q, end in dst_ends.items():
        d = min((o for o, c in consumed_at[q].items() if not c), default=end)
        dups = sum(1 for o, c in consumed_at[q].items() if c and o >= d)
        out[q] = (d, dups)
    return out


def content(r: SourceRecord) -> tuple:
    return (r.key, r.value, r.timestamp_ms)


def unconsumed(records: Sequence[SourceRecord], committed: Mapping[int, int]) -> Counter:
    return Counter(content(r) for r in records if r.offset >= committed[r.partition])


def check_no_loss(
    dst_config: Mapping[str, str],
    group: str,
    dst_topic: str,
    records: Sequence[SourceRecord],
    committed: Mapping[int, int],
) -> int:
    """A consumer of `group` started from its committed destination offsets receives every
    record the group had not consumed on the source; returns how many records it receives
    that the group had already consumed."""
    received = Counter(content(r) for r in consume_from_committed(dst_config, group, dst_topic))
    want = unconsumed(records, committed)
    lost = want - received
    assert not lost, f"{group}: {sum(lost.values())} unconsumed records skipped: {list(lost)[:5]}"
    return sum(received.values()) - sum(want.values())


def assert_committed(dst_config, group: str, dst_topic: str, plan: Mapping[int, int]) -> None:  # noqa: ANN001
    got = committed_offsets(dst_config, group, dst_topic)
    assert {q: got.get((dst_topic, q)) for q in plan} == dict(plan), group


def test_murmur2_matches_the_java_client():
    # Kafka's UtilsTest vectors; the partitioner masks the sign bit.
    assert murmur2(b"21") == -973932308
    assert murmur2(b"foobar") == -790332482
    assert murmur2(b"a-little-bit-long-string") == -985981536
    assert murmur2(b"a-little-bit-longer-string") == -1486304829
    assert murmur2(b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8") == -58897971
    assert murmur2(b"abc") == 479470107
    assert destination_partition(b"foobar", 7, 0) == (-790332482 & 0x7FFFFFFF) % 7
    assert [destination_partition(None, 3, i) for i in range(4)] == [0, 1, 2, 0]


def keyed_world(n_src: int, per_partition: int, tag: str) -> dict[int, list[Record]]:
    """Keyed records plus every 6th record without a key; timestamps 4 ms apart, equal across
    partitions (ties between partitions)."""
    return {
        p: [
            Record(
                None if i % 6 == 5 else f"k{(i * 7 + p) % 23}".encode(),
                f"{tag}-{p}-{i}".encode(),
                BASE + i * 4,
            )
            for i in range(per_partition)
        ]
        for p in range(n_src)
    }


@pytest.mark.parametrize(
    ("n_src", "n_dst", "renamed"), [(4, 7, False), (6, 3, True)], ids=["4to7", "6to3-renamed"]
)
def test_time_ordered_replica_is_reconciled_exactly(
    tmp_path, clusters, unique, n_src, n_dst, renamed
):
    src, dst = clusters
    src_topic = f"{unique}-renamed" if renamed else f"{unique}-t"
    dst_topic = f"mm2.{src_topic}" if renamed else src_topic
    create_topics(src.config, {src_topic: n_src})
    create_topics(dst.config, {dst_topic: n_dst})
    produce_source(src.config, src_topic, keyed_world(n_src, 40, "t"))
    records = read_all(src.config, src_topic)
    mapping = replicate(src.config, src_topic, dst.config, dst_topic, n_dst, order="time")
    assert len(mapping) == len(records) == n_src * 40
    ends = end_offsets(dst.config, dst_topic)

    groups = {
        f"{unique}-drained": drained(records),
        f"{unique}-at13": offsets_at(records, BASE + 13 * 4),  # ties across partitions
        f"{unique}-at29": offsets_at(records, BASE + 29 * 4 + 1),
        f"{unique}-fresh": offsets_at(records, BASE),  # nothing consumed: 0 everywhere
    }
    for group, committed in groups.items():
        commit_offsets(src.config, group, {(src_topic, p): o for p, o in committed.items()})

    result = migrate(write_config(tmp_path, src, dst, unique), "--execute")
    assert result.code == 0, result.stderr
    rows = rows_by_group(result)
    assert set(rows) == set(groups)
    for group, committed in groups.items():
        want = expected_plan(mapping, committed, ends)
        got = {q: (r["destination_offset"], r["duplicates"]) for q, r in rows[group].items()}
        assert got == want, group
        for r in rows[group].values():
            assert (r["dst_topic"], r["src_topic"]) == (dst_topic, src_topic)
            assert r["src_partition"] is None and r["committed_offset"] is None
            assert (r["status"], r["group_status"], r["unplaced"]) == ("RECONCILED", "COMMITTED", 0)
        assert_committed(dst.config, group, dst_topic, {q: d for q, (d, _) in want.items()})
        assert check_no_loss(dst.config, group, dst_topic, records, committed) == 0


def test_uneven_replicator_and_uneven_group(tmp_path, clusters, unique):
    src, dst = clusters
    topic = f"{unique}-t"
    create_topics(src.config, {topic: 4})
    create_topics(dst.config, {topic: 5})
    produce_source(src.config, topic, keyed_world(4, 40, "u"))
    records = read_all(src.config, topic)
    # Each source partition in order, the partitions unevenly: partition 1 lags behind the
    # others for most of the copy, partition 3 is copied in bursts.
    steps = [(0, 40), (3, 10), (2, 25), (1, 12), (3, 30), (2, 40), (1, 40), (3, 40)]
    mapping = replicate(src.config, topic, dst.config, topic, 5, order="uneven", steps=steps)
    assert len(mapping) == len(records)
    ends = end_offsets(dst.config, topic)

    uneven, done = f"{unique}-uneven", f"{unique}-drained"
    groups = {uneven: {0: 31, 1: 9, 2: 22, 3: 17}, done: drained(records)}
    for group, committed in groups.items():
        commit_offsets(src.config, group, {(topic, p): o for p, o in committed.items()})
    want = expected_plan(mapping, groups[uneven], ends)
    n_dups = sum(d for _, d in want.values())
    assert n_dups > 0  # the world does what it is for

    cfg = write_config(tmp_path, src, dst, unique)
    refused = migrate(cfg, "--execute")
    assert refused.code == 1, refused.stderr
    rows = rows_by_group(refused)
    got = {q: (r["destination_offset"], r["duplicates"]) for q, r in rows[uneven].items()}
    assert got == want
    assert sum(r["unplaced"] for r in rows[uneven].values()) == 0
    assert {r["group_status"] for r in rows[uneven].values()} == {"REFUSED"}
    assert {r["status"] for r in rows[uneven].values()} == {"RECONCILED"}
    assert re.search(rf"not migrated: {re.escape(uneven)}: .*\b{n_dups} duplicates", refused.stderr)
    assert committed_offsets(dst.config, uneven, topic) == {}  # nothing written for it
    assert {r["group_status"] for r in rows[done].values()} == {"COMMITTED"}
    assert {q: r["destination_offset"] for q, r in rows[done].items()} == ends
    assert check_no_loss(dst.config, done, topic, records, groups[done]) == 0

    one_short = migrate(cfg, "--max-duplicates", str(n_dups - 1))
    assert one_short.code == 1, one_short.stderr
    assert {r["group_status"] for r in rows_by_group(one_short)[uneven].values()} == {"REFUSED"}

    accepted = migrate(cfg, "--execute", "--max-duplicates", str(n_dups))
    assert accepted.code == 0, accepted.stderr
    rows = rows_by_group(accepted)
    assert {r["group_status"] for r in rows[uneven].values()} == {"COMMITTED"}
    assert {q: r["destination_offset"] for q, r in rows[uneven].items()} == {
        q: d for q, (d, _) in want.items()
    }
    assert_committed(dst.config, uneven, topic, {q: d for q, (d, _) in want.items()})
    # Every unconsumed record is received, and exactly the reported duplicates again.
    again = check_no_loss(dst.config, uneven, topic, records, groups[uneven])
    assert again == n_dups


def ambiguous(
    records: Sequence[SourceRecord],
    committed: Mapping[int, int],
    mapping: Mapping[Location, Location],
) -> set[tuple]:
    """Identities (key, value, timestamp) a group consumed some but not all copies of, spread
    over several source or destination partitions: which copy is which cannot be known, and
    reconcile may count all of them as not consumed."""
    sources: dict[tuple, list[SourceRecord]] = {}
    for r in records:
        sources.setdefault(content(r), []).append(r)
    out = set()
    for identity, rs in sources.items():
        consumed = sum(1 for r in rs if r.offset < committed[r.partition])
        spread = (
            len({r.partition for r in rs}) > 1
            or len({mapping[(r.partition, r.offset)][0] for r in rs}) > 1
        )
        if 0 < consumed < len(rs) and spread:
            out.add(identity)
    return out


def test_identical_records(tmp_path, clusters, unique):
    src, dst = clusters
    topic = f"{unique}-t"
    n_dst = 5
    create_topics(src.config, {topic: 3})
    create_topics(dst.config, {topic: n_dst})
    world = keyed_world(3, 40, "i")
    q_same = destination_partition(b"same0", n_dst, 0)
    key_x = next(
        k
        for k in (b"samex%d" % i for i in range(50))
        if destination_partition(k, n_dst, 0) != q_same
    )
    # p0 offsets 20..25: six identical keyed records (one source, one destination partition).
    for i in range(20, 26):
        world[0][i] = Record(b"same0", b"dup", BASE + 20 * 4 + 1)
    # one identical keyed record on p1 and one on p2 (offset 15 each): across source partitions.
    for p in (1, 2):
        world[p][15] = Record(key_x, b"dupx", BASE + 15 * 4 + 2)
    # p2 offsets 30..33: four identical records without a key (round-robin: several
    # destination partitions).
    for i in range(30, 34):
        world[2][i] = Record(None, b"nulldup", BASE + 30 * 4 + 3)
    produce_source(src.config, topic, world)
    records = read_all(src.config, topic)
    mapping = replicate(src.config, topic, dst.config, topic, n_dst, order="time")
    ends = end_offsets(dst.config, topic)
    at = {(r.partition, r.offset): r for r in records}

    a, b, done = f"{unique}-a", f"{unique}-b", f"{unique}-drained"
    groups = {
        # 3 of p0's 6 identical records consumed; key_x consumed on p1, not on p2
        a: {0: 23, 1: 16, 2: 15},
        # 2 of the 6 consumed, everything else before them too; key_x consumed on both
        # partitions; 1 of the 4 null-key copies consumed
        b: {0: 22, 1: 27, 2: 31},
        done: drained(records),
    }
    for group, committed in groups.items():
        commit_offsets(src.config, group, {(topic, p): o for p, o in committed.items()})

    result = migrate(
        write_config(tmp_path, src, dst, unique), "--execute", "--max-duplicates", "1000"
    )
    assert result.code == 0, result.stderr
    rows = rows_by_group(result)
    for group, committed in groups.items():
        want = expected_plan(mapping, committed, ends)
        unsure = ambiguous(records, committed, mapping)
        got = rows[group]
        assert {r["group_status"] for r in got.values()} == {"COMMITTED"}, group
        for q, (d, _) in want.items():
            # exact unless a copy of an ambiguous identity sits before D_q on q
            certain = not any(
                content(at[s]) in unsure for s, (dq, o) in mapping.items() if dq == q and o < d
            )
            if not any(content(at[s]) in unsure for s, (dq, _) in mapping.items() if dq == q):
                assert (got[q]["destination_offset"], got[q]["duplicates"]) == want[q], (group, q)
                assert got[q]["unplaced"] == 0, (group, q)
            elif certain:
                assert got[q]["destination_offset"] == d, (group, q, got[q], want[q])
            else:
                assert got[q]["destination_offset"] <= d, (group, q, got[q], want[q])
        again = check_no_loss(dst.config, group, topic, records, committed)
        dups = sum(r["duplicates"] for r in got.values())
        unplaced = sum(r["unplaced"] for r in got.values())
        assert dups <= again <= dups + unplaced, (group, dups, unplaced, again)
    # Group b consumed everything before p0's run and 2 of its 6 records: on their destination
    # partition it resumes at the third copy, exactly.
    copies = sorted(o for (p, so), (_, o) in mapping.items() if p == 0 and 20 <= so < 26)
    assert rows[b][q_same]["destination_offset"] == copies[2]
    assert rows[done][q_same]["destination_offset"] == ends[q_same]


def test_forced_reconcile_at_the_same_partition_count(tmp_path, clusters, unique):
    src, dst = clusters
    topic = f"{unique}-t"
    create_topics(src.config, {topic: 3})
    create_topics(dst.config, {topic: 3})
    produce_source(src.config, topic, keyed_world(3, 30, "f"))
    records = read_all(src.config, topic)
    mapping = replicate(src.config, topic, dst.config, topic, 3, order="time")
    assert any(p != q for (p, _), (q, _) in mapping.items())  # records did move
    ends = end_offsets(dst.config, topic)
    group = f"{unique}-g"
    committed = offsets_at(records, BASE + 17 * 4)
    commit_offsets(src.config, group, {(topic, p): o for p, o in committed.items()})

    result = migrate(write_config(tmp_path, src, dst, unique, "reconcile"), "--execute")
    assert result.code == 0, result.stderr
    rows = rows_by_group(result)[group]
    want = expected_plan(mapping, committed, ends)
    assert {q: (r["destination_offset"], r["duplicates"]) for q, r in rows.items()} == want
    assert {(r["status"], r["group_status"]) for r in rows.values()} == {
        ("RECONCILED", "COMMITTED")
    }
    assert check_no_loss(dst.config, group, topic, records, committed) == 0
