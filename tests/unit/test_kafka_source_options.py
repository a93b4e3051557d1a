"""The one consumer configuration (`Cluster.consumer_conf`) and how the `ferry-kafka` reader
rebuilds the cluster from its options on the executors (no broker needed)."""

from __future__ import annotations

from ferry.config import load_config
from ferry.kafka.cluster import Cluster
from ferry.kafka.reader import OffsetRange
from ferry.kafka.source import FULL_SCHEMA, KafkaRangesReader, plan_partitions


def reader(**options: str) -> KafkaRangesReader:
    return KafkaRangesReader({"kafka.bootstrap.servers": "h:9092", **options}, FULL_SCHEMA)


def test_isolation_level_reaches_the_consumer_and_the_cluster_property_wins():
    assert reader().cluster.consumer_conf()["isolation.level"] == "read_committed"
    uncommitted = reader(isolationLevel="read_uncommitted").cluster.consumer_conf()
    assert uncommitted["isolation.level"] == "read_uncommitted"
    own = reader(isolationLevel="read_uncommitted", **{"kafka.isolation.level": "read_committed"})
    assert own.cluster.consumer_conf()["isolation.level"] == "read_committed"


def test_the_reader_never_commits_and_keeps_cluster_properties():
    conf = reader(**{"kafka.security.protocol": "SASL_SSL"}).cluster.consumer_conf()
    assert conf["security.protocol"] == "SASL_SSL" and conf["bootstrap.servers"] == "h:9092"
    assert conf["enable.auto.commit"] is False and conf["enable.auto.offset.store"] is False


def test_user_properties_win_over_ferry_defaults_but_not_over_what_reading_needs():
    conf = Cluster(
        "c",
        {"bootstrap.servers": "h:9092", "fetch.wait.max.ms": "1000", "enable.auto.commit": "true"},
    ).consumer_conf()
    assert conf["fetch.wait.max.ms"] == "1000"  # a slow broker's setting is kept
    assert conf["enable.auto.commit"] is False  # a reader never commits, whatever is set
    assert Cluster("c", {"bootstrap.servers": "h"}).consumer_conf()["fetch.wait.max.ms"] == 50


def test_every_reader_setting_travels_on_the_cluster(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(
        "source:\n  bootstrap.servers: h:9092\n"
        "reader:\n  timeout_ms: 7000\n  isolation_level: read_uncommitted\n"
        "  max_records_per_task: 123\n  driver_max_offsets: 0\n"
    )
    cluster = Cluster.from_config(load_config(path), "source")
    assert (cluster.timeout_ms, cluster.isolation_level) == (7000, "read_uncommitted")
    assert (cluster.max_records_per_task, cluster.driver_max_offsets) == (123, 0)
    assert cluster.consumer_conf()["isolation.level"] == "read_uncommitted"
    assert cluster.reads_on_driver(0) and not cluster.reads_on_driver(1)
    default = Cluster.from_config(load_config(None, ["source.bootstrap.servers=h"]), "source")
    assert default.reads_on_driver(1_000_000) and not default.reads_on_driver(1_000_001)
    # records with their payloads weigh four times as much: 250,000 of them still fit
    assert default.reads_on_driver(250_000, ["offset", "key", "value"])
    assert not default.reads_on_driver(250_001, ["offset", "value"])
    assert not default.reads_on_driver(250_001, ["headers"])
    assert default.reads_on_driver(250_001, ["topic", "partition", "offset", "sha256"])


def test_the_executors_rebuild_the_cluster_from_the_options():
    r = reader(cluster="source (h:9092)", timeoutMs="4000", maxRecordsPerPartition="10")
    assert (r.cluster.name, r.cluster.timeout_ms, r.cluster.max_records_per_task) == (
        "source (h:9092)",
        4000,
        10,
    )
    # Spark lower-cases option keys; both spellings are read
    assert reader(timeoutms="5000").cluster.timeout_ms == 5000


def test_only_the_last_piece_of_a_split_range_reads_on_to_the_next_record():
    ranges = [OffsetRange("t", 0, 0, 25), OffsetRange("t", 1, 5, 6)]
    planned = plan_partitions(ranges, 10, min_partitions=4, to_next_record=True)
    reads_on = [r for task in planned for r in task.reads_on]
    assert reads_on == [OffsetRange("t", 0, 20, 25), OffsetRange("t", 1, 5, 6)]
    assert all(not task.reads_on for task in plan_partitions(ranges, 10))
