"""Real MirrorMaker 2 kept running after Ferry migrated the groups (`ferry.testing.mm2`): what
its group sync does to them once the destination consumers start, with the sync on, off
(`sync.group.offsets.enabled=false` on the source->destination flow) and with the migrated
groups excluded (`groups.exclude`).

Each test plays one cutover on a source cluster and a destination behind a `FaultProxy`. MM2
runs first with its group sync on, so the destination groups hold MM2's translation, behind;
then it is restarted with the mode's setting (the README's step before `migrate --execute`)
and keeps running. Ferry migrates two groups exactly (`audit` before: every partition BEHIND;
after `migrate --execute`: at the source offsets, which identity replication of a whole topic
keeps). Then the destination consumers start: a real consumer of g1 joins, reads a few records
from each partition, commits them and stays a few of MM2's sync intervals before it leaves (g2's
consumers have not started). Then MM2's refresh fails once (KAFKA-19794's other trigger): its
describe of the destination groups meets an outage a little longer than MM2's admin timeout,
and the destination is back before the sync's own write times out. MM2 stopped, `audit` (the
real job) tells what moved, cross-checked with the offsets the groups hold and with what a plain
consumer of g2 reads next:

- sync on: MM2 wrote its own translation over every migrated group — Ferry's and the
  consumer's offsets alike: every partition `BEHIND` by exactly what MM2's checkpoint lags;
- sync off / groups excluded: nothing moved back — g1 `AHEAD` by what its consumer read,
  g2 `EXACT`.
"""

from __future__ import annotations

import json
import time

import pytest
from confluent_kafka import TopicPartition

from ferry.testing.brokers import start_broker
from ferry.testing.mm2 import (
    SHORT_DESTINATION_ADMIN_TIMEOUTS,
    SYNC_STEP,
    checkpoints,
    fail_next_group_describe,
    logged,
    mirror_maker,
    sync_runs,
    wait_logged,
    wait_offset_syncs,
    wait_replicated,
    wait_synced,
)
from ferry.testing.produce import Record, commit_offsets, create_topics, produce
from ferry.testing.replicate import committed_offsets, consume_from_committed, read_all

from .jobrunner import run_job, write_migrate_config

pytestmark = [pytest.mark.integration, pytest.mark.slow]

BASE = 1_760_000_000_000
N = 60  # records per partition
LAG = 10  # offset.lag.max: an offset sync about every 10 records
CHUNK = 15  # records produced per partition at a time while MM2 copies
READ = 4  # records g1's destination consumer reads from each partition
STAY_S = 4.0  # how long it stays in the group after its commit: about four sync intervals

# What each mode adds to MM2's settings for the cutover (the flow-prefixed form the README
# gives); `{u}` is the test's prefix.
MODES = {
    "sync_on": {},
    "sync_off": {"source->destination.sync.group.offsets.enabled": "false"},
    "excluded": {
        "source->destination.groups.exclude": "{u}-g.*, console-consumer-.*, connect-.*, __.*"
    },
}


@pytest.fixture(scope="module")
def destination(tmp_path_factory):
    """A destination cluster whose every client connection goes through a `FaultProxy`."""
    dst = start_broker("mm2-sync-dst", tmp_path_factory.mktemp("mm2-sync"), proxied=True)
    yield dst
    dst.stop()


def records(tag: str, n: int, start: int) -> list[Record]:
    return [
        Record(f"k{i % 7}".encode(), f"{tag}-{i}".encode(), BASE + i * 10)
        for i in range(start, start + n)
    ]


def between(syncs: list[int], lowest: int) -> list[int]:
    """Offsets from `lowest` up where neither the offset nor the one before it carries an
    offset sync: MM2 translates a group stopped there from an older sync, behind."""
    return [o for o in range(lowest, N - READ - 1) if o not in syncs and o - 1 not in syncs]


def audit(config: str) -> tuple[int, dict[tuple[str, int], dict]]:
    result = run_job("audit", "--config", config, "-o", "json")
    doc = json.loads(result.stdout)
    return result.code, {(r["group"], r["partition"]): r for r in doc["rows"]}


def consume_then_leave(config: dict, group: str, topic: str) -> dict[tuple[str, int], list]:
    """A real consumer of `group`: joins, reads READ records from each partition, commits
    them, stays in the group STAY_S, leaves. Returns the offsets it read per partition."""
    from confluent_kafka import Consumer

    consumer = Consumer(
        {**config, "group.id": group, "enable.auto.commit": False, "session.timeout.ms": 30000}
    )
    consumer.subscribe([topic])
    read: dict[tuple[str, int], list[int]] = {}
    deadline = time.monotonic() + 60
    try:
        while len(read) < 2 or any(len(v) < READ for v in read.values()):
            assert time.monotonic() < deadline, f"the consumer of {group} read only {read}"
            message = consumer.poll(0.5)
            if message is None or message.error():
                continue
            offsets = read.setdefault((message.topic(), message.partition()), [])
            if len(offsets) < READ:
                offsets.append(message.offset())
        consumer.commit(
            offsets=[TopicPartition(t, p, o[-1] + 1) for (t, p), o in read.items()],
            asynchronous=False,
        )
        until = time.monotonic() + STAY_S
        while time.monotonic() < until:
            consumer.poll(0.2)
    finally:
        consumer.close()
    return read


