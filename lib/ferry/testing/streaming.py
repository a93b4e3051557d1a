"""Real Structured Streaming queries on a Kafka topic, read with Spark's own Kafka connector
(`spark-sql-kafka-0-10` at the installed PySpark's version, fetched once by Spark's Ivy into
~/.ivy2.5.2), as the users whose checkpoints `migrate --checkpoint` translates run them.

Each run is its own Spark application in a child process (`run_queries`): the connector's jars
must be on the JVM's classpath when it starts, and a query restarted against another cluster
is a new application anyway. A run starts every query it is given at once and waits for each:

- `stateless`: the records' key, value, partition and offset, written per batch;
- `count`: a stateful aggregation, records counted per key (complete mode): the newest batch's
  output is the totals.

Every query writes through `foreachBatch` into `SINK/batch_id=N/` (overwritten when batch N
runs again), which is exactly once as long as batch ids are kept: Spark's own contract for a
sink that is idempotent per batch. `fail_at_batch` makes batch N fail after Spark wrote
`offsets/N` (the query stops with its newest batch uncommitted). `trigger`: `available_now`
reads what is there and stops; a number of seconds runs a micro-batch that often until the
child process is ended (a query still running).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path


def connector_package() -> str:
    import pyspark

    return f"org.apache.spark:spark-sql-kafka-0-10_2.13:{pyspark.__version__}"


@dataclass
class Query:
    name: str
    bootstrap: str
    topic: str
    checkpoint: str
    sink: str
    kind: str = "stateless"  # or "count"
    max_offsets_per_trigger: int | None = None
    fail_at_batch: int | None = None
    options: dict[str, str] = field(default_factory=dict)  # failOnDataLoss and the like


def _run_one(spark, q: Query, trigger: str):  # noqa: ANN001, ANN202 - a StreamingQuery
    from pyspark.sql import functions as F

    reader = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", q.bootstrap)
        .option("subscribe", q.topic)
        .option("startingOffsets", "earliest")
    )
    if q.max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(q.max_offsets_per_trigger))
    for key, value in q.options.items():
        reader = reader.option(key, value)
    df = reader.load()
    if q.kind == "count":
        out = df.groupBy(F.col("key").cast("string").alias("key")).count()
        mode = "complete"
    else:
        out = df.select(
            F.col("key").cast("string").alias("key"),
            F.col("value").cast("string").alias("value"),
            "partition",
            "offset",
        )
        mode = "append"

    def write(batch_df, batch_id: int) -> None:  # noqa: ANN001
        if q.fail_at_batch is not None and batch_id == q.fail_at_batch:
            raise RuntimeError(f"{q.name}: batch {batch_id} fails on purpose")
        batch_df.write.mode("overwrite").parquet(f"{q.sink}/batch_id={batch_id}")

    writer = out.writeStream.outputMode(mode).option("checkpointLocation", q.checkpoint)
    writer = writer.foreachBatch(write).queryName(q.name)
    if trigger == "available_now":
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=f"{float(trigger):g} seconds")
    return writer.start()


def _child(spec_path: str) -> int:
    """In the child process: start every query, wait for each; print one JSON line of
    outcomes (query name → null or its error, on one line)."""
    from pyspark.sql import SparkSession

    spec = json.loads(Path(spec_path).read_text())
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("ferry-streaming-test")
        .config("spark.jars.packages", connector_package())
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("WARN")
    queries = [(Query(**q), _run_one(spark, Query(**q), spec["trigger"])) for q in spec["queries"]]
    outcome: dict[str, str | None] = {}
    for q, running in queries:
        try:
            running.awaitTermination()
            outcome[q.name] = None
        except Exception as exc:  # noqa: BLE001 - the query's failure is the outcome
            outcome[q.name] = " ".join(str(exc).split())[:4000] or "failed"
    print("FERRY-STREAMING " + json.dumps(outcome), flush=True)
    spark.stop()
    return 0


def _command(spec: Path) -> list[str]:
    return [sys.executable, "-m", "ferry.testing.streaming", str(spec)]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    env.pop("PYSPARK_SUBMIT_ARGS", None)
    return env


def _write_spec(folder: Path, queries: Sequence[Query], trigger: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    spec = folder / f"queries-{os.getpid()}-{len(list(folder.iterdir()))}.json"
    spec.write_text(json.dumps({"trigger": trigger, "queries": [asdict(q) for q in queries]}))
    return spec


def run_queries(
    folder: Path, queries: Sequence[Query], timeout_s: float = 600
) -> dict[str, str | None]:
    """Run `queries` with `availableNow` in one Spark application (a child process) until
    each has read what is there (or failed): query name → None, or its error on one line."""
    spec = _write_spec(folder, queries, "available_now")
    log = folder / f"{spec.stem}.log"
    with log.open("wb") as out:
        done = subprocess.run(
            _command(spec), stdout=subprocess.PIPE, stderr=out, env=_env(), timeout=timeout_s,
            check=False,
        )  # fmt: skip
    for line in done.stdout.decode(errors="replace").splitlines():
        if line.startswith("FERRY-STREAMING "):
            return json.loads(line.removeprefix("FERRY-STREAMING "))
    tail = log.read_text(errors="replace").splitlines()[-15:]
    raise RuntimeError(f"streaming run failed ({done.returncode}): " + "\n".join(tail))


def start_running(folder: Path, queries: Sequence[Query], every_s: float = 1.0) -> subprocess.Popen:
    """Start `queries` with a processing-time trigger in a child process that runs until it is
    ended (`stop_running`)."""
    spec = _write_spec(folder, queries, str(every_s))
    log = folder / f"{spec.stem}.log"
    return subprocess.Popen(
        _command(spec), stdout=subprocess.DEVNULL, stderr=log.open("wb"), env=_env(),
        start_new_session=True,
    )  # fmt: skip


def stop_running(process: subprocess.Popen) -> None:
    import signal

    if process.poll() is None:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=30)


def _sink_rows(sink: str) -> list[dict]:
    """Every batch's rows of a sink (`batch_id` from the directory names), read with pyarrow:
    no Spark session needed to check one."""
    import pyarrow.dataset as ds

    return ds.dataset(sink, format="parquet", partitioning="hive").to_table().to_pylist()


def sink_values(sink: str) -> Counter:
    """How many times each (key, value) is in a stateless query's sink (every batch)."""
    return Counter((r["key"], r["value"]) for r in _sink_rows(sink))


def sink_totals(sink: str) -> dict[str, int]:
    """A counting query's totals: its newest batch's output (complete mode)."""
    rows = _sink_rows(sink)
    newest = max(r["batch_id"] for r in rows)
    return {r["key"]: r["count"] for r in rows if r["batch_id"] == newest}


def renamed_by_hand(checkpoint: Path, rename: Mapping[str, str]) -> None:
    """What a careful engineer would try without Ferry: the topic renamed in every
    `offsets/N`, offsets as they are (the files' checksums removed, as they no longer match)."""
    for path in (checkpoint / "offsets").iterdir():
        if not path.name.isdigit():
            continue
        text = path.read_text()
        for old, new in rename.items():
            text = text.replace(f'"{old}":', f'"{new}":')
        path.write_text(text)
        crc = path.with_name(f".{path.name}.crc")
        if crc.exists():
            crc.unlink()


if __name__ == "__main__":
    sys.exit(_child(sys.argv[1]))
