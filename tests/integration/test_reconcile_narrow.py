"""Reconcile mode's narrow frontier read on real brokers, against the whole-band read
(`matching.search: full`) and the replicator's own mapping, on partitions large enough to be
read narrowly (more than `ferry.migrate.search.SMALL_PARTITION` records).

One world, 2 → 3 partitions, 5 records per millisecond, one topic per case:
- `grow1` and `grow2`: the same records, `grow2` twice as many; groups stopped at the same
  point of the pattern and drained: the frontier read must not grow with the topic;
- `lag`: the replicator copies partition 1 200 records behind partition 0, so a group stopped
  at one instant has duplicates well past its frontier (a narrow read must find them all);
- `same`: six identical records straddling a committed offset (told apart by order only when
  every copy is read);
- `behind`: the replicator has not copied what the group consumed on partition 1 (PENDING).
Both reads are planned once (dry runs) and every test checks them.
"""

from __future__ import annotations

import json
import re
import uuid

import pytest

from ferry.migrate.frontier import FrontierSlice
from ferry.testing.produce import Record, commit_offsets, create_topics, produce
from ferry.testing.replicate import end_offsets, read_all, replicate

from .jobrunner import run_job, write_migrate_config
from .test_reconcile import drained, expected_plan, offsets_at, rows_by_group

pytestmark = pytest.mark.integration

BASE = 1_760_000_000_000
PER_MS = 5
N = 1_150  # records per source partition: the key pattern repeats every 23 records
STOP = N // 2  # where the stopped groups stopped (a multiple of 23 and of PER_MS)
LAG = 200


