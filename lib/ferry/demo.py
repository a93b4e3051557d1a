"""`make demo`: a whole cutover on two local brokers, every job run through `spark-submit.sh`.

A source cluster with several topics and consumer groups; a destination that real MirrorMaker 2
(Apache Kafka's own, dedicated mode, default policy: `source.` topic prefix, original
timestamps; `ferry.testing.mm2`) copies to while the records are produced. Its first 30
records per partition were deleted on the source before MM2 started (retention had taken
them), so MM2 copied from offset 30 and every offset differs between the two; a run of
identical records sharing one millisecond sits right where a group stopped. MM2 also synced two
groups' offsets itself (`sync.group.offsets.enabled`), translated from its offset syncs: behind.

Then, one line per step: an `audit` of those translations (records that would be delivered
again), a `migrate` dry run (its plan printed), `--execute`, the next scheduled `--execute`
(every group already migrated: nothing moves), a read-back that checks every group landed
exactly, a second `audit` (all exact), the consumers starting on the destination watched by
`lag-snapshot` runs and a `lag-status` evaluation, and `decode-offsets` over the destination's
`__consumer_offsets`. A Structured Streaming query (Spark's own Kafka connector) read
`payments` on the source halfway through and stopped; its checkpoint is translated
(`migrate --checkpoint`, dry run then `--execute`), the query restarted on the destination,
and its sink checked: every source record exactly once. Every table lands under var/demo,
named in var/demo/overview.yaml for notebooks/ferry_overview.ipynb.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from ferry import kafka
from ferry.testing.brokers import local_brokers
from ferry.testing.mm2 import mirror_maker, wait_replicated, wait_synced
from ferry.testing.produce import Record, commit_offsets, create_topics, delete_records, produce
from ferry.testing.replicate import read_all

ROOT = Path(__file__).resolve().parents[2]
TOPICS = {"orders": 4, "payments": 2, "clicks": 2}
RECORDS_PER_PARTITION = 120
REPLICATED_FROM = 30  # MM2 started here: destination offset = source offset - 30
GROUPS = {
    # group: {(topic, partition): committed offset}
    "billing": {("orders", p): 98 for p in range(4)} | {("payments", 0): 60, ("payments", 1): 120},
    "analytics": {("clicks", 0): 45, ("clicks", 1): 110, ("orders", 2): 70},
    "fraud": {("payments", 0): 31, ("payments", 1): 77},
}
IDENTICAL_RUN = range(94, 101)  # offsets of identical records sharing one millisecond
# MM2 writes an offset sync about every so many records (offset.lag.max) and translates a
# group's offset from the last sync it kept at or before it; fraud is not among the groups it
# syncs (MM2's `groups` setting).
SYNC_EVERY = 25
SYNCED_GROUPS = ("billing", "analytics")
CHUNK = 15  # records produced per partition at a time while MM2 copies
# After the cutover the consumers start on the destination: records each reads per partition
# between two lag snapshots (fraud's consumer has not started).
READ_PER_SNAPSHOT = {"billing": 12, "analytics": 40, "fraud": 0}
SNAPSHOTS = 3
STREAMED = "payments"  # the topic a Structured Streaming query reads (stopped halfway)
STREAM_STOPS_AT = 75  # the query runs once the source holds this many records per partition

Offsets = Mapping[tuple[str, int], int]


def source_records(topic: str, partition: int, base_ms: int) -> list[Record]:
    records = []
    for i in range(RECORDS_PER_PARTITION):
        if topic == "orders" and i in IDENTICAL_RUN:
            # A retrying producer wrote the same order several times within one millisecond.
            records.append(Record(b"order-42", b'{"sku": 7, "qty": 1}', base_ms + 94_000))
        else:
            value = f'{{"{topic}": {i}, "p": {partition}}}'.encode()
            records.append(Record(f"k{i % 13}".encode(), value, base_ms + i * 1000))
    return records


def exact(offsets: Offsets) -> dict[tuple[str, int], int]:
    """Where a perfect migration puts a group: the same record on the `source.` copy."""
    return {(f"source.{t}", p): c - REPLICATED_FROM for (t, p), c in offsets.items()}


class Demo:
    """The demo's steps: each a `spark-submit.sh` run, told in one line."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.steps = 0
        self.started = time.monotonic()

    def run(
        self,
        job: str,
        config: Path,
        *args: str,
        label: str,
        ok: tuple[int, ...] = (0,),
        show_output: bool = False,
        summary: Callable[[str, str], str] | None = None,
    ) -> None:
        """Run one job; print one line (the command, exit code, time and the job's own summary
        line), or the whole output with `show_output` or when the exit code is not in `ok`."""
        self.steps += 1
        command = [str(ROOT / "spark-submit.sh"), job, "--config", str(config), *args]
        shown = " ".join([f"./spark-submit.sh {job} --config {config.name}", *args])
        t0 = time.monotonic()
        done = subprocess.run(command, capture_output=True, text=True, env={**os.environ})
        head = (
            f"demo: [{self.steps:>2}] {label}  $ {shown}  → exit {done.returncode}, "
            f"{time.monotonic() - t0:.0f} s"
        )
        if show_output or done.returncode not in ok:
            print(f"{head}\n{textwrap.indent(done.stdout.rstrip(), '        ')}")
        else:
            print(f"{head}: {(summary or _last_line)(done.stdout, done.stderr)}")
        if done.returncode not in ok:
            print(textwrap.indent(done.stderr.rstrip(), "        "), file=sys.stderr)
            raise DemoFailed(f"{label} exited {done.returncode}")


