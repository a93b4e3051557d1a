"""Reconcile mode at production traffic: what the frontier read reads, and how placement scales
with groups. Every plan is made by the real job (dry run, in-process, warm Spark session) and
checked against where the test replicator (`ferry.testing.replicate`) put every record.

Scenarios (`--scenario`, default `traffic groups`):

- `traffic`: one topic per rate — 10, 20 and 40 records per millisecond — of RECORDS
  (200,000) records per source partition, 2 → 3 partitions, copied in time order (murmur2
  keys, every 50th record without a key). Groups stopped at three instants and one drained.
  Prints, per rate, the narrow read's time and offsets read per side and per group, the share
  of both topics read (target <= 1%) and the ratio against 1x (target <= 1.2x at 2x and 4x),
  and at the first rate the whole-band read (`matching.search: full`) beside it.
- `groups`: on the first rate's topic, 40 groups against 2,000 (target <= 2x the time), both
  stopped at the same 40 instants, and 2,000 stopped at 2,000 instants of their own.
- `wide`: 24 → 48 partitions of `--wide-records` (100,000) records each, one per
  millisecond, 20 groups (one drained), narrow and whole-band reads: what each reads, and how
  long it takes.
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

from groups_bench import commit_all  # noqa: E402
from migrate_bench import load_migrate_job  # noqa: E402

from ferry.cli import run  # noqa: E402
from ferry.kafka.cluster import Cluster  # noqa: E402
from ferry.testing.brokers import local_brokers  # noqa: E402
from ferry.testing.produce import Record, create_topics, produce  # noqa: E402
from ferry.testing.replicate import SourceRecord, replicate  # noqa: E402

RATES = (10, 20, 40)


def source_records(p: int, n: int, base: int, per_ms: int) -> list[Record]:
    return [
        Record(
            None if i % 50 == 49 else f"c{(i * 31 + p * 7) % 5003}".encode(),
            f"{p}/{i}".encode(),
            base + i // per_ms,
        )
        for i in range(n)
    ]


def produce_partitions(
    config: dict, topic: str, per_partition: dict[int, list[Record]], threads: int
) -> dict[int, list[int]]:
    """Every partition's records, `threads` partitions at a time; partition → offsets."""

    def one(p: int) -> tuple[int, list[int]]:
        return p, produce(config, topic, p, per_partition[p], 5)

    with ThreadPoolExecutor(threads) as pool:
        return dict(pool.map(one, sorted(per_partition)))


def make_topic(src, dst, topic, n_src, n_dst, n, per_ms, threads) -> tuple[dict, int]:  # noqa: ANN001
    """Produce and replicate one topic; (mapping, base timestamp)."""
    create_topics(src.config, {topic: n_src})
    create_topics(dst.config, {topic: n_dst})
    base = int(time.time() * 1000) - 24 * 3600 * 1000
    world = {p: source_records(p, n, base, per_ms) for p in range(n_src)}
    t0 = time.monotonic()
    offsets = produce_partitions(src.config, topic, world, threads)
    records = [
        SourceRecord(p, o, r.key, r.value, r.timestamp_ms)
        for p in range(n_src)
        for r, o in zip(world[p], offsets[p], strict=True)
    ]
    mapping = replicate(
        src.config, topic, dst.config, topic, n_dst, "time", records=records, threads=threads,
        max_in_flight=5,
    )  # fmt: skip
    took = time.monotonic() - t0
    total = 2 * n_src * n
    print(f"produced {topic}: {total:,} records in {took:.0f}s ({total / took:,.0f}/s)", flush=True)
    return mapping, base