def records(n: int, tag: str) -> dict[int, list[Record]]:
    return {
        p: [Record(f"k{(i * 7 + p) % 23}".encode(), f"{tag}-{p}-{i}".encode(), BASE + i // PER_MS)
            for i in range(n)]
        for p in range(2)
    }  # fmt: skip


def lagging_steps(n: int, stop_p1: int | None = None) -> list[tuple[int, int]]:
    """Partition 0 copied LAG records ahead of partition 1 (up to `stop_p1` on partition 1)."""
    steps = [(0, LAG)]
    for k in range(25, n + 1, 25):
        if stop_p1 is None or k <= stop_p1:
            steps.append((1, k))
        steps.append((0, min(n, k + LAG)))
    return steps


@pytest.fixture(scope="module")
def world(clusters, tmp_path_factory):
    src, dst = clusters
    prefix = f"narrow-{uuid.uuid4().hex[:6]}"
    cases = {
        "grow1": (records(N, "g"), {"order": "time"}),
        "grow2": (records(2 * N, "g"), {"order": "time"}),
        "lag": (records(N, "l"), {"order": "uneven", "steps": lagging_steps(N)}),
        "same": (records(N, "s"), {"order": "time"}),
        "behind": (
            records(N, "b"),
            {"order": "uneven", "steps": lagging_steps(N, 500), "copy_rest": False},
        ),
    }
    for i in range(STOP - 2, STOP + 4):  # p0: six identical records, three of them consumed
        cases["same"][0][0][i] = Record(b"same", b"dup", BASE + STOP // PER_MS)
    topics = {name: f"{prefix}-{name}" for name in cases}
    create_topics(src.config, {t: 2 for t in topics.values()})
    create_topics(dst.config, {t: 3 for t in topics.values()})
    out = {}
    for name, (world_records, how) in cases.items():
        topic = topics[name]
        for p, rs in world_records.items():
            produce(src.config, topic, p, rs)
        source = read_all(src.config, topic)
        mapping = replicate(src.config, topic, dst.config, topic, 3, **how)
        n = len(world_records[0])
        stop = n // 2 if name.startswith("grow") else STOP
        groups = {
            f"{prefix}-{name}-at": offsets_at(source, BASE + stop // PER_MS),
            f"{prefix}-{name}-drained": drained(source),
        }
        if name == "same":
            groups = {f"{prefix}-{name}-at": {0: STOP + 1, 1: STOP}}
        if name == "behind":  # drained, it would be PENDING too
            del groups[f"{prefix}-{name}-drained"]
        for group, committed in groups.items():
            commit_offsets(src.config, group, {(topic, p): o for p, o in committed.items()})
        ends = end_offsets(dst.config, topic)
        out[name] = {g: expected_plan(mapping, c, ends) for g, c in groups.items()}
    directory = tmp_path_factory.mktemp("narrow")
    config = write_migrate_config(directory, src, dst, prefix, matching={"hash": ["key", "value"]})
    accept = ["--max-duplicates", "100000"]  # the `lag` group has hundreds
    narrow = run_job("migrate", "--config", config, "-o", "json", *accept)
    full = run_job(
        "migrate", "--config", config, "-o", "json", *accept, "--set", "matching.search=full"
    )
    return topics, out, narrow, full


def offsets_read(result, topic: str) -> tuple[int, int]:  # noqa: ANN001
    m = re.search(
        rf"reconcile: topic {re.escape(topic)}: read (\d+) source and (\d+) destination",
        result.stderr,
    )
    assert m, result.stderr
    return int(m.group(1)), int(m.group(2))


@pytest.mark.parametrize("read", ["narrow", "full"])
def test_both_reads_place_every_record_as_the_replica_says(world, read):
    topics, expected, narrow, full = world
    result = narrow if read == "narrow" else full
    assert result.code == 75, result.stderr  # only the `behind` group is left: PENDING
    rows = rows_by_group(result)
    for groups in expected.values():
        for group, want in groups.items():
            got = {q: (r["destination_offset"], r["duplicates"]) for q, r in rows[group].items()}
            assert got == want, (read, group)
            assert {r["unplaced"] for r in rows[group].values()} == {0}, (read, group)
            status = "PENDING" if group.endswith("behind-at") else "RECONCILED"
            assert {r["status"] for r in rows[group].values()} == {status}, (read, group)
    lag = next(want for g, want in expected["lag"].items() if g.endswith("-at"))
    assert sum(d for _, d in lag.values()) > 0  # the world does what it is for
    assert "75 consumed records of the band not on the destination yet" in result.stderr


def test_a_side_closed_by_growing_to_the_log_end_is_read_to_it():
    # The `behind` group's slice on partition 2: read to 405 at step 2 with its right side
    # open; growing it reaches the log end (575), which closes the side before it is read.
    s = FrontierSlice(lo_pos=330, hi_pos=341, log_start=0, log_end=575, before=16, after=64)
    s.is_left_closed = True
    s.read_bounds = s.bounds()
    assert not s.is_unread
    s.after *= 4
    s.close_at_limits()
    assert not s.is_open and s.is_unread and s.bounds() == (314, 575)


def test_narrow_read_reads_a_few_hundred_offsets_per_group(world):
    topics, expected, narrow, full = world
    for name, topic in topics.items():
        src_n, dst_n = offsets_read(narrow, topic)
        full_src, full_dst = offsets_read(full, topic)
        # The ±60 s windows hold every record of these topics: a full read reads them all.
        assert full_src >= (4 if name == "grow2" else 2) * N, (name, full_src)
        if name in ("lag", "behind"):
            # Partition 1 is copied 200 records (40 ms, a sixth of these small topics) late:
            # the read reaches its copies and the duplicates among them, or the records not
            # copied yet; the span is what grows with the lag, not with the topic.
            assert src_n + dst_n < 0.75 * (full_src + full_dst), (name, src_n, dst_n)
        else:  # the same for any size of topic: see the next test
            assert src_n + dst_n <= 400 * len(expected[name]), (name, src_n, dst_n)


def test_the_frontier_read_does_not_grow_with_the_topic(world):
    topics, _, narrow, _ = world
    assert offsets_read(narrow, topics["grow1"]) == offsets_read(narrow, topics["grow2"])


def test_plan_json_names_the_pending_group_and_leaves_the_others_resolved(world):
    _, expected, narrow, _ = world
    rows = json.loads(narrow.stdout)
    pending = {r["group"] for r in rows if r["status"] == "PENDING"}
    assert pending == {g for g in expected["behind"] if g.endswith("-at")}
