"""Destination reads on a busy topic: the narrow search against a full-window read, same run.

World: one topic per traffic rate (10, 20 and 40 records per millisecond by default), each
partition holding RECORDS (>= 200,000) records, replicated to the destination from a later
offset; a few stopped groups per topic. The default ±60 s matching window holds every
partition whole at these rates, which is what a full-window read then reads.

For each rate, `migrate` runs as a dry run twice through the real job (in-process, warm Spark
session): `matching.search: narrow` (the default) and `full`. Prints destination offsets read
per anchor position for both (target for narrow: <= 1,000, and flat as the rate grows), the
times, and whether the two plans are identical and exact.
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
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
os.environ.setdefault("FERRY_MASTER", "local[2]")

from migrate_bench import load_migrate_job  # noqa: E402
from world import BulkProducer  # noqa: E402

from ferry.cli import run  # noqa: E402
from ferry.testing.brokers import local_brokers  # noqa: E402
from ferry.testing.produce import commit_offsets, create_topics  # noqa: E402

REPLICATED_FROM = 1000


def produce_topic(src: dict, dst: dict, topic: str, partitions: int, n: int, per_ms: int):
    base = int(time.time() * 1000) - 24 * 3600 * 1000
    ps, pd = BulkProducer(src), BulkProducer(dst)
    for p in range(partitions):
        for i in range(n):
            key, value = f"k{i % 31}".encode(), f"{topic}/{p}/{i}".encode()
            if i % 1009 in (7, 8, 9):  # a few identical records sharing a millisecond
                key, value = b"dup", b"dup"
            ts = base + i // per_ms
            ps.produce(topic, key, value, p, ts)
            if i >= REPLICATED_FROM:
                pd.produce(topic, key, value, p, ts)
    ps.flush()
    pd.flush()


def run_migrate(job, config: Path, regex: str, search: str) -> tuple[float, list[dict], str]:
    out, err = io.StringIO(), io.StringIO()
    argv = ["--config", str(config), "-o", "json", "--set", f"groups.include=['{regex}']"]
    argv += ["--set", f"matching.search={search}"]
    t0 = time.monotonic()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = run(job.main, argv)
    elapsed = time.monotonic() - t0
    if code not in (0, 1, 75) or not out.getvalue().strip():
        raise SystemExit(f"migrate failed ({code}): {err.getvalue()[-2000:]}")
    return elapsed, json.loads(out.getvalue()), err.getvalue()


def plan_of(rows: list[dict]) -> dict:
    """(group, topic, partition) → (status, destination offset)."""
    return {
        (r["group"], r["src_topic"], r["src_partition"]): (r["status"], r["destination_offset"])
        for r in rows
    }


def offsets_read(stderr: str) -> int:
    narrow = re.search(r"destination: read (\d+) offsets", stderr)
    if narrow:
        return int(narrow.group(1))
    return int(re.search(r"destination: reading \d+ windows \((\d+) offsets\)", stderr).group(1))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=200_000, help="records per partition")
    parser.add_argument("--partitions", type=int, default=1)
    parser.add_argument("--groups", type=int, default=3, help="groups per topic")
    parser.add_argument("--rates", default="10,20,40", help="records per millisecond")
    args = parser.parse_args()
    rates = [int(r) for r in args.rates.split(",")]
    rng = random.Random(7)
    with local_brokers("busy-src", "busy-dst") as (src, dst):
        topics = {rate: f"busy{rate}" for rate in rates}
        create_topics(src.config, {t: args.partitions for t in topics.values()})
        create_topics(dst.config, {t: args.partitions for t in topics.values()})
        t0 = time.monotonic()
        expected: dict[tuple[str, str, int], int] = {}
        for rate, topic in topics.items():
            produce_topic(src.config, dst.config, topic, args.partitions, args.records, rate)
            for g in range(args.groups):
                offsets = {
                    (topic, p): rng.randrange(REPLICATED_FROM + 50, args.records)
                    for p in range(args.partitions)
                }
                group = f"busy{rate}-{g}"
                commit_offsets(src.config, group, offsets)
                for (t, p), c in offsets.items():
                    expected[(group, t, p)] = c - REPLICATED_FROM
        print(
            f"world: {len(rates)} topics x {args.partitions} partitions x {args.records} records, "
            f"{args.groups} groups each (built in {time.monotonic() - t0:.0f}s)",
            file=sys.stderr,
        )
        work = Path(tempfile.mkdtemp(prefix="ferry-busy-"))
        config = work / "migrate.yaml"
        config.write_text(
            f"source:\n  bootstrap.servers: {src.bootstrap}\n"
            f"destination:\n  bootstrap.servers: {dst.bootstrap}\n"
            f"ledger:\n  path: {work / 'ledger'}\n"
        )
        job = load_migrate_job()
        run_migrate(job, config, f"busy{rates[0]}-0", "narrow")  # warm-up: JVM, workers

        print(
            f"{'records/ms':>10} {'anchors':>7} {'narrow read/anchor':>18} "
            f"{'full read/anchor':>16} {'narrow s':>8} {'full s':>7}  plans"
        )
        per_anchor: dict[int, float] = {}
        ok = True
        for rate in rates:
            regex = f"busy{rate}-.*"
            narrow_s, narrow, narrow_err = run_migrate(job, config, regex, "narrow")
            full_s, full, full_err = run_migrate(job, config, regex, "full")
            anchors = len(narrow)
            n_narrow, n_full = offsets_read(narrow_err), offsets_read(full_err)
            per_anchor[rate] = n_narrow / anchors

            same = plan_of(narrow) == plan_of(full)
            if os.environ.get("BUSY_BENCH_DEBUG"):
                print(narrow_err, full_err, plan_of(narrow), plan_of(full), file=sys.stderr)
            exact = all(
                plan_of(narrow)[key] == ("MATCHED", off)
                for key, off in expected.items()
                if key[1] == topics[rate]
            )
            ok = ok and same and exact
            verdict = ("identical" if same else "DIFFER") + (", exact" if exact else ", NOT EXACT")
            print(
                f"{rate:>10} {anchors:>7} {n_narrow / anchors:>18.0f} {n_full / anchors:>16.0f} "
                f"{narrow_s:>8.1f} {full_s:>7.1f}  {verdict}"
            )
        worst = max(per_anchor.values())
        first = per_anchor[rates[0]]
        print(f"narrow reads per anchor: at most {worst:.0f} (target <= 1,000)")
        for rate in rates[1:]:
            print(
                f"  at {rate / rates[0]:.0f}x the traffic: {per_anchor[rate] / first:.2f}x the "
                "reads (target: flat, ~1x)"
            )
        return 0 if ok and worst <= 1000 else 1


if __name__ == "__main__":
    sys.exit(main())
