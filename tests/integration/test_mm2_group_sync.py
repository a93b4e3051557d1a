"""Real MirrorMaker 2 kept running after Ferry migrated the groups (`ferry.testing.mm2`): what
its group sync does to them once the destination consumers start, with the sync on, off
(`sync.group.offsets.enabled=false` on the source->destination flow) and with the migrated
groups excluded (`groups.exclude`).

Each test plays one cutover on a source cluster and a destination behind a `FaultProxy`. MM2
copies a live topic and syncs the groups' offsets, behind; then it is restarted with the
mode's setting (the README's step before `migrate --execute`) and keeps running, every
interval one second. Ferry migrates g1 and g2 exactly (at the source offsets, which identity
replication of a whole topic keeps). Then a real consumer of g1 starts on the destination: it
reads a few records from each partition from Ferry's offset, commits, and leaves.

- `test_mm2_group_sync_after_a_failed_refresh`: the consumer stays a few sync intervals and
  leaves; then one refresh's describe of the destination groups fails (swallowed by the proxy
  until MM2's admin call times out; nothing else is touched). Sync on: MM2 writes its own
  translation over both groups — Ferry's offsets and the consumer's commit alike — and every
  partition is `BEHIND` in `audit`, at MM2's checkpoint. Sync off or groups excluded: nothing
  moves back — g1 `AHEAD` by what its consumer read, g2 `EXACT`.
- `test_mm2_group_sync_when_consumers_leave_between_its_refresh_and_sync`: no fault; MM2 also
  syncs 30 more groups; the consumer leaves the moment MM2's refresh has described the group
  with it as a member, before MM2's sync: MM2 writes its translation over the consumer's
  commit, and `audit` shows g1 `BEHIND`.

`audit` (the real job) runs after MM2 stopped; each row's `committed_offset` is checked against
the offsets the group holds, and a plain consumer of g2 reads next what the row says.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import pytest
from confluent_kafka import TopicPartition

from ferry.testing.brokers import start_broker
from ferry.testing.mm2 import (
    MirrorMaker,
    checkpoints,
    mirror_maker,
    wait_offset_syncs,
    wait_replicated,
    wait_synced,
)
from ferry.testing.mm2_group_sync import (
    REFRESH_STEP,
    SHORT_DESTINATION_ADMIN_TIMEOUTS,
    SYNC_STEP,
    fail_next_group_describe,
    logged,
    logged_lines,
    sync_runs,
    wait_logged,
)
from ferry.testing.produce import Record, commit_offsets, create_topics, produce
from ferry.testing.proxy import API_CONSUMER_GROUP_DESCRIBE, API_DESCRIBE_GROUPS
from ferry.testing.replicate import committed_offsets, consume_from_committed, read_all

from .jobrunner import run_job, write_migrate_config

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.alone]

BASE = 1_760_000_000_000
N = 60  # records per partition
LAG = 10  # offset.lag.max: an offset sync about every 10 records
CHUNK = 15  # records produced per partition at a time while MM2 copies
READ = 4  # records g1's destination consumer reads from each partition
STAY_S = 4.0  # how long it stays in the group after its commit: about four sync intervals
FILLERS = 30  # more groups MM2 syncs in the window test: its refresh takes longer
WINDOW_ATTEMPTS = 8
TASK_START = "checkpointing"  # MM2: `checkpointing N consumer groups source->destination: [...]`

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


class DestinationConsumer:
    """A real consumer of a migrated group on the destination (classic protocol, librdkafka's
    default): it joins, reads READ records from each partition from the group's committed
    offsets, commits them, and leaves when told."""

    def __init__(self, config: dict, group: str, topic: str) -> None:
        from confluent_kafka import Consumer

        self.group = group
        self.consumer = Consumer(
            {**config, "group.id": group, "enable.auto.commit": False, "session.timeout.ms": 30000}
        )
        self.consumer.subscribe([topic])
        self.read: dict[tuple[str, int], list[int]] = {}
        deadline = time.monotonic() + 60
        while len(self.read) < 2 or any(len(v) < READ for v in self.read.values()):
            assert time.monotonic() < deadline, f"the consumer of {group} read only {self.read}"
            message = self.consumer.poll(0.5)
            if message is None or message.error():
                continue
            offsets = self.read.setdefault((message.topic(), message.partition()), [])
            if len(offsets) < READ:
                offsets.append(message.offset())
        self.committed = {k: v[-1] + 1 for k, v in self.read.items()}
        self.consumer.commit(
            offsets=[TopicPartition(t, p, o) for (t, p), o in self.committed.items()],
            asynchronous=False,
        )

    @property
    def first(self) -> dict[tuple[str, int], int]:
        """The offset of the first record it read per partition."""
        return {k: v[0] for k, v in self.read.items()}

    def stay(self, seconds: float) -> None:
        until = time.monotonic() + seconds
        while time.monotonic() < until:
            self.consumer.poll(0.1)

    def leave(self) -> None:
        self.consumer.close()


@dataclass
class Cutover:
    mm: MirrorMaker
    topic: str
    config: str  # Ferry's migrate/audit config: groups g1 and g2
    source: dict[str, dict[tuple[str, int], int]]  # where each source group stopped
    g1: str
    g2: str
    other: str  # a group MM2 syncs in every mode, Ferry never


@contextmanager
def cutover(mode: str, src, dst, tmp_path, fillers: int = 0) -> Iterator[Cutover]:  # noqa: ANN001
    """MM2 copies a live topic and syncs the groups' offsets, behind; it is restarted with the
    mode's settings and keeps running (yielded, running); Ferry migrates g1 and g2 to exact.
    `fillers` more groups on the topic are synced by MM2 alone (a MirrorMaker that syncs more
    groups: each adds to the refresh before every sync)."""
    u = f"gs{list(MODES).index(mode)}{int(time.time() * 1000) % 10**8}"
    topic = f"{u}-orders"
    g1, g2 = f"{u}-g1", f"{u}-g2"
    create_topics(src.config, {topic: 2})
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
            # synced by MM2 alone in every mode, so its group sync has work in every mode
            f"{u}-mm2only": {(topic, p): spots[p][len(spots[p]) // 2] for p in range(2)},
        }
        for i in range(fillers):
            source[f"{u}-filler{i:03}"] = {
                (topic, p): spots[p][i % len(spots[p])] for p in range(2)
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
        wait_logged(mm, TASK_START)
        # The README's check before `migrate --execute`: the newest start no longer names them
        started = wait_task_started_without(mm, [g1, g2]) if mode == "excluded" else 0
        if mode != "sync_off":
            # MM2's group sync runs during the cutover
            wait_logged(mm, f"{SYNC_STEP} took", after=started)
        migrated = run_job("migrate", "--config", config, "--execute", "--quiet")
        assert migrated.code == 0, migrated.stderr
        for group in (g1, g2):
            assert committed_offsets(dst.config, group) == source[group], group
        yield Cutover(mm, topic, config, source, g1, g2, f"{u}-mm2only")


def wait_task_started_without(mm: MirrorMaker, groups: list[str], timeout_s: float = 60) -> float:
    """Until MM2's newest checkpoint task start line names none of `groups`; returns its time.
    A restarted MM2 may first start the task with its previous run's list (from its config
    topic) and restart it with the new one a second later."""
    deadline = time.monotonic() + timeout_s
    while True:
        starts = logged_lines(mm, TASK_START)
        if starts:
            at, line = starts[-1]
            if not set(groups) & set(line[line.rindex("[") + 1 : line.rindex("]")].split(", ")):
                return at
        assert time.monotonic() < deadline, (groups, starts[-1:])
        time.sleep(0.25)


def check_plain_consumer(c: Cutover, src, dst, group: str, rows: dict) -> None:  # noqa: ANN001
    """A plain consumer of `group` reads next what audit's rows say: `difference` records
    again, then the copy of the record after the source group's last one."""
    originals = read_all(src.config, c.topic)
    for p in range(2):
        row, stop = rows[(group, p)], c.source[group][(c.topic, p)]
        got = [r for r in consume_from_committed(dst.config, group, c.topic) if r.partition == p]
        assert got[0].offset == row["committed_offset"], row
        again = [r for r in got if r.offset < stop]
        assert len(again) == -row["difference"], (row, len(again))
        following = next(r for r in originals if r.partition == p and r.offset == stop)
        assert got[len(again)].content == following.content


