"""Many groups: `migrate` (dry run and --execute), `audit` and `groups describe` of 40, 2,000
and 10,000 groups, each a real `./spark-submit.sh` run with default settings, beside the same
run's raw-client floors.

World (issue #31's shape): 8 topics of 32 partitions on a local source cluster, RECORDS (200)
unique records per partition, replicated in order to a local destination cluster from offset
REPLICATED_FROM (so every exact destination offset is the source's minus REPLICATED_FROM).
Every group is stopped and committed on 2 topics x 32 partitions (64 group partitions), at
offsets drawn from every third offset: ~16,000 distinct positions however many groups.

Per size the bench prints wall time and peak driver memory (the RSS of spark-submit's JVM and
the Python driver together, sampled every 0.1 s) for each run, and the raw-client floor: a
plain confluent-kafka program that lists the groups, describes them and fetches their
committed offsets on both clusters, reads both clusters' log ends and every record of the
source once (the faster of two runs). The floor is also taken with the states the group
listing carries instead of describing every group (as Ferry takes them), and `--execute` is
set beside the floor plus a raw write: every group's offsets written (one request per group,
all in flight) and read back. Targets: Ferry's marginal cost from the smallest to the largest
size at most 3x the floor's; the largest size within 60 s.
Exit 1 when a run fails or any offset is not exact.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
# Brokers hold every group's offsets in memory: 10,000 groups x 64 partitions on each side.
os.environ.setdefault("FERRY_BROKER_JVM_OPTS", "-Xmx1g")

from world import BulkProducer, commit_all  # noqa: E402

from ferry import kafka  # noqa: E402
from ferry.kafka.cluster import Cluster  # noqa: E402
from ferry.testing.brokers import local_brokers  # noqa: E402
from ferry.testing.produce import create_topics  # noqa: E402

TOPICS = [f"mg-t{i}" for i in range(8)]
PARTITIONS = 32
RECORDS = 200
REPLICATED_FROM = 10
JOBS = ("dry-run", "execute", "audit", "describe")
Offsets = dict[tuple[str, int], int]


def produce_world(src: dict, dst: dict) -> None:
    base = int(time.time() * 1000) - 24 * 3600 * 1000
    ps, pd = BulkProducer(src), BulkProducer(dst)
    for topic in TOPICS:
        for p in range(PARTITIONS):
            for i in range(RECORDS):
                key, value, ts = f"k{i % 7}".encode(), f"{topic}/{p}/{i}".encode(), base + i * 100
                ps.produce(topic, key, value, p, ts)
                if i >= REPLICATED_FROM:
                    pd.produce(topic, key, value, p, ts)
    ps.flush()
    pd.flush()


def make_groups(size: int, prefix: str) -> dict[str, Offsets]:
    rng = random.Random(prefix)
    offsets = range(REPLICATED_FROM + 1, RECORDS + 1, 3)
    return {
        f"{prefix}-{g:05d}": {
            (t, p): rng.choice(offsets) for t in rng.sample(TOPICS, 2) for p in range(PARTITIONS)
        }
        for g in range(size)
    }


def _tree_rss(pid: int) -> int:
    """RSS in bytes of a process and all its descendants."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        todo += children.get(p, [])
        try:
            with open(f"/proc/{p}/statm") as fh:
                total += int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, IndexError, ValueError):
            pass
    return total


def run_job(args: list[str], out: Path, root: Path = ROOT) -> tuple[int, float, float, str]:
    """(exit code, seconds, peak MiB, stderr tail) of one `./spark-submit.sh` run (of the
    checkout at `root`: another one's code can be timed on the same world)."""
    t0 = time.monotonic()
    with out.open("w") as fh:
        proc = subprocess.Popen(
            [str(root / "spark-submit.sh"), *args], stdout=fh, stderr=subprocess.PIPE, text=True
        )
        peak = [0]

        def sample() -> None:
            while proc.poll() is None:
                peak[0] = max(peak[0], _tree_rss(proc.pid))
                time.sleep(0.1)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        _, err = proc.communicate()
        sampler.join()
    out.with_suffix(".stderr").write_text(err)  # the job's timestamped progress
    tail = "\n".join(err.strip().splitlines()[-3:])
    return proc.returncode, time.monotonic() - t0, peak[0] / 2**20, tail


