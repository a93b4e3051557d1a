"""Every group at its own offset (issue #40): `migrate` dry runs where distinct positions are
about as many as group partitions, beside the raw-client floor and a trivial PySpark job
measured in the same run.

World: 4 topics x 16 partitions x RECORDS (10,000) unique records (one per millisecond, so a
partition lies inside one default +-60 s window) on a local source cluster, replicated in
order to a local destination from offset REPLICATED_FROM (5): every exact destination offset
is the source's minus 5. Each group commits its own random offset on every partition of 2 of
the topics (32 group partitions); offsets are drawn after the replication start, so every
plan is exact and READY. 40 / 2,000 / 10,000 groups give about 1,280 / 60,900 / 251,000
distinct positions (`--sizes`: group counts), and a few positions whose anchors stay undecided
until their whole window is read (`make_groups`).

Per size: the raw-client floor (`many_groups_bench.raw_floor`: groups listed with their states,
offsets fetched on both clusters, log ends, every record of BOTH clusters read once; the
faster of two runs), the trivial PySpark job (`fixed_cost.trivial_command`: the job's own
spark-submit command with the job file swapped) and the dry run, each through
`./spark-submit.sh` with default settings; then the ratio of the dry run to the trivial job +
2 x the floor (the issue's acceptance: <= 1), printed, never asserted. `--compare DIR` also
times the dry run of another checkout (e.g. the code before a change) on the same world,
alternating with this one, so a change is judged against the old code under the same load.
The dry run's progress lines (where the time went) are printed after each run.
`--execute` then commits each size once (this checkout) and sets it beside the write floor
(`many_groups_bench.write_floor`: every group's offsets written, one request per group, 1,000
in flight at a time, and read back): the issue's `--execute` acceptance is <= trivial + 2 x
floor + the write floor; every committed offset is checked against the exact one on the
destination.
Exit 1 when a run fails or any plan or committed offset is not exact.
"""

from __future__ import annotations

import argparse
import random
import re
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from fixed_cost import _clean_env, timed, trivial_command  # noqa: E402
from many_groups_bench import (  # noqa: E402
    best_floor,
    check_plan,
    committed_exact,
    run_job,
    write_floor,
)
from world import BulkProducer, commit_all  # noqa: E402

from ferry.kafka.cluster import Cluster  # noqa: E402
from ferry.testing.brokers import local_brokers  # noqa: E402
from ferry.testing.produce import create_topics  # noqa: E402

TOPICS = [f"pos-t{i}" for i in range(4)]
PARTITIONS = 16
RECORDS = 10_000
REPLICATED_FROM = 5
Offsets = dict[tuple[str, int], int]
PROGRESS = re.compile(r"^\[\s*(?P<at>[\d.]+)s\] (?P<msg>.*)$")


def produce_world(src: dict, dst: dict) -> None:
    base = int(time.time() * 1000) - 24 * 3600 * 1000
    ps, pd = BulkProducer(src), BulkProducer(dst)
    for topic in TOPICS:
        for p in range(PARTITIONS):
            for i in range(RECORDS):
                key, value, ts = f"k{i % 7}".encode(), f"{topic}/{p}/{i}".encode(), base + i
                ps.produce(topic, key, value, p, ts)
                if i >= REPLICATED_FROM:
                    pd.produce(topic, key, value, p, ts)
    ps.flush()
    pd.flush()


def make_groups(size: int, prefix: str) -> dict[str, Offsets]:
    """Each group its own random offset on every partition of 2 topics (after the replication
    start, so that the exact destination offset exists). Seeded so that the 40 groups have,
    like the issue's run, 3 positions within `context` + 1 records of the replication start:
    their anchors' context is cut short by the destination's log start, so they stay open
    until their whole window is read."""
    rng = random.Random(f"{prefix}/0")
    return {
        f"{prefix}-{g:05d}": {
            (t, p): rng.randrange(REPLICATED_FROM + 1, RECORDS + 1)
            for t in rng.sample(TOPICS, 2)
            for p in range(PARTITIONS)
        }
        for g in range(size)
    }