@pytest.mark.parametrize("mode", list(MODES))
def test_mm2_group_sync_after_a_failed_refresh(mode, cluster, destination, tmp_path):
    src, dst = cluster, destination
    started = time.monotonic()
    with cutover(mode, src, dst, tmp_path) as c:
        mm, g1, g2 = c.mm, c.g1, c.g2
        # The destination consumers start: g1's reads from exactly where Ferry put it, commits,
        # stays a few of MM2's sync intervals, leaves; g2's have not started yet
        joined = time.time()
        consumer = DestinationConsumer(dst.config, g1, c.topic)
        assert consumer.first == c.source[g1], consumer.read
        consumer.stay(STAY_S)
        consumer.leave()
        refused = logged(mm, f"Unable to sync offsets for consumer group {g1}", joined)

        # MM2's refresh fails once, then MM2 syncs a few times more
        by_describe, failed_at = fail_next_group_describe(mm, dst.proxy)
        assert by_describe == (mode != "sync_off")  # with its sync off MM2 describes nothing
        if mode == "sync_off":
            time.sleep(4)
        else:
            wait_logged(mm, f"{SYNC_STEP} took", count=3, after=failed_at + 5)
        # counted from the consumer's join: a restarted MM2's first task, started with the
        # previous run's groups, may log the same error for them as it is stopped
        describe_failed = logged(mm, f"Error querying for consumer group {g1}", joined)
        other_failed = logged(mm, f"Error querying for consumer group {c.other}", joined)
        syncs_run = sync_runs(mm, after=joined)
        mm2_translation = checkpoints(mm)

    code, rows = audit(c.config)
    held = {g: committed_offsets(dst.config, g) for g in (g1, g2)}
    for (group, p), row in rows.items():
        assert row["committed_offset"] == held[group][(c.topic, p)], row
        assert row["exact_offset"] == c.source[group][(c.topic, p)], row
    print(
        {
            "mode": mode,
            "source": {g: c.source[g] for g in (g1, g2)},
            "held": held,
            "mm2 syncs since the consumer joined": syncs_run,
            "syncs refused (g1 had members)": len(refused),
            "describe failures logged for g1": len(describe_failed),
            "seconds": round(time.monotonic() - started),
            "log": str(mm.log_path),
        }
    )
    if mode == "sync_on":
        # MM2 wrote its checkpointed translation over both groups: moved back, Ferry's offsets
        # and g1's consumer's commit alike, and `audit` shows each partition BEHIND by it
        assert describe_failed, mm.log_tail(20)
        for group in (g1, g2):
            assert held[group] == {
                (t, p): mm2_translation[(group, t, p)] for t, p in c.source[group]
            }, (group, held, mm2_translation)
        assert {r["verdict"] for r in rows.values()} == {"BEHIND"}, rows
        assert code == 0  # BEHIND does not fail an audit: the verdicts tell it
    else:
        # excluded: MM2 still syncs (and failed to describe) its other group, never g1 or g2
        assert (not describe_failed, bool(other_failed)) == (True, mode == "excluded")
        assert held == {g1: consumer.committed, g2: c.source[g2]}, held
        for p in range(2):
            assert rows[(g1, p)]["verdict"] == "AHEAD" and rows[(g1, p)]["difference"] == READ
            assert rows[(g2, p)]["verdict"] == "EXACT" and rows[(g2, p)]["difference"] == 0
        assert code == 1  # g1 AHEAD and not live: what its consumer read, not a loss
    check_plain_consumer(c, src, dst, g2, rows)