class DemoFailed(Exception):
    pass


def _last_line(stdout: str, stderr: str) -> str:
    lines = [ln for ln in stdout.splitlines() if ln.strip()]
    return lines[-1] if lines else (stderr.strip().splitlines() or ["(no output)"])[-1]


def _audit_line(stdout: str, stderr: str) -> str:
    """The audit's total line (its summary goes to stderr)."""
    totals = [ln for ln in stderr.splitlines() if ln.startswith("audited ")]
    return totals[-1] if totals else _last_line(stdout, stderr)


def main() -> int:
    # A fixed place (gitignored), so notebooks/ferry_overview.ipynb finds this demo's tables.
    work = ROOT / "var" / "demo"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    print(f"demo: working in {work}")
    with local_brokers("source", "destination", log_dir=work / "logs") as (source, dest):
        print(f"demo: source broker on {source.bootstrap}, destination on {dest.bootstrap}")
        try:
            return story(Demo(work), source, dest)
        except DemoFailed as exc:
            print(f"demo: stopped: {exc}", file=sys.stderr)
            return 1


def story(demo: Demo, source, dest) -> int:  # noqa: ANN001 - two LocalBrokers
    work = demo.work
    # The demo's own clients: librdkafka's info lines (a client closed with an event still
    # queued) would interleave with the story.
    src_conf = {**source.config, "log_level": "4"}
    dst_conf = {**dest.config, "log_level": "4"}
    base_ms = int(time.time() * 1000) - 3_600_000
    create_topics(src_conf, TOPICS)
    partitions = [(t, p) for t, n in TOPICS.items() for p in range(n)]
    records = {(t, p): source_records(t, p, base_ms) for t, p in partitions}
    for (topic, p), recs in records.items():
        produce(src_conf, topic, p, recs[:REPLICATED_FROM])
    delete_records(src_conf, {tp: REPLICATED_FROM for tp in partitions})
    print(
        f"demo: starting MirrorMaker 2 (source -> destination, offset syncs about every "
        f"{SYNC_EVERY} records, groups {' and '.join(SYNCED_GROUPS)} synced)"
    )
    with mirror_maker(
        source,
        dest,
        "|".join(TOPICS),
        "|".join(SYNCED_GROUPS),
        offset_lag_max=SYNC_EVERY,
        log_dir=work / "logs",
    ) as mm:
        # Produced while MM2 copies, a chunk at a time, as live topics are (a backlog copied in
        # one batch leaves MM2 few offset syncs to translate from)
        for start in range(REPLICATED_FROM, RECORDS_PER_PARTITION, CHUNK):
            for (topic, p), recs in records.items():
                produce(src_conf, topic, p, recs[start : start + CHUNK])
            wait_replicated(mm, list(TOPICS))
            if start + CHUNK == STREAM_STOPS_AT:
                stream = run_streaming_query(work, source.bootstrap, STREAMED)
        for group, offsets in GROUPS.items():
            commit_offsets(src_conf, group, offsets)
        wait_synced(mm, {g: list(GROUPS[g]) for g in SYNCED_GROUPS})
    # Stopped before the cutover's jobs run, so MM2 moves no offset under them.
    total = sum(len(r) for r in records.values())
    print(
        f"demo: {total} records on the source, {total - REPLICATED_FROM * len(partitions)} "
        f"copied by MirrorMaker 2 from offset {REPLICATED_FROM}; {len(GROUPS)} stopped groups; "
        f"orders has {len(IDENTICAL_RUN)} identical records in one millisecond right before "
        f"billing's position; MM2 synced {' and '.join(SYNCED_GROUPS)} on the destination, "
        "then was stopped"
    )
    paths = {
        name: work / name
        for name in (
            "ledger",
            "audit",
            "lag_history",
            "lag_status",
            "offset_commits",
            "group_metadata",
            "offsets_quarantine",
        )
    }
    migrate_yaml, lag_yaml = write_configs(work, source.bootstrap, dest.bootstrap, paths)
    print(f"demo: config {migrate_yaml}:\n{textwrap.indent(migrate_yaml.read_text(), '    ')}")
    print(f"demo: config {lag_yaml} (the destination's jobs after the cutover)\n")

    demo.run("audit", migrate_yaml, label="audit MM2's translations", summary=_audit_line)
    demo.run("migrate", migrate_yaml, label="dry run", show_output=True)
    demo.run("migrate", migrate_yaml, "--execute", label="execute")
    # What the next scheduled run does: every group is ALREADY_MIGRATED, nothing moves.
    demo.run("migrate", migrate_yaml, "--execute", label="scheduled rerun")
    landed = check_landed(dst_conf)
    demo.run("audit", migrate_yaml, label="audit after the cutover", summary=_audit_line)
    # The streaming query: its checkpoint translated, then restarted on the destination.
    demo.run("migrate", migrate_yaml, "--checkpoint", stream.checkpoint, label="streaming: dry run")
    demo.run(
        "migrate",
        migrate_yaml,
        "--checkpoint",
        stream.checkpoint,
        "--execute",
        label="streaming: rewrite the checkpoint",
    )
    landed |= check_streamed(work, stream, dest.bootstrap, src_conf)

    # The consumers start on the destination: lag snapshots while they catch up.
    positions = {g: exact(o) for g, o in GROUPS.items()}
    end = RECORDS_PER_PARTITION - REPLICATED_FROM  # every destination partition's log end
    for n in range(1, SNAPSHOTS + 1):
        if n > 1:
            for group, offsets in positions.items():
                moved = {tp: min(end, o + READ_PER_SNAPSHOT[group]) for tp, o in offsets.items()}
                if moved != offsets:
                    commit_offsets(dst_conf, group, moved)
                    positions[group] = moved
        demo.run("lag-snapshot", lag_yaml, label=f"lag snapshot {n} of {SNAPSHOTS}")
    demo.run("lag-status", lag_yaml, label="lag status (Burrow's rules)")

    # The destination's group coordinator recorded every commit above (MM2's syncs, migrate's,
    # the consumers' progress) in its `__consumer_offsets`: decoded from there.
    demo.run("decode-offsets", lag_yaml, label="decode the destination's __consumer_offsets")

    overview = work / "overview.yaml"
    overview.write_text(
        textwrap.dedent(
            f"""\
            # The tables the demo's jobs wrote, for notebooks/ferry_overview.ipynb.
            ledger:
              path: {paths["ledger"]}
            audit:
              path: {paths["audit"]}
            """
        )
        + lag_tables_yaml(paths)
    )
    print(
        f"\ndemo: {demo.steps} jobs in {time.monotonic() - demo.started:.0f} s; "
        f"notebooks/ferry_overview.ipynb plots their tables (it reads {overview})"
    )
    return landed


