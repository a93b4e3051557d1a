"""Reconcile mode against exact mode: `migrate` (dry run) for the same groups on a topic
re-partitioned 24 → 48 and on a same-partitioned copy, same run.

World: one source topic of PARTITIONS (24) partitions holding RECORDS (>= 100,000) records
each, timestamps 1 ms apart on every partition (equal across partitions), keyed records plus
every 50th record without a key. The destination holds two copies, made by the test
replicator (`ferry.testing.replicate`): `orders` with DST_PARTITIONS (48) partitions,
re-partitioned in time order with the Java client's partitioner (reconcile mode,
`matching.partitioning: auto`), and `same.orders` with the same partitions, copied partition
by partition (exact mode, `matching.partitioning: same`, reached through a topic rename).
GROUPS (20) stopped groups: one drained, the others each stopped at its own instant
(`--jitter-ms` spreads a group's partitions around its instant: duplicates then appear).

Both plans are computed by the real job (in-process, warm Spark session). Prints the time for
each, the ratio, the job's `source:` / `destination:` / `reconcile:` progress lines (what was
read), and checks every reconciled offset D_q and duplicate count against where the
replicator put each record, and every exact offset against the committed offset.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import random
import re
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
os.environ.setdefault("FERRY_MASTER", "local[2]")

from migrate_bench import load_migrate_job  # noqa: E402

from ferry.cli import run  # noqa: E402
from ferry.testing.brokers import local_brokers  # noqa: E402
from ferry.testing.produce import Record, commit_offsets, create_topics, produce  # noqa: E402
from ferry.testing.replicate import SourceRecord, replicate  # noqa: E402

TOPIC = "orders"
SAME = "same.orders"


def source_records(p: int, n: int, base: int) -> list[Record]:
    return [
        Record(
            None if i % 50 == 49 else f"c{(i * 31 + p * 7) % 5003}".encode(),
            f"{p}/{i}".encode(),
            base + i,
        )
        for i in range(n)
    ]


def produce_partitions(
    config: dict, topic: str, per_partition: dict[int, list[Record]], threads: int, in_flight: int
) -> dict[int, list[int]]:
    """Every partition's records, `threads` partitions at a time; partition → offsets."""

    def one(p: int) -> tuple[int, list[int]]:
        return p, produce(config, topic, p, per_partition[p], in_flight)

    with ThreadPoolExecutor(threads) as pool:
        return dict(pool.map(one, sorted(per_partition)))


