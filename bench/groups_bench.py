"""The groups curve: `migrate --execute` for 40, 400 and 2,000 groups over 256 partitions.

World: one topic of PARTITIONS (256) partitions on a local source cluster, a few records each,
replicated in order to a local destination cluster from offset REPLICATED_FROM (so every
destination offset is the source's minus REPLICATED_FROM). For each size N, N stopped groups
with committed offsets on 8-16 random partitions each, at varied offsets.

Each round runs, per size, the real `migrate` job (jobs/migrate.py, in-process, one warm
Spark session for all sizes) with `--execute` on that size's groups and a ledger of its own,
then checks every group's committed destination offsets against the expected ones. Every
round has groups of its own, so every run migrates groups the destination has not seen. The
time of each run is split by stage (discover, plan, commit; `other` is session, ledger setup
and output), medians over the rounds are printed, and the target t(2000) / t(40) <= 3x is the
ratio of the medians.
Exit 1 when any group is not exact.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
os.environ.setdefault("FERRY_MASTER", "local[2]")

from world import BulkProducer, commit_all  # noqa: E402, F401 - commit_all for other benches

from ferry import kafka  # noqa: E402
from ferry import migrate as migrate_stages  # noqa: E402
from ferry.cli import run  # noqa: E402
from ferry.kafka.cluster import Cluster  # noqa: E402
from ferry.testing.brokers import local_brokers  # noqa: E402
from ferry.testing.produce import create_topics  # noqa: E402

TOPIC = "groups-bench"
REPLICATED_FROM = 10
STAGES = ("discover", "plan", "commit")
Offsets = dict[tuple[str, int], int]


def produce_world(src: dict, dst: dict, partitions: int, records: int) -> None:
    """Unique records on every partition; the destination gets records[REPLICATED_FROM:] in
    order."""
    base = int(time.time() * 1000) - 24 * 3600 * 1000
    ps, pd = BulkProducer(src), BulkProducer(dst)
    for p in range(partitions):
        for i in range(records):
            key, value, ts = f"k{i % 7}".encode(), f"{p}/{i}".encode(), base + i * 1000
            ps.produce(TOPIC, key, value, p, ts)
            if i >= REPLICATED_FROM:
                pd.produce(TOPIC, key, value, p, ts)
    ps.flush()
    pd.flush()


def make_groups(size: int, partitions: int, records: int, prefix: str) -> dict[str, Offsets]:
    """`size` groups, each committed on 8-16 random partitions at varied offsets."""
    rng = random.Random(prefix)
    groups = {}
    for g in range(size):
        chosen = rng.sample(range(partitions), rng.randint(8, 16))
        groups[f"{prefix}-{g:04d}"] = {
            (TOPIC, p): rng.randrange(REPLICATED_FROM + 1, records + 1) for p in chosen
        }
    return groups


def load_migrate_job():  # noqa: ANN201 - a module
    path = HERE.parent / "jobs" / "migrate.py"
    spec = importlib.util.spec_from_file_location("ferry_job_migrate", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


class StageTimer:
    """Times the job's stages by wrapping the `ferry.migrate` functions jobs/migrate.py calls
    (the job's own code path is unchanged)."""

    def __init__(self) -> None:
        self.spent = dict.fromkeys(STAGES, 0.0)
        self._originals: dict[str, Callable] = {}

    def __enter__(self) -> StageTimer:
        for name, stage in (("discover", "discover"), ("build_plan", "plan"),
                            ("commit_groups", "commit")):  # fmt: skip
            original = getattr(migrate_stages, name)
            self._originals[name] = original
            setattr(migrate_stages, name, self._timed(original, stage))
        return self

    def _timed(self, fn: Callable, stage: str) -> Callable:
        def wrapper(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
            t0 = time.monotonic()
            try:
                return fn(*args, **kwargs)
            finally:
                self.spent[stage] += time.monotonic() - t0

        return wrapper

    def __exit__(self, *exc: object) -> None:
        for name, original in self._originals.items():
            setattr(migrate_stages, name, original)


def run_migrate(job, config: Path, regex: str, ledger: Path, execute: bool) -> tuple[dict, list]:  # noqa: ANN001
    """One `migrate` run; returns ({stage: seconds, 'total': s, 'other': s}, plan rows)."""
    argv = ["--config", str(config), "-o", "json", "--quiet",
            "--set", f"groups.include=['{regex}']", "--set", f"ledger.path={ledger}"]  # fmt: skip
    if execute:
        argv.append("--execute")
    out = Path(tempfile.mkstemp(suffix=".json")[1])
    stdout = sys.stdout
    with StageTimer() as timer, out.open("w") as fh:
        sys.stdout = fh
        t0 = time.monotonic()
        try:
            code = run(job.main, argv)
        finally:
            total = time.monotonic() - t0
            sys.stdout = stdout
    if code != 0:
        raise SystemExit(f"migrate {regex} exited {code}")
    times = {**timer.spent, "total": total}
    times["other"] = total - sum(timer.spent.values())
    return times, json.loads(out.read_text())


def check_exact(dst: Cluster, groups: dict[str, Offsets], plan: list[dict]) -> int:
    """How many groups are COMMITTED with exactly the expected destination offsets."""
    statuses = {r["group"]: r["group_status"] for r in plan}
    actual = kafka.committed_offsets(dst, sorted(groups))
    exact = 0
    for group, offsets in groups.items():
        want = {tp: o - REPLICATED_FROM for tp, o in offsets.items()}
        if statuses.get(group) == "COMMITTED" and actual[group] == want:
            exact += 1
    return exact


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", type=int, default=256)
    parser.add_argument("--records", type=int, default=30, help="records per partition")
    parser.add_argument("--sizes", default="40,400,2000", help="group counts, comma separated")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    with local_brokers("groups-src", "groups-dst") as (src, dst):
        t0 = time.monotonic()
        create_topics(src.config, {TOPIC: args.partitions})
        create_topics(dst.config, {TOPIC: args.partitions})
        produce_world(src.config, dst.config, args.partitions, args.records)
        src_c, dst_c = Cluster("source", src.config), Cluster("destination", dst.config)
        worlds = {
            (n, r): make_groups(n, args.partitions, args.records, f"gb{n}r{r}")
            for n in sizes
            for r in range(args.rounds)
        }
        for groups in worlds.values():
            commit_all(src_c, groups)
        print(
            f"world: {args.partitions} partitions x {args.records} records, groups "
            + ", ".join(f"{n} ({sum(len(o) for o in worlds[n, 0].values())} group partitions)"
                        for n in sizes)  # fmt: skip
            + f" (built in {time.monotonic() - t0:.0f}s)",
            file=sys.stderr,
        )
        work = Path(tempfile.mkdtemp(prefix="ferry-groups-bench-"))
        config = work / "migrate.yaml"
        config.write_text(
            f"source:\n  bootstrap.servers: {src.bootstrap}\n"
            f"destination:\n  bootstrap.servers: {dst.bootstrap}\n"
            f"ledger:\n  path: {work / 'ledger'}\n"
        )
        job = load_migrate_job()
        # Warm-up: JVM, Python workers, caches (a dry run writes nothing to the destination).
        run_migrate(job, config, f"gb{sizes[0]}r0-.*", work / "ledger-warmup", execute=False)

        times: dict[int, list[dict]] = {n: [] for n in sizes}
        all_exact = True
        for r in range(args.rounds):
            for n in sizes:
                t, plan = run_migrate(
                    job, config, f"gb{n}r{r}-.*", work / f"ledger-{n}-{r}", execute=True
                )
                exact = check_exact(dst_c, worlds[n, r], plan)
                all_exact &= exact == n
                times[n].append(t)
                print(
                    f"round {r + 1} {n:5d} groups: {t['total']:6.1f}s  "
                    + "  ".join(f"{s} {t[s]:5.1f}s" for s in (*STAGES, "other"))
                    + f"  exact {exact}/{n}",
                    file=sys.stderr,
                )

        print(f"groups curve, {args.partitions} partitions, median of {args.rounds} rounds:")
        med = {n: {k: statistics.median(t[k] for t in times[n]) for k in times[n][0]}
               for n in sizes}  # fmt: skip
        for n in sizes:
            m = med[n]
            print(
                f"  {n:5d} groups: total {m['total']:6.1f}s  "
                + "  ".join(f"{s} {m[s]:5.1f}s" for s in (*STAGES, "other"))
            )
        print(f"every plan exact          : {'yes' if all_exact else 'NO'}")
        if len(sizes) > 1:
            lo, hi = sizes[0], sizes[-1]
            ratio = med[hi]["total"] / med[lo]["total"]
            print(f"t({hi}) / t({lo})         : {ratio:5.2f}x (target <= 3x)")
        return 0 if all_exact else 1


if __name__ == "__main__":
    sys.exit(main())
