"""Regenerate `tests/unit/checkpoint_samples/`: real Structured Streaming checkpoints as the
installed PySpark writes them through Spark's own Kafka connector, one per mode a
`migrate --checkpoint` meets, for the unit tests that read and rewrite offset logs.

    python -m ferry.testing.checkpoint_samples [OUT]   # default tests/unit/checkpoint_samples

A local Kafka cluster (`ferry.testing.brokers`) gets topics `t0`, `t1` (2 partitions, 30
records each) and `other` (1 partition); every query reads with `maxOffsetsPerTrigger`=20, so
each takes a few batches. Modes (folder names):

- `subscribe` / `subscribe_uncommitted`: the default (DSv2) reader, `subscribe=t0`; the second
  fails in batch 2, after Spark wrote `offsets/2` (the newest batch uncommitted);
- `dsv1` / `dsv1_uncommitted`: the same through the DSv1 `KafkaSource`
  (`spark.sql.streaming.disabledV2MicroBatchReaders`);
- `union` / `union_uncommitted`: two Kafka sources (`t0`, and `t1` with `other`) unioned;
- `assign`, `pattern`: `assign={"t0":[1],"t1":[0,1]}`, `subscribePattern=t.*`;
- `v2_named` / `v2_named_uncommitted`: offset log format 2
  (`spark.sql.streaming.offsetLog.formatVersion`=2) and named sources (`.name("...")`);
- `v2_unnamed`: offset log format 2, the union's two sources unnamed;
- `async`: `asyncProgressTrackingEnabled` with a 3 s checkpoint interval, a 0.2 s
  processing-time trigger, 4 records a batch, into a Kafka sink (async progress tracking
  refuses `foreachBatch`), stopped with `StreamingQuery.stop()` once batch 9 is committed;
- `continuous`: a continuous trigger (5 s epochs) into a Kafka sink, stopped after 40 s.

Only the text Spark reads on restart is copied (`offsets/`, `commits/`, `metadata`,
`sources/`), without Hadoop's `.N.crc` files; run ids and timestamps differ on every run.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

from ferry.testing.streaming import Query, Source, run_queries

TOPICS = {"t0": 2, "t1": 2, "other": 1}
MAX_PER_TRIGGER = 20
V2 = {  # a named source needs source evolution on
    "spark.sql.streaming.offsetLog.formatVersion": "2",
    "spark.sql.streaming.queryEvolution.enableSourceEvolution": "true",
}
ASYNC = {
    "asyncProgressTrackingEnabled": "true",
    "asyncProgressTrackingCheckpointIntervalMs": "3000",
}


def _produce(broker) -> None:  # noqa: ANN001 - a LocalBroker
    from ferry.testing.produce import Record, create_topics, produce

    create_topics(broker.config, TOPICS)
    for topic, parts in TOPICS.items():
        for p in range(parts):
            rows = [Record(f"k{i % 3}".encode(), f"{topic}-{p}-{i}".encode()) for i in range(30)]
            produce(broker.config, topic, p, rows)


def queries(bootstrap: str, work: Path) -> list[Query]:
    """One query per mode, each with its own checkpoint and sink under `work`."""

    def query(mode: str, **kwargs: object) -> Query:
        kwargs.setdefault("max_offsets_per_trigger", MAX_PER_TRIGGER)
        return Query(
            name=mode,
            bootstrap=bootstrap,
            topic=str(kwargs.pop("topic", "")),
            checkpoint=str(work / mode / "checkpoint"),
            sink=str(work / mode / "sink"),
            **kwargs,  # type: ignore[arg-type]
        )

    union = [Source(subscribe="t0"), Source(subscribe="t1,other")]
    named = [Source(subscribe="t0", name="first"), Source(subscribe="t1", name="second")]
    return [
        query("subscribe", topic="t0"),
        query("subscribe_uncommitted", topic="t0", fail_at_batch=2),
        query("dsv1", topic="t0", reader="v1"),
        query("dsv1_uncommitted", topic="t0", reader="v1", fail_at_batch=2),
        query("union", sources=union),
        query("union_uncommitted", sources=union, fail_at_batch=2),
        query("assign", sources=[Source(assign={"t0": [1], "t1": [0, 1]})]),
        query("pattern", sources=[Source(subscribe_pattern="t.*")]),
        query("v2_named", sources=named, conf=V2),
        query("v2_named_uncommitted", sources=named, conf=V2, fail_at_batch=2),
        query(
            "v2_unnamed", sources=union, conf={"spark.sql.streaming.offsetLog.formatVersion": "2"}
        ),
        query(
            "async",
            topic="t0",
            writer_options=ASYNC,
            trigger="0.2",
            stop_after_batch=9,
            sink_topic="async-sink",
            max_offsets_per_trigger=4,
        ),
        query(
            "continuous",
            topic="t0",
            trigger="continuous:5",
            sink_topic="continuous-sink",
            stop_after_s=40,
        ),
    ]


def copy_sample(checkpoint: Path, dest: Path) -> None:
    """What Spark reads on restart, without `.crc` files: offsets/, commits/, metadata,
    sources/."""
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    for name in ("offsets", "commits", "sources"):
        if (checkpoint / name).is_dir():
            for path in sorted((checkpoint / name).rglob("*")):
                if path.is_file() and not path.name.startswith("."):
                    target = dest / path.relative_to(checkpoint)
                    target.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(path, target)
    if (checkpoint / "metadata").exists():
        shutil.copyfile(checkpoint / "metadata", dest / "metadata")


def generate(out: Path) -> dict[str, str | None]:
    """Run every mode's query against a fresh local cluster; copy each checkpoint to
    `out/MODE/`. Returns each query's outcome (None, or its error)."""
    from ferry.testing.brokers import local_brokers

    work = Path(tempfile.mkdtemp(prefix="ferry-checkpoint-samples-"))
    with local_brokers("single") as (broker,):
        _produce(broker)
        outcome = run_queries(work / "runs", queries(broker.bootstrap, work))
    for q in queries("", work):
        if Path(q.checkpoint).is_dir():
            copy_sample(Path(q.checkpoint), out / q.name)
    return outcome


def main(argv: list[str]) -> int:
    out = Path(argv[0]) if argv else Path("tests/unit/checkpoint_samples")
    outcome = generate(out)
    for name, error in outcome.items():
        print(f"{name}: {(error or 'ok')[:300]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
