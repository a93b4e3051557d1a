"""Migration speed: Ferry's `migrate` (dry run) against a sequential baseline, same run.

World: TOPICS × PARTITIONS partitions (>= 128) on a local source cluster, replicated to a local
destination cluster from a later offset; GROUPS stopped groups (>= 40) with committed offsets
on every partition of a few topics each. Then, in the same run:

1. `migrate` dry run through the real job (in-process, warm Spark session);
2. the baseline in `bench/sequential_baseline.py`: the same matching, one group partition at
   a time with plain confluent-kafka — what a careful hand-written script does;
3. a raw read (one consumer) of exactly the records Ferry read, as a floor;
4. `migrate` again with 4x the groups over the same partitions.

Prints the times, the speed-up over the baseline (target >= 10x) and the 4x-groups cost ratio
(target <= 1.3x). The baseline's and Ferry's destination offsets are compared, so a fast wrong
answer cannot pass.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
os.environ.setdefault("FERRY_MASTER", "local[2]")

from sequential_baseline import raw_read, sequential_migrate  # noqa: E402
from world import BulkProducer  # noqa: E402

from ferry.cli import run  # noqa: E402
from ferry.kafka.cluster import Cluster  # noqa: E402
from ferry.testing.brokers import local_brokers  # noqa: E402
from ferry.testing.produce import commit_offsets, create_topics  # noqa: E402

REPLICATED_FROM = 100


def produce_world(src: dict, dst: dict, topics: list[str], partitions: int, n: int) -> None:
    base = int(time.time() * 1000) - 10 * 24 * 3600 * 1000
    ps, pd = BulkProducer(src), BulkProducer(dst)
    for topic in topics:
        for p in range(partitions):
            for i in range(n):
                key, value = f"k{i % 17}".encode(), f"{topic}/{p}/{i}".encode()
                if i % 97 in (10, 11, 12):  # short runs of identical records in one millisecond
                    key, value, ts = b"dup", b"dup", base + (i - i % 97) * 1000 + 10_000
                else:
                    ts = base + i * 1000
                for producer, ok in ((ps, True), (pd, i >= REPLICATED_FROM)):
                    if ok:
                        producer.produce(topic, key, value, p, ts)
    ps.flush()
    pd.flush()


def commit_groups(src: dict, topics: list[str], partitions: int, n: int, count: int, seed: int):
    rng = random.Random(seed)
    groups = {}
    for g in range(count):
        chosen = rng.sample(topics, 2)
        offsets = {
            (t, p): rng.randrange(REPLICATED_FROM + 5, n + 1)
            for t in chosen
            for p in range(partitions)
        }
        name = f"bench-{seed}-{g:04d}"
        commit_offsets(src, name, offsets)
        groups[name] = offsets
    return groups


def load_migrate_job():
    path = HERE.parent / "jobs" / "migrate.py"
    spec = importlib.util.spec_from_file_location("ferry_job_migrate", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def run_migrate(job, config: Path, group_regex: str) -> tuple[float, list[dict]]:
    out = Path(tempfile.mkstemp(suffix=".json")[1])
    t0 = time.monotonic()
    stdout = sys.stdout
    with out.open("w") as fh:
        sys.stdout = fh
        try:
            code = run(
                job.main,
                [
                    "--config",
                    str(config),
                    "-o",
                    "json",
                    "--quiet",
                    "--set",
                    f"groups.include=['{group_regex}']",
                ],
            )
        finally:
            sys.stdout = stdout
    elapsed = time.monotonic() - t0
    if code not in (0, 1):
        raise SystemExit(f"migrate failed with exit code {code}")
    return elapsed, json.loads(out.read_text())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--topics", type=int, default=8)
    parser.add_argument("--partitions", type=int, default=16)
    parser.add_argument("--records", type=int, default=600, help="records per partition")
    parser.add_argument("--groups", type=int, default=40)
    parser.add_argument(
        "--no-baseline",
        action="store_true",
        help="skip the sequential baseline and the raw read (about 20 minutes): Ferry's two "
        "runs and the 4x-groups ratio only",
    )
    args = parser.parse_args()
    with local_brokers("bench-src", "bench-dst") as (src, dst):
        topics = [f"topic{i}" for i in range(args.topics)]
        create_topics(src.config, {t: args.partitions for t in topics})
        create_topics(dst.config, {t: args.partitions for t in topics})
        t0 = time.monotonic()
        produce_world(src.config, dst.config, topics, args.partitions, args.records)
        groups = commit_groups(src.config, topics, args.partitions, args.records, args.groups, 1)
        commit_groups(src.config, topics, args.partitions, args.records, 4 * args.groups, 2)
        n_anchor = sum(len(o) for o in groups.values())
        print(
            f"world: {len(topics) * args.partitions} partitions, {args.records} records each, "
            f"{len(groups)} groups / {n_anchor} group partitions "
            f"(built in {time.monotonic() - t0:.0f}s)",
            file=sys.stderr,
        )
        work = Path(tempfile.mkdtemp(prefix="ferry-bench-"))
        config = work / "migrate.yaml"
        config.write_text(
            f"source:\n  bootstrap.servers: {src.bootstrap}\n"
            f"destination:\n  bootstrap.servers: {dst.bootstrap}\n"
            f"ledger:\n  path: {work / 'ledger'}\n"
        )
        job = load_migrate_job()
        run_migrate(job, config, "bench-1-000[0-1]")  # warm-up: JVM, workers, caches

        ferry_s, plan = run_migrate(job, config, "bench-1-.*")
        src_c, dst_c = Cluster("source", src.config), Cluster("destination", dst.config)
        baseline, baseline_s, raw_records, raw_s = {}, float("nan"), 0, float("nan")
        if not args.no_baseline:
            t0 = time.monotonic()
            baseline = sequential_migrate(src_c, dst_c, groups, context=16, window_ms=60_000)
            baseline_s = time.monotonic() - t0
            t0 = time.monotonic()
            raw_records = raw_read(src_c, dst_c, groups, 16, 60, REPLICATED_FROM)
            raw_s = time.monotonic() - t0
        ferry_4x_s, plan_4x = run_migrate(job, config, "bench-2-.*")

        ferry_offsets = {
            (r["group"], r["src_topic"], r["src_partition"]): r["destination_offset"] for r in plan
        }
        disagree = [k for k, v in baseline.items() if ferry_offsets.get(k) != v]
        exact = sum(
            1
            for (g, t, p), off in ferry_offsets.items()
            if off == groups[g][(t, p)] - REPLICATED_FROM
        )
        print(
            f"ferry migrate (dry run)   : {ferry_s:7.1f}s for {len(plan)} group partitions, "
            f"{exact} exact"
        )
        print(
            f"sequential baseline       : {baseline_s:7.1f}s ({len(disagree)} answers differ "
            "from Ferry's)"
        )
        print(f"raw read of those records : {raw_s:7.1f}s ({raw_records} records, one consumer)")
        print(f"ferry with 4x groups      : {ferry_4x_s:7.1f}s for {len(plan_4x)} group partitions")
        print(f"speed-up over baseline    : {baseline_s / ferry_s:5.1f}x (target >= 10x)")
        print(f"4x groups cost            : {ferry_4x_s / ferry_s:5.2f}x (target <= 1.3x)")
        return 0 if not disagree and exact == len(plan) else 1


if __name__ == "__main__":
    sys.exit(main())