def raw_floor(
    src: Cluster,
    dst: Cluster,
    prefix: str,
    states: str = "describe",
    topics: dict[str, int] | None = None,
    records: int = RECORDS,
    read_destination: bool = False,
) -> float:
    """Seconds a plain confluent-kafka program takes to gather what migrate needs. `states`:
    "describe" (each group described, as the issue's floor) or "listing" (the states the
    group listing carries, as Ferry takes them). `topics` (name: partitions; default this
    bench's) hold `records` records per source partition; `read_destination`: every record of
    the destination is read once too (other benches' floors)."""
    topics = topics or dict.fromkeys(TOPICS, PARTITIONS)
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
    from confluent_kafka.admin import OffsetSpec

    t0 = time.monotonic()

    def side(cluster: Cluster) -> None:
        admin = cluster.admin()
        listed = admin.list_consumer_groups().result()
        groups = sorted(g.group_id for g in listed.valid if g.group_id.startswith(prefix))
        if states == "describe":
            for i in range(0, len(groups), 1000):
                for f in admin.describe_consumer_groups(groups[i : i + 1000]).values():
                    f.result()
        futures = [
            admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(g)])[g] for g in groups
        ]
        for f in futures:
            f.result()
        tps = {
            TopicPartition(t, p): OffsetSpec.latest() for t, n in topics.items() for p in range(n)
        }
        for f in admin.list_offsets(tps).values():
            f.result()

    with ThreadPoolExecutor(3) as pool:
        done = [pool.submit(side, src), pool.submit(side, dst)]
        if read_destination:
            done.append(pool.submit(consume_all, dst.conf, topics))
        n = consume_all(src.conf, topics)
        for f in done:
            f.result()
    assert n == sum(topics.values()) * records, n
    return time.monotonic() - t0