def lag_tables_yaml(paths: Mapping[str, Path]) -> str:
    """The history and offsets sections: where lag-snapshot, lag-status and decode-offsets
    write, which the overview reads."""
    return textwrap.dedent(
        f"""\
        history:
          path: {paths["lag_history"]}
          status_path: {paths["lag_status"]}
        offsets:
          commits_path: {paths["offset_commits"]}
          groups_path: {paths["group_metadata"]}
          quarantine_path: {paths["offsets_quarantine"]}
        """
    )


def write_configs(
    work: Path, source: str, destination: str, paths: Mapping[str, Path]
) -> tuple[Path, Path]:
    """migrate.yaml (migrate and audit) and lag.yaml (lag-snapshot, lag-status and
    decode-offsets on the destination), as conf/migrate.yaml, conf/lag.yaml and
    conf/decode-offsets.yaml lay them out."""
    migrate_yaml = work / "migrate.yaml"
    migrate_yaml.write_text(
        textwrap.dedent(
            f"""\
            source:
              bootstrap.servers: {source}
            destination:
              bootstrap.servers: {destination}
            topics:
              rename:
                - match: '^(.*)$'
                  replace: 'source.\\1'
            matching:
              hash: [key, value, headers]
            ledger:
              path: {paths["ledger"]}
            audit:
              path: {paths["audit"]}
            """
        )
    )
    lag_yaml = work / "lag.yaml"
    lag_yaml.write_text(
        textwrap.dedent(
            f"""\
            cluster:
              bootstrap.servers: {destination}
            groups:
              include: [{", ".join(GROUPS)}]
            reader:
              isolation_level: read_uncommitted
            """
        )
        + lag_tables_yaml(paths)
    )
    return migrate_yaml, lag_yaml


