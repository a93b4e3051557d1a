"""Real Structured Streaming queries on Kafka topics, read with Spark's own Kafka connector
(`spark-sql-kafka-0-10` at the installed PySpark's version, fetched once by Spark's Ivy into
~/.ivy2.5.2), as the users whose checkpoints `migrate --checkpoint` translates run them.

Each run is its own Spark application in a child process (`run_queries`): the connector's jars
must be on the JVM's classpath when it starts, and a query restarted against another cluster
is a new application anyway. A run starts every query it is given at once and waits for each:

- `stateless`: the records' key, value, topic, partition and offset, written per batch;
- `count`: a stateful aggregation, records counted per key (complete mode): the newest batch's
  output is the totals.

Every query writes through `foreachBatch` into `SINK/batch_id=N/` (overwritten when batch N
runs again), which is exactly once as long as batch ids are kept: Spark's own contract for a
sink that is idempotent per batch. `fail_at_batch` makes batch N fail after Spark wrote
`offsets/N` (the query stops with its newest batch uncommitted). `trigger`: `available_now`
reads what is there and stops; a number of seconds runs a micro-batch that often until the
child process is ended (a query still running), or until a stop condition of the query's
(`stop_after_batch`, `stop_after_s`, `stop_when_caught_up`: `StreamingQuery.stop()`).

The modes a cutover meets, per query: several Kafka sources unioned, or one read by `assign`
or `subscribePattern` (`sources`, each optionally named for a `v2` offset log); Spark's DSv1
`KafkaSource` (`reader="v1"`); session settings of the query's own (`conf`: the offset log's
format); writer options (`writer_options`: async progress tracking, which needs a Kafka sink,
`sink_topic`, read back with `topic_sink_values`); a continuous trigger
(`trigger="continuous:SECONDS"`, Kafka sink too); real-time mode (`trigger="realtime:SECONDS"`,
the batches' length: output mode update, a Kafka sink, as Spark 4.2 refuses `foreachBatch`
there); a slow `foreachBatch` (`sleep_s`, `sleep_from_batch`), or a batch held up at a chosen
record (`sleep_on`). Each query runs in a
session of its own (`SparkSession.newSession`) when it has settings, so that queries of one
application do not share them.
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
class Source:
    """One Kafka source of a query: exactly one of `subscribe`, `subscribe_pattern` (a Java
    regex) or `assign` (topic → partitions); `name` names it (`DataStreamReader.name`, the key
    of its line in a `v2` offset log); `bootstrap` defaults to the query's."""

    subscribe: str | None = None
    subscribe_pattern: str | None = None
    assign: dict[str, list[int]] | None = None
    name: str | None = None
    bootstrap: str | None = None
    options: dict[str, str] = field(default_factory=dict)

    def strategy(self) -> tuple[str, str]:
        """The reader option that says what the source reads, and its value."""
        if self.assign is not None:
            return "assign", json.dumps({t: list(ps) for t, ps in self.assign.items()})
        if self.subscribe_pattern is not None:
            return "subscribePattern", self.subscribe_pattern
        assert self.subscribe is not None, "a source subscribes, assigns, or has a pattern"
        return "subscribe", self.subscribe


