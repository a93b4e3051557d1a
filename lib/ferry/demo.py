"""`make demo`: the whole migration story on two local brokers.

A source cluster with several topics and consumer groups; a destination that a replicator
(simulated here, MirrorMaker 2 style: `src.` topic prefix, its own provenance header, original
timestamps) started copying from a later offset, so every offset differs between the two;
a run of identical records sharing one millisecond right where a group stopped; then a dry
run, `--execute`, the next scheduled `--execute` (every group already migrated: nothing
moves), and a read-back that checks every migrated group landed exactly.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from ferry import kafka
from ferry.testing.brokers import local_brokers
from ferry.testing.produce import Record, commit_offsets, create_topics, produce

ROOT = Path(__file__).resolve().parents[2]
TOPICS = {"orders": 4, "payments": 2, "clicks": 2}
RECORDS_PER_PARTITION = 120
REPLICATED_FROM = 30  # the replicator started here: destination offset = source offset - 30
GROUPS = {
    # group: {(topic, partition): committed offset}
    "billing": {("orders", p): 98 for p in range(4)} | {("payments", 0): 60, ("payments", 1): 120},
    "analytics": {("clicks", 0): 45, ("clicks", 1): 110, ("orders", 2): 70},
    "fraud": {("payments", 0): 31, ("payments", 1): 77},
}
IDENTICAL_RUN = range(94, 101)  # offsets of identical records sharing one millisecond


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


def main() -> int:
    # A fixed place (gitignored), so notebooks/ferry_overview.ipynb finds this demo's ledger.
    work = ROOT / "var" / "demo"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    print(f"demo: working in {work}")
    with local_brokers("source", "destination", log_dir=work / "logs") as (source, dest):
        print(f"demo: source broker on {source.bootstrap}, destination on {dest.bootstrap}")
        base_ms = int(time.time() * 1000) - 3_600_000
        create_topics(source.config, TOPICS)
        create_topics(dest.config, {f"src.{t}": n for t, n in TOPICS.items()})
        total = 0
        for topic, partitions in TOPICS.items():
            for p in range(partitions):
                records = source_records(topic, p, base_ms)
                produce(source.config, topic, p, records)
                replicated = [
                    Record(r.key, r.value, r.timestamp_ms, (("mm2-source", b"source"),))
                    for r in records[REPLICATED_FROM:]
                ]
                produce(dest.config, f"src.{topic}", p, replicated)
                total += len(records)
        for group, offsets in GROUPS.items():
            commit_offsets(source.config, group, offsets)
        print(
            f"demo: {total} records on the source, replicated from offset {REPLICATED_FROM}; "
            f"{len(GROUPS)} stopped groups; orders has {len(IDENTICAL_RUN)} identical records "
            "in one millisecond right before billing's position"
        )
        config = work / "migrate.yaml"
        config.write_text(
            textwrap.dedent(
                f"""\
                source:
                  bootstrap.servers: {source.bootstrap}
                destination:
                  bootstrap.servers: {dest.bootstrap}
                topics:
                  rename:
                    - match: '^(.*)$'
                      replace: 'src.\\1'
                matching:
                  hash: [key, value, headers]
                  ignore_headers: [mm2-source]
                ledger:
                  path: {work / "ledger"}
                """
            )
        )
        print(f"demo: config {config}:\n{textwrap.indent(config.read_text(), '    ')}")
        submit = [str(ROOT / "spark-submit.sh"), "migrate", "--config", str(config)]
        steps = (
            ("dry run", []),
            ("execute", ["--execute"]),
            # What the next scheduled run does: every group is ALREADY_MIGRATED, nothing moves.
            ("scheduled rerun", ["--execute"]),
        )
        for label, extra in steps:
            print(f"\ndemo: $ ./spark-submit.sh migrate --config {config.name} {' '.join(extra)}")
            code = subprocess.call(submit + extra, env={**os.environ})
            print(f"demo: {label} exited {code}")
            if code != 0:
                return code
        code = check_landed(dest.config)
        (work / "overview.yaml").write_text(f"ledger:\n  path: {work / 'ledger'}\n")
        print(
            "demo: notebooks/ferry_overview.ipynb plots this demo's ledger "
            f"(it reads {work / 'overview.yaml'})"
        )
        return code


def check_landed(dest_config: dict) -> int:
    """Read the destination groups back and compare with the offsets a perfect migration gives."""
    cluster = kafka.Cluster("destination", dest_config)
    landed = kafka.committed_offsets(cluster, list(GROUPS))
    exact = partitions = 0
    for group, offsets in GROUPS.items():
        group_exact = True
        for (topic, p), c in offsets.items():
            partitions += 1
            want = c - REPLICATED_FROM
            got = landed[group].get((f"src.{topic}", p))
            if got == want:
                exact += 1
            else:
                group_exact = False
                print(f"demo: MISMATCH {group} {topic}[{p}]: expected {want}, got {got}")
        print(f"demo: {group}: {'exact' if group_exact else 'NOT exact'}")
    n_groups = sum(
        all(landed[g].get((f"src.{t}", p)) == c - REPLICATED_FROM for (t, p), c in o.items())
        for g, o in GROUPS.items()
    )
    print(
        f"\ndemo: read back from the destination: {n_groups} of {len(GROUPS)} groups and "
        f"{exact} of {partitions} partitions landed exactly"
    )
    return 0 if exact == partitions else 1


if __name__ == "__main__":
    sys.exit(main())
