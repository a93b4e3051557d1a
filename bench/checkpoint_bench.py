"""Translating a checkpoint against a `migrate` dry run of one group on the same partitions,
same run.

World: one topic of PARTITIONS (256) partitions on a local source cluster, copied to a local
destination from a later offset (offsets differ), with short runs of identical records in one
millisecond (`migrate_bench.produce_world`). One stopped group has committed offsets on every
partition; a Structured Streaming checkpoint holds the very same positions in its newest,
committed batch (`offsets/N-1`, `offsets/N` and `commits/N` as Spark 4.2 writes them: the
translation reads both offsets files, as Spark does on restart). Then, alternating, ROUNDS
times each, through the real job in-process on a warm session:

1. `migrate` dry run of that group (the baseline);
2. `migrate --checkpoint` dry run of the checkpoint.

Prints the faster time of each and the ratio (target <= 1.2x). Both answers are compared
position by position, so a fast wrong answer cannot pass.
"""

from __future__ import annotations

import argparse
import contextlib
import io
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

from migrate_bench import REPLICATED_FROM, load_migrate_job, produce_world  # noqa: E402

from ferry.cli import run  # noqa: E402
from ferry.testing.brokers import local_brokers  # noqa: E402
from ferry.testing.produce import commit_offsets, create_topics  # noqa: E402

METADATA = (
    '{"batchWatermarkMs":0,"batchTimestampMs":1764130000000,"conf":'
    '{"spark.sql.shuffle.partitions":"200"}}'
)


def write_checkpoint(root: Path, topic: str, offsets: dict[int, int], batch: int = 41) -> None:
    """A checkpoint whose newest batch is committed, as Spark writes it (a file source and a
    source with no offset beside the Kafka one, so the rewrite has lines to keep)."""
    line = json.dumps(
        {topic: {str(p): o for p, o in sorted(offsets.items())}}, separators=(",", ":")
    )
    (root / "offsets").mkdir(parents=True)
    (root / "commits").mkdir(parents=True)
    for b in (batch - 1, batch):
        (root / "offsets" / str(b)).write_text(f'v1\n{METADATA}\n{line}\n-\n{{"logOffset":3}}')
        (root / "commits" / str(b)).write_text('v1\n{"nextBatchWatermarkMs":0}')
    old = time.time() - 3600
    for path in [*(root / "offsets").iterdir(), *(root / "commits").iterdir()]:
        os.utime(path, (old, old))  # a stopped query: its newest batch is older than --idle


def timed_job(job, argv: list[str]) -> tuple[float, int, str]:  # noqa: ANN001
    out = io.StringIO()
    t0 = time.monotonic()
    with contextlib.redirect_stdout(out):
        code = run(job.main, argv)
    return time.monotonic() - t0, code, out.getvalue()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", type=int, default=256)
    parser.add_argument("--records", type=int, default=300, help="records per partition")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    with local_brokers("bench-src", "bench-dst") as (src, dst):
        topic = "streamed"
        create_topics(src.config, {topic: args.partitions})
        create_topics(dst.config, {topic: args.partitions})
        produce_world(src.config, dst.config, [topic], args.partitions, args.records)
        rng = random.Random(7)
        offsets = {
            p: rng.randrange(REPLICATED_FROM + 5, args.records + 1) for p in range(args.partitions)
        }
        commit_offsets(src.config, "bench-query", {(topic, p): o for p, o in offsets.items()})
        work = Path(tempfile.mkdtemp(prefix="ferry-checkpoint-bench-"))
        checkpoint = work / "checkpoint"
        write_checkpoint(checkpoint, topic, offsets)
        config = work / "migrate.yaml"
        config.write_text(
            f"source:\n  bootstrap.servers: {src.bootstrap}\n"
            f"destination:\n  bootstrap.servers: {dst.bootstrap}\n"
            f"groups:\n  include: ['bench-query']\n"
            f"ledger:\n  path: {work / 'ledger'}\n"
        )
        job = load_migrate_job()
        # Progress on (stderr): each run's stages with their times, to see where they differ.
        base = ["--config", str(config), "-o", "json"]
        group_run = base
        checkpoint_run = [*base, "--checkpoint", str(checkpoint)]
        timed_job(job, group_run)  # warm-up: JVM, workers, caches
        times: dict[str, list[float]] = {"group": [], "checkpoint": []}
        answers: dict[str, dict] = {}
        for _ in range(args.rounds):
            for name, argv in (("group", group_run), ("checkpoint", checkpoint_run)):
                elapsed, code, stdout = timed_job(job, argv)
                if code != 0:
                    raise SystemExit(f"{name} run exited {code}")
                times[name].append(elapsed)
                answers[name] = {
                    (r["src_topic"], r["src_partition"]): r["destination_offset"]
                    for r in json.loads(stdout)
                }
        exact = sum(
            1 for (_t, p), o in answers["group"].items() if o == offsets[p] - REPLICATED_FROM
        )
        same = answers["group"] == answers["checkpoint"]
        group_s, checkpoint_s = min(times["group"]), min(times["checkpoint"])
        print(f"migrate dry run, one group  : {group_s:6.1f}s ({args.partitions} partitions, "
              f"{exact} exact)")  # fmt: skip
        print(f"migrate --checkpoint dry run: {checkpoint_s:6.1f}s (same answers: {same})")
        print(f"checkpoint / group          : {checkpoint_s / group_s:5.2f}x (target <= 1.2x)")
        return 0 if same and exact == args.partitions else 1


if __name__ == "__main__":
    sys.exit(main())
