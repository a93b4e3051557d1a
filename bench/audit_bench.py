"""The audit at 2,000 groups: one `audit` pass against a `migrate` dry run of the same groups.

World (built as `bench/groups_bench.py` builds it): one topic of 256 partitions × 30 records on a
local source broker, replicated in order to a local destination broker from offset 10 (every
destination offset is the source's minus 10, no gaps), and 2,000 stopped groups committed on
8-16 random partitions each at varied offsets. Each group also has destination offsets, placed
the way translations land: most as MirrorMaker 2 places them (the latest offset sync at or
before the committed offset, syncs every 10 source offsets: behind, or exact on a sync point),
some exact, some 1-3 records ahead, some partitions without a commit.

Each round runs, in-process on one warm Spark session, the real `migrate` job as a dry run
(`-o json`, its ledger) and the real `audit` job (`-o json`, its Delta table at audit.path) on
the same groups, alternating which goes first; times are split by stage (discover, plan, and
count: the records between committed and exact offsets, for the audit every partition that
differs, for migrate the ALREADY_MIGRATED groups'). Every audit row is checked against the
verdict and difference the world implies. The target: median audit / median migrate <= 1.2.
Exit 1 when a row is wrong.
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
os.environ.setdefault("FERRY_MASTER", "local[2]")

from groups_bench import REPLICATED_FROM, TOPIC, commit_all, make_groups, produce_world  # noqa: E402

from ferry import audit as audit_stages  # noqa: E402
from ferry import migrate as migrate_stages  # noqa: E402
from ferry.cli import run  # noqa: E402
from ferry.kafka.cluster import Cluster  # noqa: E402
from ferry.testing.brokers import local_brokers  # noqa: E402
from ferry.testing.produce import create_topics  # noqa: E402

SYNC_EVERY = 10
STAGES = ("discover", "plan", "count")
Offsets = dict[tuple[str, int], int]


def mm2_translation(committed: int) -> int:
    """MirrorMaker 2 (since KAFKA-12468): the latest offset sync at or before the committed
    offset, downstream + 1 unless the group sits exactly on it."""
    upstream = committed // SYNC_EVERY * SYNC_EVERY
    if upstream < REPLICATED_FROM:
        return 0
    downstream = upstream - REPLICATED_FROM
    return downstream if committed == upstream else downstream + 1


def place_translations(
    groups: dict[str, Offsets], records: int, seed: str
) -> tuple[dict[str, Offsets], dict[tuple[str, int], tuple[str, int | None]]]:
    """Destination offsets per group, and (group, partition) → (verdict, difference)."""
    rng = random.Random(seed)
    end = records - REPLICATED_FROM
    placed: dict[str, Offsets] = {}
    expected: dict[tuple[str, int], tuple[str, int | None]] = {}
    for group, offsets in groups.items():
        kind = rng.choices(["mm2", "exact", "ahead", "gaps"], [70, 15, 10, 5])[0]
        placed[group] = {}
        for (topic, p), c in offsets.items():
            exact = c - REPLICATED_FROM
            if kind == "gaps" and rng.random() < 0.3:
                expected[(group, p)] = ("NO_COMMIT", None)
                continue
            if kind == "ahead":
                committed = min(end, exact + rng.randint(1, 3))
            elif kind == "exact":
                committed = exact
            else:
                committed = mm2_translation(c)
            placed[group][(topic, p)] = committed
            diff = committed - exact
            verdict = "EXACT" if diff == 0 else "AHEAD" if diff > 0 else "BEHIND"
            expected[(group, p)] = (verdict, diff)
        if not placed[group]:  # every group keeps one commit
            (topic, p), c = next(iter(offsets.items()))
            placed[group][(topic, p)] = c - REPLICATED_FROM
            expected[(group, p)] = ("EXACT", 0)
    return placed, expected


def load_job(name: str):  # noqa: ANN201 - a module
    path = HERE.parent / "jobs" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"ferry_job_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


class StageTimer:
    """Times the stages both jobs call through `ferry.migrate` and `ferry.audit` (the jobs'
    own code paths are unchanged)."""

    WRAPPED = (
        (migrate_stages, "discover", "discover"),
        (migrate_stages, "build_plan", "plan"),
        (migrate_stages, "dry_run_differences", "count"),
        (audit_stages, "count_records", "count"),
    )

    def __init__(self) -> None:
        self.spent = dict.fromkeys(STAGES, 0.0)
        self._originals: list[tuple[object, str, Callable]] = []

    def __enter__(self) -> StageTimer:
        for module, name, stage in self.WRAPPED:
            original = getattr(module, name)
            self._originals.append((module, name, original))
            setattr(module, name, self._timed(original, stage))
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
        for module, name, original in self._originals:
            setattr(module, name, original)


def run_job(job, argv: list[str]) -> tuple[dict, int, str]:  # noqa: ANN001
    """One in-process run; returns ({stage: s, 'total': s, 'other': s}, exit code, stdout)."""
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
    times = {**timer.spent, "total": total}
    times["other"] = total - sum(timer.spent.values())
    return times, code, out.read_text()


def check_audit(doc: dict, expected: dict) -> int:
    """How many expected rows the audit got wrong (or left out)."""
    rows = {(r["group"], r["partition"]): (r["verdict"], r["difference"]) for r in doc["rows"]}
    return sum(1 for key, want in expected.items() if rows.get(key) != want)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", type=int, default=256)
    parser.add_argument("--records", type=int, default=30, help="records per partition")
    parser.add_argument("--groups", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    with local_brokers("audit-src", "audit-dst") as (src, dst):
        t0 = time.monotonic()
        create_topics(src.config, {TOPIC: args.partitions})
        create_topics(dst.config, {TOPIC: args.partitions})
        produce_world(src.config, dst.config, args.partitions, args.records)
        src_c, dst_c = Cluster("source", src.config), Cluster("destination", dst.config)
        groups = make_groups(args.groups, args.partitions, args.records, "ab")
        warmup = make_groups(20, args.partitions, args.records, "warm")
        placed, expected = place_translations(groups, args.records, "ab")
        commit_all(src_c, {**groups, **warmup})
        commit_all(dst_c, placed)
        kinds: dict[str, int] = {}
        for verdict, _ in expected.values():
            kinds[verdict] = kinds.get(verdict, 0) + 1
        mix = ", ".join(f"{k} {n}" for k, n in sorted(kinds.items()))
        print(
            f"world: {args.partitions} partitions x {args.records} records, {args.groups} groups, "
            f"{len(expected)} group partitions ({mix}); built in {time.monotonic() - t0:.0f}s",
            file=sys.stderr,
        )
        work = Path(tempfile.mkdtemp(prefix="ferry-audit-bench-"))
        config = work / "migrate.yaml"
        config.write_text(
            f"source:\n  bootstrap.servers: {src.bootstrap}\n"
            f"destination:\n  bootstrap.servers: {dst.bootstrap}\n"
            f"ledger:\n  path: {work / 'ledger'}\n"
            f"audit:\n  path: {work / 'audit'}\n"
        )
        jobs = {"migrate": load_job("migrate"), "audit": load_job("audit")}

        def argv(name: str, regex: str) -> list[str]:
            return ["--config", str(config), "-o", "json", "--quiet",
                    "--set", f"groups.include=['{regex}']"]  # fmt: skip

        for name in jobs:  # warm-up: JVM, Python workers, caches
            run_job(jobs[name], argv(name, "warm-.*"))

        times: dict[str, list[dict]] = {"migrate": [], "audit": []}
        wrong = 0
        for r in range(args.rounds):
            order = ["migrate", "audit"] if r % 2 == 0 else ["audit", "migrate"]
            for name in order:
                t, code, stdout = run_job(jobs[name], argv(name, "ab-.*"))
                times[name].append(t)
                detail = ""
                if name == "audit":
                    doc = json.loads(stdout)
                    bad = check_audit(doc, expected)
                    wrong += bad
                    total = doc["total"]
                    detail = (
                        f"  exit {code}, {total['partitions']} rows, {bad} wrong; "
                        f"{total['records_delivered_again']} records again, "
                        f"{total['records_skipped']} skipped"
                    )
                print(
                    f"round {r + 1} {name:7s}: {t['total']:6.1f}s  "
                    + "  ".join(f"{s} {t[s]:5.1f}s" for s in (*STAGES, "other"))
                    + detail,
                    file=sys.stderr,
                )
        spans = [
            (p, min(c, e), max(c, e))
            for g, offs in placed.items()
            for (_, p), c in offs.items()
            if (e := groups[g][(TOPIC, p)] - REPLICATED_FROM) != c
        ]
        merged = migrate_stages.merge_intervals  # per partition
        by_p: dict[int, list[tuple[int, int]]] = {}
        for p, lo, hi in spans:
            by_p.setdefault(p, []).append((lo, hi))
        read = sum(hi - lo for ivs in by_p.values() for lo, hi in merged(ivs))

        med = {
            n: {k: statistics.median(t[k] for t in ts) for k in ts[0]} for n, ts in times.items()
        }
        print(f"audit vs migrate dry run, {args.groups} groups, median of {args.rounds} rounds:")
        for name in ("migrate", "audit"):
            m = med[name]
            print(
                f"  {name:7s}: total {m['total']:6.1f}s  "
                + "  ".join(f"{s} {m[s]:5.1f}s" for s in (*STAGES, "other"))
            )
        print(f"audit counted {len(spans)} spans reading {read} destination offsets")
        print(f"every audit row right     : {'yes' if not wrong else f'NO ({wrong} wrong)'}")
        ratio = med["audit"]["total"] / med["migrate"]["total"]
        print(f"audit / migrate dry run   : {ratio:5.2f}x (target <= 1.2x)")
        return 0 if not wrong else 1


if __name__ == "__main__":
    sys.exit(main())