def commit_groups(src: dict, partitions: int, n: int, count: int, jitter_ms: int, seed: int):
    """group → source partition → committed offset (timestamps are base + offset)."""
    rng = random.Random(seed)
    groups: dict[str, dict[int, int]] = {}
    for g in range(count):
        instant = n if g == 0 else rng.randrange(n // 20, n - n // 20)
        offsets = {
            p: min(n, max(0, instant + (rng.randint(-jitter_ms, jitter_ms) if g else 0)))
            for p in range(partitions)
        }
        name = f"bench-{g:02d}"
        commit_offsets(src, name, {(TOPIC, p): o for p, o in offsets.items()})
        groups[name] = offsets
    return groups


def expected_reconcile(
    mapping: dict, groups: dict[str, dict[int, int]], dst_partitions: int
) -> dict[tuple[str, int], tuple[int, int]]:
    """(group, q) → (D_q, duplicates) from where every source record landed."""
    by_q: dict[int, list[tuple[int, int, int]]] = {q: [] for q in range(dst_partitions)}
    for (p, o), (q, dst_o) in mapping.items():
        by_q[q].append((dst_o, p, o))
    arrays = {}
    for q, rows in by_q.items():
        rows.sort()
        a = np.array(rows, dtype=np.int64).reshape(-1, 3)
        arrays[q] = a
    out = {}
    for group, committed in groups.items():
        limit = np.array([committed[p] for p in sorted(committed)], dtype=np.int64)
        for q, a in arrays.items():
            end = int(a[-1, 0]) + 1 if len(a) else 0
            consumed = a[:, 2] < limit[a[:, 1]]
            not_consumed = np.flatnonzero(~consumed)
            if len(not_consumed):
                first = int(not_consumed[0])
                d = int(a[first, 0])
                dups = int(consumed[first:].sum())
            else:
                d, dups = end, 0
            out[(group, q)] = (d, dups)
    return out


def run_migrate(job, config: Path, extra: list[str]) -> tuple[float, list[dict], str, int]:
    out, err = io.StringIO(), io.StringIO()
    argv = ["--config", str(config), "-o", "json", *extra]
    t0 = time.monotonic()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = run(job.main, argv)
    elapsed = time.monotonic() - t0
    if code not in (0, 1, 75) or not out.getvalue().strip():
        raise SystemExit(f"migrate failed ({code}): {err.getvalue()[-3000:]}")
    return elapsed, json.loads(out.getvalue()), err.getvalue(), code


def progress_lines(stderr: str) -> list[str]:
    """The job's progress lines about reading: `[  12.3s] source: ...` and the like."""
    pattern = re.compile(r"^\[\s*[\d.]+s\]\s*(reconcile|destination|source):")
    return [line.strip() for line in stderr.splitlines() if pattern.match(line.strip())]


def write_config(  # noqa: ANN001
    path: Path, src, dst, partitioning: str, rename: bool, window_ms, fetch_wait_ms
) -> None:
    # The local broker builds a fetch answer in time proportional to the partition: at
    # 100,000+ single-record batches it needs more than the reader's 50 ms fetch wait. A
    # longer wait makes every probe that reaches a log end wait that long too.
    wait = f"  fetch.wait.max.ms: {fetch_wait_ms}\n" if fetch_wait_ms else ""
    rename_rule = (
        f"  rename:\n    - match: '^{TOPIC}$'\n      replace: '{SAME}'\n" if rename else ""
    )
    windows = (
        f"  window_before_ms: {window_ms}\n  window_after_ms: {window_ms}\n" if window_ms else ""
    )
    path.write_text(
        f"source:\n  bootstrap.servers: {src.bootstrap}\n{wait}"
        f"destination:\n  bootstrap.servers: {dst.bootstrap}\n{wait}"
        f"groups:\n  include: ['bench-.*']\n"
        f"topics:\n  include: ['{TOPIC}']\n{rename_rule}"
        f"matching:\n  partitioning: {partitioning}\n  hash: [key, value]\n{windows}"
        f"ledger:\n  path: {path.parent / ('ledger-' + partitioning)}\n"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=100_000, help="records per partition")
    parser.add_argument("--partitions", type=int, default=24)
    parser.add_argument("--dst-partitions", type=int, default=48)
    parser.add_argument("--groups", type=int, default=20)
    parser.add_argument("--jitter-ms", type=int, default=0, help="spread of a group's stop")
    parser.add_argument("--window-ms", type=int, help="matching windows (default: the job's)")
    parser.add_argument(
        "--fetch-wait-ms",
        type=int,
        help="fetch.wait.max.ms for both clusters (default: the job's own below 5,000 records, "
        "which the local broker is fast enough for; 1000 from there on)",
    )
    parser.add_argument("--threads", type=int, default=4, help="producer threads")
    parser.add_argument("--in-flight", type=int, default=5, help="requests in flight each")
    args = parser.parse_args()
    n, parts, dst_parts = args.records, args.partitions, args.dst_partitions
    with local_brokers("reconcile-src", "reconcile-dst") as (src, dst):
        create_topics(src.config, {TOPIC: parts})
        create_topics(dst.config, {TOPIC: dst_parts, SAME: parts})
        base = int(time.time() * 1000) - 24 * 3600 * 1000
        world = {p: source_records(p, n, base) for p in range(parts)}

        t0 = time.monotonic()
        offsets = produce_partitions(src.config, TOPIC, world, args.threads, args.in_flight)
        src_s = time.monotonic() - t0
        records = [
            SourceRecord(p, o, r.key, r.value, r.timestamp_ms)
            for p in range(parts)
            for r, o in zip(world[p], offsets[p], strict=True)
        ]
        t0 = time.monotonic()
        mapping = replicate(
            src.config,
            TOPIC,
            dst.config,
            TOPIC,
            dst_parts,
            order="time",
            records=records,
            threads=args.threads,
            max_in_flight=args.in_flight,
        )
        rep_s = time.monotonic() - t0
        t0 = time.monotonic()
        same_offsets = produce_partitions(dst.config, SAME, world, args.threads, args.in_flight)
        same_s = time.monotonic() - t0
        assert all(same_offsets[p] == offsets[p] for p in range(parts))
        total = parts * n
        for what, s, k in (
            ("source", src_s, total),
            (f"re-partitioned copy ({parts} -> {dst_parts})", rep_s, total),
            ("same-partitioned copy", same_s, total),
        ):
            print(f"produced {what}: {k} records in {s:.0f}s ({k / s:,.0f} records/s)")
        del world

        groups = commit_groups(src.config, parts, n, args.groups, args.jitter_ms, 1)
        print(
            f"world: {parts} -> {dst_parts} partitions, {n} records each, {len(groups)} groups",
            file=sys.stderr,
        )
        work = Path(tempfile.mkdtemp(prefix="ferry-reconcile-bench-"))
        rec_cfg, same_cfg = work / "reconcile.yaml", work / "same.yaml"
        wait = args.fetch_wait_ms
        if wait is None:  # at 10,000 records the default 50 ms (and 250 ms) time out
            wait = 0 if n < 5000 else 1000
        write_config(rec_cfg, src, dst, "auto", False, args.window_ms, wait)
        write_config(same_cfg, src, dst, "same", True, args.window_ms, wait)
        job = load_migrate_job()
        run_migrate(job, same_cfg, ["--set", "groups.include=['bench-01']"])  # warm-up

        exact_s, exact_rows, exact_err, exact_code = run_migrate(job, same_cfg, [])
        rec_s, rec_rows, rec_err, rec_code = run_migrate(
            job, rec_cfg, ["--max-duplicates", str(10**12)]
        )

        print(f"exact mode ({parts} -> {parts}, same)     : {exact_s:7.1f}s, exit {exact_code}")
        for line in progress_lines(exact_err):
            print(f"    {line}")
        print(f"reconcile mode ({parts} -> {dst_parts}) : {rec_s:7.1f}s, exit {rec_code}")
        for line in progress_lines(rec_err):
            print(f"    {line}")
        print(f"reconcile / exact               : {rec_s / exact_s:5.2f}x")
        if os.environ.get("RECONCILE_BENCH_DEBUG"):
            print(exact_err, rec_err, file=sys.stderr)

        want = expected_reconcile(mapping, groups, dst_parts)
        got = {
            (r["group"], r["dst_partition"]): (r["destination_offset"], r["duplicates"])
            for r in rec_rows
        }
        bad = sorted(k for k in want if got.get(k) != want[k])
        statuses = {r["status"] for r in rec_rows}
        n_dups = sum(d for _, d in want.values())
        if bad or set(got) != set(want):
            print(f"reconcile: {len(bad)} of {len(want)} D_q differ (statuses {statuses}):")
            for k in bad[:20]:
                print(f"    {k}: expected (D_q, duplicates) {want[k]}, got {got.get(k)}")
        else:
            print(f"reconcile: exact ({len(want)} D_q, {n_dups} duplicates, statuses {statuses})")
        exact_got = {(r["group"], r["src_partition"]): r["destination_offset"] for r in exact_rows}
        exact_want = {(g, p): o for g, offs in groups.items() for p, o in offs.items()}
        exact_bad = sorted(k for k in exact_want if exact_got.get(k) != exact_want[k])
        if exact_bad:
            print(f"exact mode: {len(exact_bad)} of {len(exact_want)} offsets differ:")
            for k in exact_bad[:20]:
                print(f"    {k}: expected {exact_want[k]}, got {exact_got.get(k)}")
        else:
            print(f"exact mode: exact ({len(exact_want)} offsets)")
        return 0 if not bad and not exact_bad and set(got) == set(want) else 1


if __name__ == "__main__":
    sys.exit(main())
