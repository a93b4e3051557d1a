"""Read throughput: `ferry.kafka.read` of a large read (through Spark: the ferry-kafka data
source) against one plain confluent-kafka consumer.

Produces RECORDS_PER_PARTITION records into each of PARTITIONS partitions of a local broker,
then reads them all back (a) with `ferry.kafka.read` at the default
`reader.driver_max_offsets`, which sends a read this large through the data source (Arrow
batches, split into tasks of `--max-records` offsets; the bench fails if it would not), and
(b) with one consumer assigned to every partition, in the same run, and prints both rates and
their ratio. Target: data source >= 0.6x the consumer. For comparison it also prints (c) the
same read forced onto the driver (the path small reads take).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from ferry import kafka
from ferry.session import build_session
from ferry.testing.brokers import local_brokers
from ferry.testing.produce import create_topics


def produce_bulk(config: dict, topic: str, partitions: int, per_partition: int) -> None:
    # Throughput data need not be one record per batch: nothing here depends on exact marks.
    producer = Producer(
        {
            **config,
            "linger.ms": 20,
            "batch.num.messages": 10000,
            "queue.buffering.max.messages": 1_000_000,
        }
    )
    value = b"v" * 100
    for p in range(partitions):
        for i in range(per_partition):
            while True:
                try:
                    producer.produce(topic, key=b"key-%d" % i, value=value, partition=p)
                    break
                except BufferError:
                    producer.poll(0.05)
        producer.flush()


def consumer_read(config: dict, topic: str, ends: dict[int, int]) -> int:
    consumer = Consumer(
        {
            **config,
            "group.id": "bench",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "fetch.wait.max.ms": 50,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in ends])
    done: set[int] = set()
    n = 0
    while len(done) < len(ends):
        for msg in consumer.consume(num_messages=10000, timeout=1):
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    done.add(msg.partition())
                continue
            n += 1
            # touch what the data source materializes, so both sides do the same work
            msg.key(), msg.value(), msg.timestamp(), msg.headers()
    consumer.close()
    return n


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=200_000, help="records per partition")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--max-records", type=int, default=100_000)
    args = parser.parse_args()
    os.environ.setdefault("FERRY_MASTER", "local[2]")
    with local_brokers("bench") as (broker,):
        topic = "throughput"
        create_topics(broker.config, {topic: args.partitions})
        t0 = time.monotonic()
        produce_bulk(broker.config, topic, args.partitions, args.records)
        total = args.records * args.partitions
        print(f"produced {total} records in {time.monotonic() - t0:.1f}s", file=sys.stderr)
        ends = {p: args.records for p in range(args.partitions)}
        spark = build_session("ferry-bench")
        ranges = [kafka.OffsetRange(topic, p, 0, end) for p, end in ends.items()]
        cluster = kafka.Cluster("bench", broker.config, max_records_per_task=args.max_records)
        if cluster.reads_on_driver(total):
            raise SystemExit(f"{total} offsets would be read on the driver: use more records")
        # warm-up: JVM, Python workers, the data source's planning
        warm = dataclasses.replace(cluster, driver_max_offsets=0)
        kafka.read(spark, warm, [kafka.OffsetRange(topic, 0, 0, 1000)]).count()

        t0 = time.monotonic()
        n_consumer = consumer_read(broker.config, topic, ends)
        consumer_s = time.monotonic() - t0

        t0 = time.monotonic()
        n_source = kafka.read(spark, cluster, ranges).count()
        source_s = time.monotonic() - t0

        t0 = time.monotonic()
        on_driver = dataclasses.replace(cluster, driver_max_offsets=total)
        n_driver = kafka.read(spark, on_driver, ranges).count()
        driver_s = time.monotonic() - t0
        assert n_consumer == n_source == n_driver == total, (n_consumer, n_source, n_driver)

        rate_c, rate_s, rate_d = total / consumer_s, total / source_s, total / driver_s
        print(f"single consumer : {total} records in {consumer_s:6.2f}s = {rate_c:10,.0f} rec/s")
        print(f"ferry-kafka     : {total} records in {source_s:6.2f}s = {rate_s:10,.0f} rec/s")
        print(f"on the driver   : {total} records in {driver_s:6.2f}s = {rate_d:10,.0f} rec/s")
        print(f"ratio (data source / consumer): {rate_s / rate_c:.2f}x (target >= 0.60x)")
        spark.stop()  # before the broker goes, so no Python worker is left writing to it
    return 0


if __name__ == "__main__":
    sys.exit(main())