def stopped(n_src: int, n: int, per_ms: int, instants: list[int]) -> list[dict[int, int]]:
    """Groups stopped at each instant (record index i: every partition at its first record
    with timestamp >= base + i // per_ms)."""
    return [{p: (i // per_ms) * per_ms for p in range(n_src)} for i in instants]


def expected_reconcile(
    mapping: dict, groups: dict[str, dict[int, int]], dst_partitions: int
) -> dict[tuple[str, int], tuple[int, int]]:
    """(group, q) → (D_q, duplicates) from where every source record landed."""
    by_q: dict[int, list[tuple[int, int, int]]] = {q: [] for q in range(dst_partitions)}
    for (p, o), (q, dst_o) in mapping.items():
        by_q[q].append((dst_o, p, o))
    arrays = {q: np.array(sorted(rows), dtype=np.int64).reshape(-1, 3) for q, rows in by_q.items()}
    out = {}
    for group, committed in groups.items():
        limit = np.array([committed[p] for p in sorted(committed)], dtype=np.int64)
        for q, a in arrays.items():
            end = int(a[-1, 0]) + 1 if len(a) else 0
            consumed = a[:, 2] < limit[a[:, 1]]
            not_consumed = np.flatnonzero(~consumed)
            if len(not_consumed):
                first = int(not_consumed[0])
                out[(group, q)] = (int(a[first, 0]), int(consumed[first:].sum()))
            else:
                out[(group, q)] = (end, 0)
    return out


def write_config(path: Path, src, dst) -> Path:  # noqa: ANN001
    path.write_text(
        f"source:\n  bootstrap.servers: {src.bootstrap}\n"
        f"destination:\n  bootstrap.servers: {dst.bootstrap}\n"
        f"matching:\n  hash: [key, value]\n"
        f"ledger:\n  path: {path.parent / 'ledger'}\n"
    )
    return path


def plan(job, config: Path, topic: str, groups: str, full: bool = False) -> dict:  # noqa: ANN001
    """One dry run: time, rows, and the offsets it read of `topic`."""
    out, err = io.StringIO(), io.StringIO()
    argv = ["--config", str(config), "-o", "json", "--max-duplicates", str(10**12)]
    argv += ["--set", f"topics.include=['{topic}']", "--set", f"groups.include=['{groups}']"]
    if full:
        argv += ["--set", "matching.search=full"]
    t0 = time.monotonic()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = run(job.main, argv)
    took = time.monotonic() - t0
    if code not in (0, 1, 75) or not out.getvalue().strip():
        raise SystemExit(f"migrate failed ({code}): {err.getvalue()[-3000:]}")
    m = re.search(
        rf"reconcile: topic {re.escape(topic)}: read (\d+) source and (\d+) destination "
        r"offsets for (\d+) groups",
        err.getvalue(),
    )
    steps = re.search(r"in (\d+) steps, (\d+) frontiers", err.getvalue())
    if os.environ.get("RECONCILE_BENCH_DEBUG"):
        print(err.getvalue(), file=sys.stderr)
    return {
        "seconds": took,
        "rows": json.loads(out.getvalue()),
        "source": int(m.group(1)),
        "destination": int(m.group(2)),
        "groups": int(m.group(3)),
        "steps": steps.group(0) if steps else "",
    }


def check(result: dict, want: dict) -> str:
    got = {
        (r["group"], r["dst_partition"]): (r["destination_offset"], r["duplicates"])
        for r in result["rows"]
    }
    bad = sorted(k for k in want if got.get(k) != want[k])
    if bad or set(got) != set(want):
        examples = [(k, want[k], got.get(k)) for k in bad[:3]]
        return f"{len(bad)} of {len(want)} D_q differ, e.g. {examples}"
    return f"exact ({len(want)} D_q, {sum(d for _, d in want.values())} duplicates)"


def report(label: str, result: dict, records: int, want: dict) -> None:
    read = result["source"] + result["destination"]
    print(
        f"{label:<34} {result['seconds']:6.1f}s  source {result['source']:>9,}  destination "
        f"{result['destination']:>9,}  per group {read / result['groups']:>9,.0f}  "
        f"{100 * read / records:6.2f}% of {records:,}  {result['steps']}  {check(result, want)}",
        flush=True,
    )


def traffic(src, dst, job, config, args) -> tuple[dict, int]:  # noqa: ANN001
    n = args.records
    read_at: dict[int, int] = {}
    first = None
    for per_ms in RATES:
        topic = f"t{per_ms}"
        mapping, _ = make_topic(src, dst, topic, 2, 3, n, per_ms, args.threads)
        groups = {
            f"{topic}-at{k}": offsets
            for k, offsets in enumerate(stopped(2, n, per_ms, [n // 4, n // 2, 3 * n // 4]))
        }
        groups[f"{topic}-drained"] = {0: n, 1: n}
        commit_all(Cluster("src", src.config), {
            g: {(topic, p): o for p, o in offs.items()} for g, offs in groups.items()
        })  # fmt: skip
        want = expected_reconcile(mapping, groups, 3)
        narrow = plan(job, config, topic, f"{topic}-.*")
        report(f"{per_ms}/ms narrow", narrow, 4 * n, want)
        read_at[per_ms] = narrow["source"] + narrow["destination"]
        if first is None:
            first = (topic, mapping)
            report(f"{per_ms}/ms full", plan(job, config, topic, f"{topic}-.*", True), 4 * n, want)
    for per_ms in RATES[1:]:
        ratio = read_at[per_ms] / read_at[RATES[0]]
        print(f"offsets read at {per_ms}/ms vs {RATES[0]}/ms: {ratio:.2f}x")
    return first


def groups_curve(src, dst, job, config, args, topic: str, mapping: dict) -> None:  # noqa: ANN001
    n, per_ms = args.records, RATES[0]
    rng = random.Random(7)
    instants = sorted(rng.randrange(n // 20, n - n // 20) for _ in range(40))
    distinct = sorted(rng.sample(range(n // 20, n - n // 20), 2000))
    worlds = {
        "g40": stopped(2, n, per_ms, instants),
        "g2000s": stopped(2, n, per_ms, instants) * 50,
        "g2000d": stopped(2, n, per_ms, distinct),
    }
    wants = {}
    for name, offsets in worlds.items():
        groups = {f"{topic}-{name}-{i:04d}": o for i, o in enumerate(offsets)}
        commit_all(Cluster("src", src.config), {
            g: {(topic, p): o for p, o in offs.items()} for g, offs in groups.items()
        })  # fmt: skip
        wants[name] = expected_reconcile(mapping, groups, 3)
    plan(job, config, topic, f"{topic}-g40-.*")  # warm-up: the first plan of a session is slower
    results = {}
    for name, label in (("g40", "40 groups, 40 instants"),
                        ("g2000s", "2,000 groups, the same 40 instants"),
                        ("g2000d", "2,000 groups, 2,000 instants")):  # fmt: skip
        results[name] = plan(job, config, topic, f"{topic}-{name}-.*")
        report(label, results[name], 4 * n, wants[name])
    base = results["g40"]["seconds"]
    for name in ("g2000s", "g2000d"):
        print(f"{name} / g40 time: {results[name]['seconds'] / base:.2f}x")


def wide(src, dst, job, config, args) -> None:  # noqa: ANN001
    n, topic = args.wide_records, "wide"
    mapping, _ = make_topic(src, dst, topic, 24, 48, n, 1, args.threads)
    rng = random.Random(1)
    groups = {f"{topic}-g00": {p: n for p in range(24)}}
    for g, off in enumerate(
        stopped(24, n, 1, [rng.randrange(n // 20, n - n // 20) for _ in range(19)])
    ):
        groups[f"{topic}-g{g + 1:02d}"] = off
    commit_all(Cluster("src", src.config), {
        g: {(topic, p): o for p, o in offs.items()} for g, offs in groups.items()
    })  # fmt: skip
    want = expected_reconcile(mapping, groups, 48)
    report(
        f"24 -> 48, {n:,}/partition narrow",
        plan(job, config, topic, f"{topic}-.*"),
        2 * 24 * n,
        want,
    )
    report(
        f"24 -> 48, {n:,}/partition full",
        plan(job, config, topic, f"{topic}-.*", True),
        2 * 24 * n,
        want,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--scenario", nargs="+", default=["traffic", "groups"],
                        choices=["traffic", "groups", "wide"])  # fmt: skip
    parser.add_argument("--records", type=int, default=200_000, help="per source partition")
    parser.add_argument("--wide-records", type=int, default=100_000,
                        help="per partition, 24 -> 48")  # fmt: skip
    parser.add_argument("--threads", type=int, default=4, help="producer threads")
    args = parser.parse_args()
    with local_brokers("reconcile-src", "reconcile-dst") as (src, dst):
        work = Path(tempfile.mkdtemp(prefix="ferry-reconcile-bench-"))
        config = write_config(work / "migrate.yaml", src, dst)
        job = load_migrate_job()
        first = None
        if "traffic" in args.scenario or "groups" in args.scenario:
            if "traffic" in args.scenario:
                first = traffic(src, dst, job, config, args)
            else:
                topic = f"t{RATES[0]}"
                first = (topic, make_topic(src, dst, topic, 2, 3, args.records, RATES[0],
                                           args.threads)[0])  # fmt: skip
        if "groups" in args.scenario:
            groups_curve(src, dst, job, config, args, *first)
        if "wide" in args.scenario:
            wide(src, dst, job, config, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