def run_streaming_query(work: Path, bootstrap: str, topic: str, stage: str = "source"):  # noqa: ANN201
    """The user's Structured Streaming query on `topic` (Spark's own Kafka connector, its own
    Spark application), run until it has read what is there; its `Query`."""
    from ferry.testing.streaming import Query, run_queries

    query = Query(
        name=f"payments-{stage}",
        bootstrap=bootstrap,
        topic=topic,
        checkpoint=str(work / "stream" / "checkpoint"),
        sink=str(work / "stream" / "sink"),
        max_offsets_per_trigger=40,
    )
    t0 = time.monotonic()
    outcome = run_queries(work / "stream" / "runs", [query])
    if outcome[query.name] is not None:
        raise DemoFailed(f"the streaming query failed on the {stage}: {outcome[query.name]}")
    print(
        f"demo: a Structured Streaming query read {topic} on the {stage} until its end and "
        f"stopped ({time.monotonic() - t0:.0f} s)"
    )
    return query


def check_streamed(work: Path, query, dest_bootstrap: str, src_conf: dict) -> int:  # noqa: ANN001
    """Restart the query against the destination on its translated checkpoint; every source
    record must be in its sink exactly once."""
    from collections import Counter

    from ferry.testing.streaming import sink_values

    run_streaming_query(work, dest_bootstrap, f"source.{query.topic}", stage="destination")
    expected = Counter((r.key.decode(), r.value.decode()) for r in read_all(src_conf, query.topic))
    seen = sink_values(query.sink)
    again, missing = sum((seen - expected).values()), sum((expected - seen).values())
    print(
        f"demo: the streaming query's sink holds {sum(seen.values())} records: "
        f"{sum(expected.values())} on the source, {again} twice, {missing} missing"
    )
    return 0 if (again, missing) == (0, 0) else 1


def check_landed(dest_config: dict) -> int:
    """Read the destination groups back and compare with the offsets a perfect migration gives."""
    cluster = kafka.Cluster("destination", dest_config)
    landed = kafka.committed_offsets(cluster, list(GROUPS))
    exact_partitions = partitions = exact_groups = 0
    for group, offsets in GROUPS.items():
        want = exact(offsets)
        partitions += len(want)
        good = sum(landed[group].get(tp) == o for tp, o in want.items())
        exact_partitions += good
        exact_groups += good == len(want)
        for (topic, p), o in sorted(want.items()):
            got = landed[group].get((topic, p))
            if got != o:
                print(f"demo: MISMATCH {group} {topic}[{p}]: expected {o}, got {got}")
    print(
        f"demo: read back from the destination: {exact_groups} of {len(GROUPS)} groups and "
        f"{exact_partitions} of {partitions} partitions landed exactly"
    )
    return 0 if exact_partitions == partitions else 1


if __name__ == "__main__":
    sys.exit(main())
