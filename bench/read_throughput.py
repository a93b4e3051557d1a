"""Read throughput: Ferry's Kafka data source against Spark's Kafka connector and a plain
confluent-kafka consumer, on the same offset ranges, in one run.

Produces RECORDS records (a key, a 100-byte value) into each of PARTITIONS partitions of a
local Kafka cluster, then reads the same offset ranges — every partition from `--start` to
`--records - --start` — ROUNDS times, alternating the order of:

(a) `ferry.kafka.read` through Spark with `reader.driver_max_offsets` 0, so the Python data
    source runs (Arrow batches, tasks of `--max-records` offsets);
(b) Spark's own Kafka connector (`spark-sql-kafka-0-10` at the installed PySpark's version,
    fetched by `spark.jars.packages` into the same session before its JVM starts), given the
    ranges as `startingOffsets`/`endingOffsets` JSON per partition;
(c) one confluent-kafka consumer assigned to every range, touching every field (the floor:
    no Spark at all).

Both Spark reads run the same aggregate (record count and total value length) over all the
standard columns, headers included. Prints each reader's best round in records/s (load from
elsewhere only adds time; the median beside it) and the ratios (target: data source >= 0.6x
the consumer); `--driver` adds the same read forced onto the driver (the path small reads
take). `--no-connector` skips (b), where Maven Central (or
$FERRY_MAVEN_MIRROR's equivalent for Spark, `spark.jars.repositories`) is out of reach.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import time
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
os.environ.setdefault("FERRY_MASTER", "local[2]")

from world import BulkProducer  # noqa: E402

from ferry import kafka  # noqa: E402
from ferry.testing.brokers import local_brokers  # noqa: E402
from ferry.testing.produce import create_topics  # noqa: E402


def connector_package() -> str:
    """Spark's Kafka connector at the installed PySpark's version (Scala 2.13, Spark 4)."""
    import pyspark

    return f"org.apache.spark:spark-sql-kafka-0-10_2.13:{pyspark.__version__}"


def produce_bulk(config: dict, topic: str, partitions: int, per_partition: int) -> None:
    producer = BulkProducer(config)
    value = b"v" * 100
    for p in range(partitions):
        for i in range(per_partition):
            producer.produce(topic, b"key-%d" % i, value, p)
    producer.flush()


def consumer_read(config: dict, ranges: list[kafka.OffsetRange]) -> int:
    """Every record of `ranges` with one consumer; the records read."""
    consumer = Consumer(
        {**config, "group.id": "bench", "enable.auto.commit": False, "fetch.wait.max.ms": 50}
    )
    consumer.assign([TopicPartition(r.topic, r.partition, r.start) for r in ranges])
    last = {r.partition: r.end - 1 for r in ranges}
    n = 0
    while last:
        for msg in consumer.consume(num_messages=10000, timeout=1):
            if msg.error() is not None:
                continue
            p, offset = msg.partition(), msg.offset()
            if p not in last or offset > last[p]:
                continue
            n += 1
            # touch what the Spark reads materialize, so every side does the same work
            msg.key(), msg.value(), msg.timestamp(), msg.headers()
            if offset == last[p]:
                del last[p]
                consumer.incremental_unassign([TopicPartition(msg.topic(), p)])
    consumer.close()
    return n


def aggregate(df) -> tuple[int, int]:  # noqa: ANN001 - a DataFrame
    from pyspark.sql import functions as F

    row = df.agg(F.count("*").alias("n"), F.sum(F.length("value")).alias("bytes")).collect()[0]
    return row.n, row.bytes


def connector_df(spark, bootstrap: str, ranges: list[kafka.OffsetRange]):  # noqa: ANN001, ANN201
    """Spark's Kafka connector over exactly `ranges` (end exclusive, as Ferry's)."""
    topic = ranges[0].topic
    starting = {topic: {str(r.partition): r.start for r in ranges}}
    ending = {topic: {str(r.partition): r.end for r in ranges}}
    return (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("assign", json.dumps({topic: [r.partition for r in ranges]}))
        .option("startingOffsets", json.dumps(starting))
        .option("endingOffsets", json.dumps(ending))
        .option("includeHeaders", "true")
        .load()
    )


def timed(fn) -> tuple[float, object]:  # noqa: ANN001
    t0 = time.monotonic()
    result = fn()
    return time.monotonic() - t0, result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=250_000, help="records per partition")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--start", type=int, default=5_000, help="first offset read")
    parser.add_argument("--max-records", type=int, default=100_000, help="offsets per task")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--driver", action="store_true", help="also read on the driver")
    parser.add_argument("--no-connector", action="store_true")
    args = parser.parse_args()
    if not args.no_connector:
        # Resolved by spark-submit when the session's JVM starts (Ivy, ~/.ivy2.5.2).
        os.environ["PYSPARK_SUBMIT_ARGS"] = f"--packages {connector_package()} pyspark-shell"
    from ferry.session import build_session

    with local_brokers("bench") as (broker,):
        topic = "throughput"
        create_topics(broker.config, {topic: args.partitions})
        t, _ = timed(lambda: produce_bulk(broker.config, topic, args.partitions, args.records))
        print(f"produced {args.records * args.partitions:,} records in {t:.1f}s", file=sys.stderr)
        ranges = [
            kafka.OffsetRange(topic, p, args.start, args.records - args.start)
            for p in range(args.partitions)
        ]
        total = sum(r.end - r.start for r in ranges)
        t, spark = timed(lambda: build_session("ferry-bench"))
        print(f"session (with the connector's jars: {not args.no_connector}): {t:.1f}s",
              file=sys.stderr)  # fmt: skip
        cluster = kafka.Cluster(
            "bench", broker.config, max_records_per_task=args.max_records, driver_max_offsets=0
        )
        on_driver = dataclasses.replace(cluster, driver_max_offsets=total)
        readers = {
            "ferry data source": lambda: aggregate(kafka.read(spark, cluster, ranges))[0],
            "consumer (floor)": lambda: consumer_read(broker.config, ranges),
        }
        if not args.no_connector:
            readers["spark connector"] = lambda: aggregate(
                connector_df(spark, broker.bootstrap, ranges)
            )[0]
        if args.driver:
            readers["ferry on driver"] = lambda: aggregate(kafka.read(spark, on_driver, ranges))[0]

        # Warm-up: JVM, Python workers, both sources' planning and classes.
        small = [kafka.OffsetRange(topic, 0, 0, 1000)]
        aggregate(kafka.read(spark, cluster, small))
        if not args.no_connector:
            aggregate(connector_df(spark, broker.bootstrap, small))

        seconds: dict[str, list[float]] = {name: [] for name in readers}
        names = list(readers)
        for r in range(args.rounds):
            order = names[r % len(names) :] + names[: r % len(names)]
            for name in order:
                t, n = timed(readers[name])
                if n != total:
                    raise SystemExit(f"{name} read {n} records, not {total}")
                seconds[name].append(t)
                print(f"round {r + 1} {name:<18}: {t:6.2f}s  load {os.getloadavg()[0]:.1f}",
                      file=sys.stderr)  # fmt: skip
        # Load from elsewhere only ever adds time: the best round is the estimate, the median
        # is printed beside it.
        rate = {name: total / min(s) for name, s in seconds.items()}
        print(
            f"{total:,} offsets ({args.partitions} partitions x {total // args.partitions:,}), "
            f"best and median of {args.rounds} rounds:"
        )
        for name in names:
            print(f"  {name:<18}: {min(seconds[name]):6.2f}s = {rate[name]:10,.0f} records/s "
                  f"(median {total / statistics.median(seconds[name]):10,.0f})")  # fmt: skip
        floor = rate["consumer (floor)"]
        print(f"ferry data source / consumer        : {rate['ferry data source'] / floor:.2f}x "
              "(target >= 0.60x)")  # fmt: skip
        if "spark connector" in rate:
            print(f"spark connector / consumer          : {rate['spark connector'] / floor:.2f}x")
            print(f"ferry data source / spark connector : "
                  f"{rate['ferry data source'] / rate['spark connector']:.2f}x")  # fmt: skip
        print(f"load average                        : {os.getloadavg()[0]:.1f}")
        spark.stop()  # before the broker goes, so no Python worker is left writing to it
    return 0


if __name__ == "__main__":
    sys.exit(main())