@pytest.mark.parametrize("mode", list(MODES))
def test_mm2_group_sync_after_the_consumers_start(mode, cluster, destination, tmp_path):
    src, dst = cluster, destination
    u = f"gs{list(MODES).index(mode)}{int(time.time() * 1000) % 10**8}"
    topic = f"{u}-orders"
    g1, g2, other = f"{u}-g1", f"{u}-g2", f"{u}-mm2only"
    create_topics(src.config, {topic: 2})
    started = time.monotonic()

    # Before the cutover: MM2 copies a live topic and syncs every group's offsets, behind.
    with mirror_maker(
        src, dst, f"{u}-.*", f"{u}-.*", identity=True, offset_lag_max=LAG, log_dir=tmp_path
    ) as mm:
        for start in range(0, N, CHUNK):
            for p in range(2):
                produce(src.config, topic, p, records(f"o{p}", CHUNK, start))
            wait_replicated(mm, [topic])
        syncs = wait_offset_syncs(mm, {(topic, p): N - 1 for p in range(2)})
        spots = {p: between(syncs[(topic, p)], 20) for p in range(2)}
        source = {
            g1: {(topic, p): spots[p][0] for p in range(2)},
            g2: {(topic, p): spots[p][-1] for p in range(2)},
            other: {(topic, p): spots[p][len(spots[p]) // 2] for p in range(2)},
        }
        for group, offsets in source.items():
            commit_offsets(src.config, group, offsets)
        translated = wait_synced(mm, {g: list(o) for g, o in source.items()})
    for group in (g1, g2):
        for key, offset in source[group].items():
            assert translated[group][key] < offset, (group, key, translated, syncs)

    config = write_migrate_config(
        tmp_path, src, dst, u, groups={"include": [f"{u}-g.*"]}, reader={"timeout_ms": 10000}
    )
    settings = {k: v.format(u=u) for k, v in MODES[mode].items()}
    with mirror_maker(
        src,
        dst,
        f"{u}-.*",
        f"{u}-.*",
        identity=True,
        offset_lag_max=LAG,
        settings={**settings, **SHORT_DESTINATION_ADMIN_TIMEOUTS},
        log_dir=tmp_path,
    ) as mm:
        wait_logged(mm, "checkpointing")
        if mode != "sync_off":
            wait_logged(mm, f"{SYNC_STEP} took")  # MM2's group sync runs during the cutover

        # The cutover: audit, then Ferry moves both groups to exact
        code, rows = audit(config)
        assert code == 0 and {r["verdict"] for r in rows.values()} == {"BEHIND"}, rows
        migrated = run_job("migrate", "--config", config, "--execute", "--quiet")
        assert migrated.code == 0, migrated.stderr
        for group in (g1, g2):
            assert committed_offsets(dst.config, group) == source[group], group

        # The destination consumers start: g1's reads from exactly where Ferry put it
        joined = time.time()
        read = consume_then_leave(dst.config, g1, topic)
        assert {k: v[0] for k, v in read.items()} == source[g1], read
        consumer_commit = {k: v[-1] + 1 for k, v in read.items()}
        refused = logged(mm, f"Unable to sync offsets for consumer group {g1}")

        # MM2's refresh fails once, then MM2 syncs a few times more
        by_describe, failed_at = fail_next_group_describe(mm, dst.proxy)
        assert by_describe == (mode != "sync_off")  # with its sync off MM2 describes nothing
        if mode == "sync_off":
            time.sleep(4)
        else:
            wait_logged(mm, f"{SYNC_STEP} took", count=3, after=failed_at + 5)
        describe_failed = logged(mm, f"Error querying for consumer group {g1}")
        syncs_run = sync_runs(mm, after=joined)
        mm2_translation = checkpoints(mm)

    code, rows = audit(config)
    held = {g: committed_offsets(dst.config, g) for g in (g1, g2)}
    for (group, p), row in rows.items():
        assert row["committed_offset"] == held[group][(topic, p)], row
        assert row["exact_offset"] == source[group][(topic, p)], row
    report = {
        "mode": mode,
        "mm2 syncs while/after the consumer": syncs_run,
        "syncs refused (g1 had members)": len(refused),
        "describe failures logged for g1": len(describe_failed),
        "held": held,
        "seconds": round(time.monotonic() - started),
        "log": str(mm.log_path),
        "checkpoints": {k: v for k, v in mm2_translation.items() if k[0] in (g1, g2)},
    }
    print(report)
    if mode == "sync_on":
        # MM2 wrote its checkpointed translation over both groups: moved back, Ferry's offsets
        # and g1's consumer's commit alike, and `audit` shows each partition BEHIND by it
        assert describe_failed, mm.log_tail(20)
        for group in (g1, g2):
            assert held[group] == {
                (t, p): mm2_translation[(group, t, p)] for t, p in source[group]
            }, (group, held, mm2_translation)
        assert {r["verdict"] for r in rows.values()} == {"BEHIND"}, rows
        assert code == 0  # BEHIND does not fail an audit: the verdicts tell it
    else:
        assert held == {g1: consumer_commit, g2: source[g2]}, held
        for p in range(2):
            assert rows[(g1, p)]["verdict"] == "AHEAD" and rows[(g1, p)]["difference"] == READ
            assert rows[(g2, p)]["verdict"] == "EXACT" and rows[(g2, p)]["difference"] == 0
        assert code == 1  # g1 AHEAD and not live: what its consumer read, not a loss
    # A plain consumer of g2 reads next what audit's row says: `difference` records again,
    # then the record after the source group's last one
    originals = read_all(src.config, topic)
    for p in range(2):
        row, stop = rows[(g2, p)], source[g2][(topic, p)]
        got = [r for r in consume_from_committed(dst.config, g2, topic) if r.partition == p]
        assert got[0].offset == row["committed_offset"], row
        again = [r for r in got if r.offset < stop]
        assert len(again) == -row["difference"], (row, len(again))
        following = next(r for r in originals if r.partition == p and r.offset == stop)
        assert got[len(again)].content == following.content