def progress_lines(stderr: Path) -> list[str]:
    """The run's progress lines, each with the seconds since the line before it."""
    out, last = [], 0.0
    for line in stderr.read_text().splitlines():
        m = PROGRESS.match(line)
        if m:
            at = float(m["at"])
            out.append(f"    +{at - last:5.1f}s  {m['msg']}")
            last = at
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="40,2000,10000", help="group counts, comma separated")
    parser.add_argument("--rounds", type=int, default=1, help="dry runs per size (and checkout)")
    parser.add_argument("--compare", type=Path, help="another checkout's root to time as well")
    parser.add_argument(
        "--execute", action="store_true", help="also commit each size once, beside the write floor"
    )
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    roots = {"this": ROOT} | ({"compare": args.compare.resolve()} if args.compare else {})
    ok = True
    with local_brokers("pos-src", "pos-dst") as (src, dst):
        t0 = time.monotonic()
        work = Path(tempfile.mkdtemp(prefix="ferry-positions-"))
        topics = dict.fromkeys(TOPICS, PARTITIONS)
        create_topics(src.config, topics)
        create_topics(dst.config, topics)
        produce_world(src.config, dst.config)
        src_c, dst_c = Cluster("source", src.config), Cluster("destination", dst.config)
        worlds = {n: make_groups(n, f"pos{n}") for n in sizes}
        for groups in worlds.values():
            commit_all(src_c, groups)
        print(f"world built in {time.monotonic() - t0:.0f}s; runs' output in {work}",
              file=sys.stderr)  # fmt: skip
        summary = []
        for n in sizes:
            groups = worlds[n]
            config = work / f"{n}.yaml"
            config.write_text(
                f"source:\n  bootstrap.servers: {src.bootstrap}\n"
                f"destination:\n  bootstrap.servers: {dst.bootstrap}\n"
                f"groups:\n  include: ['pos{n}-.*']\n"
                f"ledger:\n  path: {work / f'ledger-{n}'}\n"
            )
            argv = ["migrate", "--config", str(config), "-o", "json"]
            distinct = {(t, p, o) for offs in groups.values() for (t, p), o in offs.items()}
            positions = len(distinct)
            # anchors whose destination context the log start cuts short (default context 16)
            near = sum(o <= REPLICATED_FROM + 17 for _, _, o in distinct)
            floor = best_floor(
                src_c, dst_c, f"pos{n}-", "listing",
                topics=topics, records=RECORDS, read_destination=True,
            )  # fmt: skip
            env, trivial_argv = trivial_command(argv)
            trivial = min(timed(trivial_argv, _clean_env(env))[0] for _ in range(args.rounds))
            times: dict[str, list[float]] = {name: [] for name in roots}
            for r in range(args.rounds):
                for name, root in roots.items():
                    out = work / f"{n}-{name}-{r}.json"
                    code, seconds, peak, tail = run_job(argv, out, root)
                    times[name].append(seconds)
                    note = f"EXIT {code}: {tail}"
                    if code == 0:
                        exact = check_plan(out, groups, "READY", REPLICATED_FROM)
                        ok &= exact == n
                        note = f"exact {exact}/{n}"
                    else:
                        ok = False
                    print(
                        f"{n:6d} groups, {positions} positions ({near} at the log start), "
                        f"{name} dry run {seconds:6.1f}s peak {peak:6.0f} MiB, {note}",
                        file=sys.stderr,
                    )
                    print("\n".join(progress_lines(out.with_suffix(".stderr"))), file=sys.stderr)
            target = trivial + 2 * floor
            for name, ts in times.items():
                best = min(ts)
                summary.append(
                    f"  {n:6d} groups {positions:7d} positions  floor {floor:5.1f}s  trivial "
                    f"{trivial:5.1f}s  {name} dry run {best:6.1f}s = "
                    f"{best / target:4.2f}x (trivial + 2 x floor = {target:.1f}s; target <= 1)"
                )
            if len(times) == 2:
                summary.append(
                    f"         this / compare: {min(times['this']) / min(times['compare']):.2f}x"
                )
            if args.execute:
                ok &= _execute(argv, work / f"{n}-execute.json", groups, dst_c, target, summary)
        print("every group at its own offset (best of the rounds), default settings:")
        print("\n".join(summary))
        print(f"every plan exact: {'yes' if ok else 'NO'}")
    return 0 if ok else 1


def _execute(
    argv: list[str],
    out: Path,
    groups: dict[str, Offsets],
    dst: Cluster,
    target: float,
    summary: list[str],
) -> bool:
    """Time one `--execute` of this checkout beside the write floor (measured first: it writes
    under other group names); True when every group was committed exactly."""
    n = len(groups)
    floor_write = write_floor(dst, groups, REPLICATED_FROM)
    code, seconds, peak, tail = run_job([*argv, "--execute"], out, ROOT)
    planned = check_plan(out, groups, "COMMITTED", REPLICATED_FROM) if code == 0 else 0
    committed = committed_exact(dst, groups, REPLICATED_FROM)
    note = f"exact {planned}/{n}, committed {committed}/{n}"
    if code != 0:
        note = f"EXIT {code}: {tail}"
    print(f"{n:6d} groups, --execute {seconds:6.1f}s peak {peak:6.0f} MiB, {note}",
          file=sys.stderr)  # fmt: skip
    lines = progress_lines(out.with_suffix(".stderr"))
    print("\n".join(x for x in lines if "  committed " not in x), file=sys.stderr)  # per group
    summary.append(
        f"  {n:6d} groups  write floor {floor_write:5.1f}s  this --execute {seconds:6.1f}s = "
        f"{seconds / (target + floor_write):4.2f}x (trivial + 2 x floor + write floor = "
        f"{target + floor_write:.1f}s; target <= 1)"
    )
    return code == 0 and planned == n and committed == n


if __name__ == "__main__":
    sys.exit(main())