@dataclass
class Query:
    name: str
    bootstrap: str
    topic: str  # the one topic a single-source query subscribes to ("" when `sources` is set)
    checkpoint: str
    sink: str
    kind: str = "stateless"  # or "count"
    max_offsets_per_trigger: int | None = None
    fail_at_batch: int | None = None
    options: dict[str, str] = field(default_factory=dict)  # failOnDataLoss and the like
    # Several sources (their rows unioned), or one read another way than `subscribe`.
    sources: list[Source] = field(default_factory=list)
    # "v1": Spark's DSv1 `KafkaSource` (`disabledV2MicroBatchReaders`), "v2" its default.
    reader: str = "v2"
    # Spark session settings of this query alone (`offsetLog.formatVersion` and the like).
    conf: dict[str, str] = field(default_factory=dict)
    # Writer options (`asyncProgressTrackingEnabled` and the like).
    writer_options: dict[str, str] = field(default_factory=dict)
    # Batches from `sleep_from_batch` on sleep this long in `foreachBatch` before writing.
    sleep_s: float = 0
    sleep_from_batch: int = 0
    # A record whose value is a key here makes its batch sleep this long (seconds), whatever
    # the sink: a batch of a Kafka-sink query held up at a chosen record.
    sleep_on: dict[str, float] = field(default_factory=dict)
    # This query's trigger when not the run's: "available_now", "once", seconds ("2"),
    # "continuous:SECONDS" or "realtime:SECONDS" (then the sink is the Kafka topic `sink_topic`).
    trigger: str | None = None
    # Stop the query (`StreamingQuery.stop()`) once it finished this batch (or epoch).
    stop_after_batch: int | None = None
    # Stop the query (`StreamingQuery.stop()`) this many seconds after it started.
    stop_after_s: float | None = None
    # Stop the query once a batch read up to every source's latest offsets (a processing-time
    # query that is to read what is there: async progress tracking refuses availableNow).
    stop_when_caught_up: bool = False
    # Write the rows to this Kafka topic (on `sink_bootstrap`, default the query's) instead
    # of `foreachBatch` (continuous queries support no `foreachBatch`): key, and
    # value `"VALUE"`; `topic_sink_values` reads it back.
    sink_topic: str | None = None
    sink_bootstrap: str | None = None

    def source_list(self) -> list[Source]:
        if self.sources:
            return [s if isinstance(s, Source) else Source(**s) for s in self.sources]
        return [Source(subscribe=self.topic)]


def _session(spark, q: Query):  # noqa: ANN001, ANN202 - a SparkSession
    """The query's own session (the application's SparkContext, its own SQL settings)."""
    settings = dict(q.conf)
    if q.reader == "v1":
        settings["spark.sql.streaming.disabledV2MicroBatchReaders"] = (
            "org.apache.spark.sql.kafka010.KafkaSourceProvider"
        )
    if not settings:
        return spark
    session = spark.newSession()
    for key, value in settings.items():
        session.conf.set(key, value)
    return session


def _read(session, q: Query, source: Source):  # noqa: ANN001, ANN202 - a DataFrame
    option, value = source.strategy()
    reader = (
        session.readStream.format("kafka")
        .option("kafka.bootstrap.servers", source.bootstrap or q.bootstrap)
        .option(option, value)
        .option("startingOffsets", "earliest")
    )
    if source.name:
        reader = reader.name(source.name)
    if q.max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(q.max_offsets_per_trigger))
    for key, val in {**q.options, **source.options}.items():
        reader = reader.option(key, val)
    return reader.load()


def _run_one(spark, q: Query, trigger: str):  # noqa: ANN001, ANN202 - a StreamingQuery
    import time

    from pyspark.sql import functions as F

    session = _session(spark, q)
    frames = [_read(session, q, source) for source in q.source_list()]
    df = frames[0]
    for other in frames[1:]:
        df = df.unionByName(other)
    if q.kind == "count":
        out = df.groupBy(F.col("key").cast("string").alias("key")).count()
        mode = "complete"
    else:
        value = F.col("value").cast("string")
        if q.sleep_on:
            sleeps = dict(q.sleep_on)

            def held(v: str | None) -> str | None:
                time.sleep(sleeps.get(v or "", 0))
                return v

            value = F.udf(held, "string")(value)
        out = df.select(
            F.col("key").cast("string").alias("key"),
            value.alias("value"),
            "topic",
            "partition",
            "offset",
        )
        mode = "append"

    def write(batch_df, batch_id: int) -> None:  # noqa: ANN001
        if q.fail_at_batch is not None and batch_id == q.fail_at_batch:
            raise RuntimeError(f"{q.name}: batch {batch_id} fails on purpose")
        if q.sleep_s and batch_id >= q.sleep_from_batch:
            time.sleep(q.sleep_s)
        batch_df.write.mode("overwrite").parquet(f"{q.sink}/batch_id={batch_id}")

    trigger = q.trigger or trigger
    if trigger.startswith("realtime:"):
        mode = "update"  # real-time mode refuses append (STREAMING_REAL_TIME_MODE)
    if q.sink_topic:
        writer = (
            out.select("key", "value").writeStream.format("kafka")
            .option("kafka.bootstrap.servers", q.sink_bootstrap or q.bootstrap)
            .option("topic", q.sink_topic)
        )  # fmt: skip
    else:
        writer = out.writeStream.foreachBatch(write)
    writer = writer.outputMode(mode).option("checkpointLocation", q.checkpoint).queryName(q.name)
    for key, value in q.writer_options.items():
        writer = writer.option(key, value)
    if trigger == "available_now":
        writer = writer.trigger(availableNow=True)
    elif trigger == "once":
        writer = writer.trigger(once=True)
    elif trigger.startswith("continuous:"):
        writer = writer.trigger(continuous=f"{float(trigger.split(':')[1]):g} seconds")
    elif trigger.startswith("realtime:"):
        writer = writer.trigger(realTime=f"{float(trigger.split(':')[1]):g} seconds")
    else:
        writer = writer.trigger(processingTime=f"{float(trigger):g} seconds")
    return writer.start()


