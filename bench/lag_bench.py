"""Lag history at scale: `lag-snapshot` and `lag-status` for 40 and 2,000 groups, same run.

World: TOPICS × PARTITIONS partitions (8 × 32) of RECORDS records each (record i stamped i
seconds after a base time) on a local cluster; a small and a large set of stopped
(Empty) groups, each committed on every partition of two random topics at random offsets
(log end included). Then, each as users run it — `spark-submit.sh JOB`, a fresh JVM per run:

1. ROUNDS rounds of: a trivial PySpark job (a session and one tiny count) submitted the same
   way, the floor; `lag-snapshot` of the small set; `lag-snapshot` of the large set (each set
   into its own history). One untimed trivial run first warms the disk cache and the JVM;
2. SNAPSHOTS − ROUNDS earlier snapshots are added to each history (copies of the first real
   one, moved back SPACING_MS each: taking them for real would only repeat step 1);
3. ROUNDS rounds of `lag-status -o json` over each history.

Prints every run and the targets as ratios of each job's best round in this run (load from
elsewhere only ever adds time): large snapshot ≤ 2× small, small snapshot ≤ 1.5× the trivial
job. Every history row is checked against a per-position read of the same positions (one
consumer, one record at or after each position, no spans), so a fast wrong answer fails the
bench (exit 1). About 7 minutes on 2 cores, half of it the per-position reference read.

    .venv/bin/python bench/lag_bench.py [--small 40] [--large 2000] [--snapshots 10] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from world import BulkProducer, commit_all

from ferry import kafka
from ferry.kafka.cluster import Cluster
from ferry.testing.brokers import local_brokers
from ferry.testing.produce import create_topics

ROOT = Path(__file__).resolve().parents[1]
SPACING_MS = 300_000  # five minutes between the synthetic earlier snapshots
TRIVIAL_JOB = '''"""The floor: a session and one tiny Spark job, submitted like any Ferry job."""
from ferry.session import build_session

spark = build_session("ferry-trivial")
print(spark.range(1000).selectExpr("sum(id) AS s").collect()[0].s)
'''


def produce_world(config: dict, topics: list[str], partitions: int, n: int, base: int) -> None:
    producer = BulkProducer(config)
    for topic in topics:
        for p in range(partitions):
            for i in range(n):
                producer.produce(topic, None, b"v%d" % i, p, base + i * 1000)
    producer.flush()


def commit_groups(
    config: dict, prefix: str, count: int, topics: list[str], partitions: int, n: int, seed: int
) -> dict[str, dict[tuple[str, int], int]]:
    """Stopped groups on two topics each; all commits in flight at once on one client."""
    rng = random.Random(seed)
    groups: dict[str, dict[tuple[str, int], int]] = {}
    for g in range(count):
        offsets = {
            (t, p): rng.randrange(0, n + 1)
            for t in rng.sample(topics, 2)
            for p in range(partitions)
        }
        groups[f"{prefix}-{g:04d}"] = offsets
    commit_all(Cluster("bench", {**config, "log_level": 0}), groups)
    return groups


def trivial_root(work: Path) -> Path:
    """A copy of the checkout's submit path whose only job is the trivial one: the same
    spark-submit.sh, library zip, log config and interpreter."""
    root = work / "trivial-root"
    (root / "jobs").mkdir(parents=True)
    shutil.copy(ROOT / "spark-submit.sh", root / "spark-submit.sh")
    # The library is copied: the script zips it from `lib/..`, which a symlink would resolve
    # to this checkout.
    shutil.copytree(ROOT / "lib", root / "lib", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("conf", ".venv"):
        (root / name).symlink_to(ROOT / name)
    (root / "jobs" / "trivial.py").write_text(TRIVIAL_JOB)
    return root


def submit(root: Path, *argv: str) -> tuple[float, str, str]:
    t0 = time.monotonic()
    result = subprocess.run(
        [str(root / "spark-submit.sh"), *argv],
        capture_output=True,
        text=True,
        check=False,
        env={k: v for k, v in os.environ.items() if k != "FERRY_MASTER"},
    )
    elapsed = time.monotonic() - t0
    if result.returncode != 0:
        raise SystemExit(f"{argv[0]} failed ({result.returncode}): {result.stderr[-2000:]}")
    return elapsed, result.stdout, result.stderr


def reference_next_records(
    cluster: Cluster, positions: set[tuple[str, int, int]]
) -> dict[tuple[str, int, int], tuple[int, int] | None]:
    """Per-position read: the first record at or after each position, one seek per position
    (all partitions in lockstep, one position of each per round)."""
    by_partition: dict[tuple[str, int], list[int]] = {}
    for t, p, o in sorted(positions):
        by_partition.setdefault((t, p), []).append(o)
    out = {}
    consumer = kafka.RangeReader(cluster)
    try:
        while by_partition:
            round_ = {tp: offsets.pop() for tp, offsets in by_partition.items()}
            seen = kafka.first_records_at(cluster, round_, consumer)
            for (t, p), o in round_.items():
                out[(t, p, o)] = seen.get((t, p))
            by_partition = {tp: offs for tp, offs in by_partition.items() if offs}
    finally:
        consumer.close()
    return out


def check_history(path: Path, cluster: Cluster, groups: dict) -> tuple[int, list[str]]:
    """Every row of the real snapshots against per-position reads (the world does not move
    between them); returns the row count and the first few differences."""
    from deltalake import DeltaTable

    rows = DeltaTable(str(path)).to_pyarrow_table().to_pylist()
    bounds = kafka.watermarks(cluster, {(r["topic"], r["partition"]) for r in rows})
    positions = set()
    for r in rows:
        start, end = bounds[(r["topic"], r["partition"])]
        position = max(r["committed_offset"], start)
        if position < end:
            positions.add((r["topic"], r["partition"], position))
    t0 = time.monotonic()
    reference = reference_next_records(cluster, positions)
    print(
        f"  per-position reference read: {len(positions)} positions in "
        f"{time.monotonic() - t0:.1f}s",
        file=sys.stderr,
    )
    wrong = []
    expected_keys = {(g, t, p) for g, offs in groups.items() for t, p in offs}
    seen_keys = {(r["group"], r["topic"], r["partition"]) for r in rows}
    if seen_keys != expected_keys:
        wrong.append(f"{len(expected_keys ^ seen_keys)} group partitions missing or extra")
    for r in rows:
        snapshot_ms = round(r["snapshot_time"].timestamp() * 1000)
        start, end = bounds[(r["topic"], r["partition"])]
        committed = r["committed_offset"]
        if committed != groups[r["group"]][(r["topic"], r["partition"])]:
            wrong.append(f"{r['group']} {r['topic']}[{r['partition']}]: committed {committed}")
        position = max(committed, start)
        record = reference.get((r["topic"], r["partition"], position))
        time_lag = 0 if position >= end or record is None else max(0, snapshot_ms - record[1])
        got = (r["log_end_offset"], r["lag"], r["time_lag_ms"])
        want = (end, end - committed, time_lag)
        if got != want:
            wrong.append(f"{r['group']} {r['topic']}[{r['partition']}]: {got} != {want}")
    return len(rows), wrong[:5]


def add_earlier_snapshots(path: Path, count: int) -> None:
    """`count` copies of the table's first snapshot, SPACING_MS apart before it."""
    import pyarrow as pa
    import pyarrow.compute as pc
    from deltalake import DeltaTable, write_deltalake

    table = DeltaTable(str(path)).to_pyarrow_table()
    first = pc.min(table.column("snapshot_time"))
    table = table.filter(pc.equal(table.column("snapshot_time"), first))
    column = table.schema.get_field_index("snapshot_time")
    copies = []
    for k in range(1, count + 1):
        shift = pa.scalar(k * SPACING_MS * 1000, pa.duration("us"))
        moved = pc.subtract(table.column(column), shift).cast(table.schema.field(column).type)
        copies.append(table.set_column(column, table.schema.field(column), moved))
    if copies:
        write_deltalake(str(path), pa.concat_tables(copies), mode="append")


