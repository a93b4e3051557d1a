"""Translating a Flink savepoint against a `migrate` dry run of one group holding the same
positions, same run.

World: one topic of PARTITIONS (64) partitions on a local source cluster, copied partition by
partition to a local destination that held OWN records of its own on each partition first
(every destination offset is the source's + OWN), with short runs of identical records in one
millisecond. The tests' Flink job (`ferry.testing.flink_job`, Flink 2.2 on a mini-cluster)
reads it and is stopped with a savepoint mid-topic; one stopped group on the source commits the
very positions Ferry reads from that savepoint. Then, alternating, ROUNDS times each, through
the real job in-process on a warm session:

1. `migrate` dry run of that group (the baseline);
2. `migrate --flink-savepoint` dry run of the savepoint (one JVM of Flink's classes more).

Prints the faster time of each and the ratio. Both answers are compared position by position
with the known shift, so a fast wrong answer cannot pass.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
os.environ.setdefault("FERRY_MASTER", "local[2]")

from checkpoint_bench import timed_job  # noqa: E402
from migrate_bench import load_migrate_job  # noqa: E402

from ferry.testing import flink_job  # noqa: E402
from ferry.testing.brokers import local_brokers  # noqa: E402
from ferry.testing.produce import Record, commit_offsets, create_topics, produce  # noqa: E402

OWN = 7


def records(partition: int, n: int, base: int) -> list[Record]:
    out = []
    for i in range(n):
        head = i - i % 50 if i % 50 < 3 else i  # runs of 3 identical records, one millisecond
        out.append(Record(b"k", f"k{head % 17},{partition}-{head}".encode(), base + head))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", type=int, default=64)
    parser.add_argument("--records", type=int, default=200, help="records per partition")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    base = int(time.time() * 1000) - 3_600_000
    with local_brokers("bench-src", "bench-dst") as (src, dst):
        topic = "flinked"
        create_topics(src.config, {topic: args.partitions})
        create_topics(dst.config, {topic: args.partitions})
        for p in range(args.partitions):
            rows = records(p, args.records, base)
            produce(src.config, topic, p, rows)
            own = [Record(b"x", f"x,own-{i}".encode(), base - 600_000) for i in range(OWN)]
            produce(dst.config, topic, p, own + rows)
        work = Path(tempfile.mkdtemp(prefix="ferry-flink-bench-"))
        total = args.partitions * args.records
        savepoint = flink_job.stop_with_savepoint(
            src.bootstrap, topic, work / "sink", total // 2, work / "savepoints"
        )
        config = work / "migrate.yaml"
        config.write_text(
            f"source:\n  bootstrap.servers: {src.bootstrap}\n"
            f"destination:\n  bootstrap.servers: {dst.bootstrap}\n"
            f"groups:\n  include: ['bench-flink']\n"
            f"ledger:\n  path: {work / 'ledger'}\n"
        )
        job = load_migrate_job()
        base_argv = ["--config", str(config), "-o", "json"]
        savepoint_run = [*base_argv, "--flink-savepoint", savepoint]
        _s, code, stdout = timed_job(job, savepoint_run)  # warm-up, and the positions
        if code != 0:
            raise SystemExit(f"savepoint dry run exited {code}")
        positions = {
            (r["src_topic"], r["src_partition"]): r["committed_offset"] for r in json.loads(stdout)
        }
        commit_offsets(src.config, "bench-flink", positions)
        times: dict[str, list[float]] = {"group": [], "savepoint": []}
        answers: dict[str, dict] = {}
        for _ in range(args.rounds):
            for name, argv in (("group", base_argv), ("savepoint", savepoint_run)):
                elapsed, code, stdout = timed_job(job, argv)
                if code != 0:
                    raise SystemExit(f"{name} run exited {code}")
                times[name].append(elapsed)
                answers[name] = {
                    (r["src_topic"], r["src_partition"]): r["destination_offset"]
                    for r in json.loads(stdout)
                }
        exact = sum(1 for tp, o in answers["group"].items() if o == positions[tp] + OWN)
        same = answers["group"] == answers["savepoint"]
        group_s, savepoint_s = min(times["group"]), min(times["savepoint"])
        print(f"migrate dry run, one group       : {group_s:6.1f}s ({len(positions)} positions, "
              f"{exact} exact)")  # fmt: skip
        print(f"migrate --flink-savepoint dry run: {savepoint_s:6.1f}s (same answers: {same})")
        print(f"savepoint / group                : {savepoint_s / group_s:5.2f}x")
        return 0 if same and exact == len(positions) else 1


if __name__ == "__main__":
    sys.exit(main())