def _done(q: Query, running) -> int:  # noqa: ANN001 - a StreamingQuery
    """The newest batch (or epoch) the query finished: its last progress report's, or the
    newest in `commits/` (async progress tracking writes only some of them there)."""
    commits = Path(q.checkpoint) / "commits"
    names = os.listdir(commits) if commits.is_dir() else []
    progress = running.lastProgress or {}
    reported = progress.get("batchId", -1) if progress.get("numInputRows") is not None else -1
    return max([reported] + [int(n) for n in names if n.isdigit()])


def _caught_up(running) -> bool:  # noqa: ANN001 - a StreamingQuery
    """The last batch ended at every source's latest offsets."""
    sources = (running.lastProgress or {}).get("sources") or []
    return bool(sources) and all(
        s.get("latestOffset") is not None and s.get("endOffset") == s.get("latestOffset")
        for s in sources
    )


def _wait(queries: Sequence[tuple[Query, object]]) -> dict[str, str | None]:
    """Until every query ends: query name → None, or its error on one line. A query with
    `stop_after_batch` is stopped (`StreamingQuery.stop()`) once it finished that batch, one
    with `stop_after_s` that long after the queries started."""
    import time

    outcome: dict[str, str | None] = {}
    started = time.monotonic()
    while len(outcome) < len(queries):
        for q, running in queries:
            if q.name in outcome:
                continue
            try:
                if running.awaitTermination(0.2):  # type: ignore[attr-defined]
                    outcome[q.name] = None
                elif q.stop_after_batch is not None and _done(q, running) >= q.stop_after_batch:
                    running.stop()  # type: ignore[attr-defined]
                elif q.stop_after_s is not None and time.monotonic() - started > q.stop_after_s:
                    running.stop()  # type: ignore[attr-defined]
                elif q.stop_when_caught_up and _caught_up(running):
                    running.stop()  # type: ignore[attr-defined]
            except Exception as exc:  # noqa: BLE001 - the query's failure is the outcome
                outcome[q.name] = " ".join(str(exc).split())[:4000] or "failed"
    return outcome


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
    started, outcome = [], {}
    for q in [Query(**q) for q in spec["queries"]]:
        try:
            started.append((q, _run_one(spark, q, spec["trigger"])))
        except Exception as exc:  # noqa: BLE001 - a query Spark refuses to start: its outcome
            outcome[q.name] = " ".join(str(exc).split())[:4000] or "failed"
    outcome.update(_wait(started))
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


def topic_sink_values(
    config: Mapping[str, str], topic: str, start: Mapping[int, int] | None = None
) -> Counter:
    """How many times each (key, value) is in a Kafka sink topic (`sink_topic`), from the
    offsets `start` (partition → offset; default the beginning)."""
    from ferry.testing.replicate import read_all

    start = start or {}
    return Counter(
        ((r.key or b"").decode(), (r.value or b"").decode())
        for r in read_all(config, topic)
        if r.offset >= start.get(r.partition, 0)
    )


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