def consume_all(
    conf: dict, topics: dict[str, int], keep: Callable[[Any], None] | None = None
) -> int:
    """How many records `topics` (name: partitions) hold, every one read once from offset 0 by
    a plain assigned consumer in batches (a floor's read), each handed to `keep` if given."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({**conf, "group.id": "floor", "enable.auto.commit": False,
                         "enable.partition.eof": True})  # fmt: skip
    consumer.assign([TopicPartition(t, p, 0) for t, n in topics.items() for p in range(n)])
    left, n = sum(topics.values()), 0
    while left:
        for m in consumer.consume(10_000, 1.0):
            if m.error() is None:
                n += 1
                if keep is not None:
                    keep(m)
            elif m.error().code() == -191:  # _PARTITION_EOF
                left -= 1
    consumer.close()
    return n


def best_floor(src: Cluster, dst: Cluster, prefix: str, states: str, **kwargs: object) -> float:
    """The faster of two `raw_floor` runs that finish: a floor is the least the client needs.
    A run can fail: a burst of 10,000 describes is sometimes left unanswered past the client's
    timeout (docs/kafka.md); such a run is taken again, up to four runs in all, on new
    clients. The runs happen in a process of their own (spawned, one after another on its
    clients, as in one program): after such a timeout librdkafka has aborted the whole
    process (`rd_kafka_enq_once_del_source_return`), on the client that timed out and on a
    new one alike. A process that dies so is a failed run, and the rest are taken in a new
    one."""
    import multiprocessing
    import queue as queues

    context = multiprocessing.get_context("spawn")
    sides = ((src.name, dict(src.conf)), (dst.name, dict(dst.conf)))
    times: list[float] = []
    attempts = 0
    while attempts < 4 and len(times) < 2:
        answers = context.Queue()
        child = context.Process(
            target=_floor_runs,
            args=(answers, *sides, prefix, states, kwargs, 2 - len(times), 4 - attempts),
        )
        child.start()
        finished = False
        while not finished:
            try:
                kind, value = answers.get(timeout=1)
            except queues.Empty:
                if child.is_alive():
                    continue
                attempts += 1  # it died mid-run, its answer with it
                print(f"floor ({states}) run died (exit {child.exitcode}), taken again in a "
                      "new process", file=sys.stderr)  # fmt: skip
                break
            if kind == "time":
                attempts += 1
                times.append(value)
            elif kind == "failed":
                attempts += 1
                print(f"floor ({states}) run failed, taken again: {value}", file=sys.stderr)
            else:
                finished = True
        child.join()
    if not times:
        raise RuntimeError(f"the raw-client floor ({states}) failed four times")
    return min(times)


def _floor_runs(
    answers,  # noqa: ANN001 - a multiprocessing queue
    src: tuple[str, dict],
    dst: tuple[str, dict],
    prefix: str,
    states: str,
    kwargs: dict,
    wanted: int,
    attempts: int,
) -> None:
    """`best_floor`'s process: `raw_floor` runs until `wanted` finish or `attempts` are
    spent, each time or failure sent as it happens, new clients after a failure."""
    s, d = Cluster(*src), Cluster(*dst)
    done = 0
    for _ in range(attempts):
        try:
            answers.put(("time", raw_floor(s, d, prefix, states, **kwargs)))
            done += 1
        except Exception as exc:  # noqa: BLE001 - the floor's own client failing
            answers.put(("failed", str(exc)))
            s, d = Cluster(*src), Cluster(*dst)
        if done == wanted:
            break
    answers.put(("done", None))


def write_floor(dst: Cluster, groups: dict[str, Offsets], shift: int = REPLICATED_FROM) -> float:
    """Seconds a plain confluent-kafka program takes to write what `--execute` writes (every
    group's offsets, the source's - `shift`, one request per group, WRITE_WAVE in flight at a
    time, as Ferry sends them) and read it all back — under other group names, deleted
    afterwards, so that the run still finds the groups to write. All 10,000 in flight at once
    were sometimes left unanswered past the client's timeout, and twice librdkafka then
    aborted on the retry (`rd_kafka_enq_once_del_source_return`). A run that times out anyway
    is taken again on a new client, up to three runs in all."""
    from confluent_kafka import KafkaError, KafkaException

    for attempt in range(3):
        try:
            return _write_floor_once(dst, groups, shift)
        except KafkaException as e:
            if e.args[0].code() != KafkaError._TIMED_OUT or attempt == 2:
                raise
            print(f"write floor run timed out, taken again: {e}", file=sys.stderr)
            dst.renew_admin()
    raise AssertionError("unreachable")


WRITE_WAVE = 1_000  # requests in flight at a time (`admin.batch_groups`)


def _waves(items: list, submit) -> None:  # noqa: ANN001
    """`submit(item)` (a future) for every item, WRITE_WAVE in flight at a time."""
    for start in range(0, len(items), WRITE_WAVE):
        for f in [submit(item) for item in items[start : start + WRITE_WAVE]]:
            f.result()


def _write_floor_once(dst: Cluster, groups: dict[str, Offsets], shift: int) -> float:
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

    admin = dst.admin()
    names = {g: f"floor-{g}" for g in groups}
    t0 = time.monotonic()
    _waves(list(groups.items()), lambda item: admin.alter_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(names[item[0]], [
            TopicPartition(t, p, o - shift) for (t, p), o in sorted(item[1].items())
        ])]
    )[names[item[0]]])  # fmt: skip
    _waves(list(names.values()), lambda n: admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(n)])[n])  # fmt: skip
    seconds = time.monotonic() - t0
    from confluent_kafka import KafkaError, KafkaException

    for f in admin.delete_consumer_groups(list(names.values())).values():
        try:
            f.result()
        except KafkaException as e:  # a clean-up: a group already gone needs no delete
            if e.args[0].code() != KafkaError.GROUP_ID_NOT_FOUND:
                raise
    return seconds


def check_plan(
    path: Path, groups: dict[str, Offsets], status: str, shift: int = REPLICATED_FROM
) -> int:
    """Groups whose every row has `status` and the exact offset (the source's - `shift`)."""
    rows = json.loads(path.read_text())
    got: dict[str, Offsets] = {}
    bad = set()
    for r in rows:
        got.setdefault(r["group"], {})[(r["dst_topic"], r["dst_partition"])] = r[
            "destination_offset"
        ]
        if r["group_status"] != status:
            bad.add(r["group"])
    want = {g: {tp: o - shift for tp, o in offs.items()} for g, offs in groups.items()}
    return sum(1 for g in groups if g not in bad and got.get(g) == want[g])


def committed_exact(dst: Cluster, groups: dict[str, Offsets], shift: int = REPLICATED_FROM) -> int:
    """Groups whose committed offsets on the destination are exactly the source's - `shift`."""
    actual = kafka.committed_offsets(dst, sorted(groups))
    return sum(
        actual.get(g) == {tp: o - shift for tp, o in offs.items()} for g, offs in groups.items()
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="40,2000,10000", help="group counts, comma separated")
    parser.add_argument(
        "--jobs",
        default=",".join(JOBS),
        help=f"runs to time, comma separated, of {','.join(JOBS)} (execute needs nothing "
        "before it: audit and describe without it read a destination no run wrote)",
    )
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    jobs = args.jobs.split(",")
    if unknown := set(jobs) - set(JOBS):
        parser.error(f"unknown --jobs {sorted(unknown)}; choose from {','.join(JOBS)}")
    ok = True
    with local_brokers("many-src", "many-dst") as (src, dst):
        t0 = time.monotonic()
        work = Path(tempfile.mkdtemp(prefix="ferry-many-groups-"))
        topics = dict.fromkeys(TOPICS, PARTITIONS)
        create_topics(src.config, topics)
        create_topics(dst.config, topics)
        produce_world(src.config, dst.config)
        src_c, dst_c = Cluster("source", src.config), Cluster("destination", dst.config)
        worlds = {n: make_groups(n, f"mg{n}") for n in sizes}
        for groups in worlds.values():
            commit_all(src_c, groups)
        print(f"world built in {time.monotonic() - t0:.0f}s; runs' progress in {work}/*.stderr",
              file=sys.stderr)  # fmt: skip
        results: dict[int, dict[str, tuple[float, float]]] = {}
        for n in sizes:
            groups = worlds[n]
            config = work / f"{n}.yaml"
            config.write_text(
                f"source:\n  bootstrap.servers: {src.bootstrap}\n"
                f"destination:\n  bootstrap.servers: {dst.bootstrap}\n"
                f"cluster:\n  bootstrap.servers: {src.bootstrap}\n"  # groups describe
                f"groups:\n  include: ['mg{n}-.*']\n"
                f"ledger:\n  path: {work / f'ledger-{n}'}\n"
            )
            base = ["--config", str(config), "-o", "json"]
            positions = len({(t, p, o) for offs in groups.values() for (t, p), o in offs.items()})
            floor = best_floor(src_c, dst_c, f"mg{n}-", "describe")
            floor_listing = best_floor(src_c, dst_c, f"mg{n}-", "listing")
            floor_write = write_floor(dst_c, groups) if "execute" in jobs else 0.0
            results[n] = {
                "floor": (floor, 0.0),
                "floor listing": (floor_listing, 0.0),
                "floor write": (floor_write, 0.0),
            }
            runs = [
                ("dry run", ["migrate", *base], "READY"),
                ("execute", ["migrate", *base, "--execute"], "COMMITTED"),
                ("audit", ["audit", *base], None),
                ("describe", ["groups", "describe", *base, "--group", f"mg{n}-.*"], None),
            ]
            for name, argv, status in runs:
                if name.replace(" ", "-") not in jobs:
                    continue
                out = work / f"{n}-{name.replace(' ', '-')}.json"
                code, seconds, peak, tail = run_job(argv, out)
                results[n][name] = (seconds, peak)
                note = ""
                if code != 0:
                    ok, note = False, f"  EXIT {code}: {tail}"
                elif status:
                    exact = check_plan(out, groups, status)
                    ok &= exact == n
                    note = f"  exact {exact}/{n}"
                elif name == "audit":
                    rows = json.loads(out.read_text())["rows"]
                    exact = sum(r["verdict"] == "EXACT" for r in rows)
                    ok &= exact == n * 64
                    note = f"  EXACT rows {exact}/{n * 64}"
                print(f"{n:6d} groups {name:9s} {seconds:6.1f}s  peak {peak:6.0f} MiB{note}",
                      file=sys.stderr)  # fmt: skip
            exact_on_destination = committed_exact(dst_c, groups)
            ok &= exact_on_destination == n or "execute" not in jobs
            print(
                f"{n:6d} groups: {n * 64} group partitions, {positions} distinct positions, "
                f"floor {floor:.1f}s (states from the listing: {floor_listing:.1f}s; writing "
                f"and reading back every group: {floor_write:.1f}s), "
                f"destination offsets exact {exact_on_destination}/{n}",
                file=sys.stderr,
            )

        print("many groups (wall s / peak driver MiB), default settings:")
        names = [x for x in ("dry run", "execute", "audit", "describe") if x in results[sizes[0]]]
        print("  groups   floor  " + "  ".join(f"{x:>16s}" for x in names))
        for n in sizes:
            r = results[n]
            cells = "  ".join(f"{r[x][0]:7.1f}s {r[x][1]:6.0f}M" for x in names)
            print(f"  {n:6d} {r['floor'][0]:6.1f}s  {cells}")
        lo, hi = sizes[0], sizes[-1]
        if lo == hi:
            print(f"every offset exact: {'yes' if ok else 'NO'}")
            return 0 if ok else 1

        def margin(name: str) -> float:
            return results[hi][name][0] - results[lo][name][0]

        for x in [x for x in names if x != "describe"]:
            # --execute also writes and reads back every group: its floor includes that.
            floors = ["floor", "floor listing"]
            if x == "execute":
                floors = [f"{f} + floor write" for f in floors]
            ratios = []
            for f in floors:
                m = sum(margin(part) for part in f.split(" + "))
                ratios.append(f"{margin(x) / max(m, 1e-9):.1f}x the {f}'s {m:.1f}s")
            print(
                f"  {x}: marginal cost {lo} -> {hi} groups {margin(x):.1f}s = "
                f"{'; '.join(ratios)} (target <= 3x); {hi} groups in {results[hi][x][0]:.1f}s "
                "(target <= 60 s)"
            )
        print(f"every offset exact: {'yes' if ok else 'NO'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