def stage_lines(stderr: str) -> str:
    return "\n".join(f"    {line}" for line in stderr.strip().splitlines() if line.startswith("["))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--topics", type=int, default=8)
    parser.add_argument("--partitions", type=int, default=32)
    parser.add_argument("--records", type=int, default=200, help="records per partition")
    parser.add_argument("--small", type=int, default=40, help="groups in the small set")
    parser.add_argument("--large", type=int, default=2000, help="groups in the large set")
    parser.add_argument("--snapshots", type=int, default=10, help="snapshots in each history")
    parser.add_argument("--rounds", type=int, default=3, help="timed runs of each job")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="ferry-lag-bench-"))
    (work / "logs").mkdir()  # the clusters' folders go in it
    with local_brokers("lag-bench", log_dir=work / "logs") as (broker,):
        topics = [f"topic{i}" for i in range(args.topics)]
        create_topics(broker.config, {t: args.partitions for t in topics})
        t0 = time.monotonic()
        base = int(time.time() * 1000) - 24 * 3600 * 1000
        produce_world(broker.config, topics, args.partitions, args.records, base)
        sets = {
            "small": commit_groups(
                broker.config, "small", args.small, topics, args.partitions, args.records, 1
            ),
            "large": commit_groups(
                broker.config, "large", args.large, topics, args.partitions, args.records, 2
            ),
        }
        print(
            f"world: {len(topics) * args.partitions} partitions × {args.records} records; "
            + ", ".join(
                f"{len(g)} groups ({sum(len(o) for o in g.values())} group partitions)"
                for g in sets.values()
            )
            + f" (built in {time.monotonic() - t0:.0f}s)",
            file=sys.stderr,
        )
        trivial = trivial_root(work)
        submit(trivial, "trivial")  # warm-up (disk cache, first JVM start), not counted
        configs = {}
        for name in sets:
            configs[name] = work / f"{name}.yaml"
            configs[name].write_text(
                f"cluster:\n  bootstrap.servers: {broker.bootstrap}\n"
                f"groups:\n  include: ['{name}-.*']\n"
                f"history:\n  path: {work / name / 'history'}\n"
            )
        # Rounds alternate the jobs, so load from elsewhere on the machine hits each alike;
        # each job's best round is compared.
        snap_runs: dict[str, list[float]] = {"trivial": [], "small": [], "large": []}
        for r in range(args.rounds):
            snap_runs["trivial"].append(submit(trivial, "trivial")[0])
            for name in sets:
                elapsed, stdout, stderr = submit(
                    ROOT, "lag-snapshot", "--config", str(configs[name])
                )
                snap_runs[name].append(elapsed)
                if r == 0:
                    print(f"  lag-snapshot {name}: {stdout.strip()}", file=sys.stderr)
                    print(stage_lines(stderr), file=sys.stderr)
        cluster = Cluster("bench", broker.config)
        failures = []
        counts = {}
        for name, groups in sets.items():
            counts[name], wrong = check_history(work / name / "history", cluster, groups)
            if wrong:
                failures.append(f"{name}: rows differ from per-position reads: {wrong}")
            add_earlier_snapshots(work / name / "history", args.snapshots - args.rounds)
        status_runs: dict[str, list[float]] = {"small": [], "large": []}
        for r in range(args.rounds):
            for name, groups in sets.items():
                elapsed, stdout, stderr = submit(
                    ROOT, "lag-status", "--config", str(configs[name]), "-o", "json"
                )
                status_runs[name].append(elapsed)
                answers = json.loads(stdout)
                if len(answers) != len(groups):
                    failures.append(f"{name}: lag-status answered {len(answers)} groups")
                if r == 0:
                    print(f"  lag-status {name}:\n{stage_lines(stderr)}", file=sys.stderr)

    def show(runs: list[float]) -> str:
        return f"{min(runs):7.1f}s  (rounds: {', '.join(f'{x:.1f}' for x in runs)})"

    trivial_s = min(snap_runs["trivial"])
    print(f"trivial PySpark job              : {show(snap_runs['trivial'])}")
    for name, groups in sets.items():
        ok = "no" if any(f.startswith(name) for f in failures) else "yes"
        print(
            f"lag-snapshot {len(groups):5d} groups       : {show(snap_runs[name])} "
            f"{counts[name] // args.rounds} group partitions, equal to per-position reads: {ok}"
        )
    for name, groups in sets.items():
        label = f"lag-status   {len(groups):5d} groups × {args.snapshots:<3d}"
        print(f"{label}: {show(status_runs[name])}")
    small, large = min(snap_runs["small"]), min(snap_runs["large"])
    print(
        f"snapshot {args.large} / {args.small} groups      : {large / small:5.2f}x (target <= 2x)"
    )
    print(f"snapshot {args.small} groups / trivial    : {small / trivial_s:5.2f}x (target <= 1.5x)")
    print(
        f"status {args.large} / {args.small} groups        : "
        f"{min(status_runs['large']) / min(status_runs['small']):5.2f}x"
    )
    for failure in failures:
        print(f"FAILED {failure}", file=sys.stderr)
    shutil.rmtree(work, ignore_errors=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