def describes(proxy) -> int:  # noqa: ANN001
    """Classic group describes (DescribeGroups) the destination has received so far: Kafka's
    admin client asks ConsumerGroupDescribe first and, for a classic group (what librdkafka
    joins by default), learns its state from the DescribeGroups that follows."""
    return proxy.requests.get(API_DESCRIBE_GROUPS, 0)


def test_mm2_group_sync_when_consumers_leave_between_its_refresh_and_sync(
    cluster, destination, tmp_path
):
    """No fault at all: g1's consumer leaves (a restart, a deploy) right after MM2's refresh
    described g1 with it as a member, before MM2's sync. The test aims the leave at the moment
    the describe reaches the destination and tries up to WINDOW_ATTEMPTS times."""
    src, dst = cluster, destination
    started = time.monotonic()
    attempts = []
    with cutover("sync_on", src, dst, tmp_path, fillers=FILLERS) as c:
        mm, g1 = c.mm, c.g1
        refresh_ms = [int(line.split(" took ")[1].split()[0]) for line in _refresh_lines(mm)]
        for _ in range(WINDOW_ATTEMPTS):
            before = committed_offsets(dst.config, g1)
            consumer = DestinationConsumer(dst.config, g1, c.topic)
            assert consumer.first == before, (consumer.read, before)
            consumer.stay(1.5)  # at least one refresh sees the member
            seen = describes(dst.proxy)
            deadline = time.monotonic() + 10
            while describes(dst.proxy) == seen and time.monotonic() < deadline:
                consumer.consumer.poll(0.005)
            consumer.leave()
            left_at = time.time()
            wait_logged(mm, f"{SYNC_STEP} took", count=2, after=left_at)
            held = committed_offsets(dst.config, g1)
            attempts.append((consumer.committed, held))
            if held != consumer.committed:
                break
        mm2_translation = checkpoints(mm)
    print(
        {
            "attempts (consumer's commit, held after)": attempts,
            "refresh ms": refresh_ms,
            "describes (ConsumerGroupDescribe, DescribeGroups)": (
                dst.proxy.requests.get(API_CONSUMER_GROUP_DESCRIBE),
                dst.proxy.requests.get(API_DESCRIBE_GROUPS),
            ),
            "seconds": round(time.monotonic() - started),
            "log": str(mm.log_path),
        }
    )
    assert held == {(t, p): mm2_translation[(g1, t, p)] for t, p in c.source[g1]}, attempts
    code, rows = audit(c.config)
    for p in range(2):
        row = rows[(g1, p)]
        assert row["verdict"] == "BEHIND" and row["committed_offset"] == held[(c.topic, p)], row


def _refresh_lines(mm: MirrorMaker) -> list[str]:
    return [line for _, line in logged_lines(mm, f"{REFRESH_STEP} took")]
