"""The ferry-kafka reader's options, planned on the driver (no broker needed)."""

from __future__ import annotations

from ferry.kafka.source import FULL_SCHEMA, KafkaRangesReader


def reader(**options: str) -> KafkaRangesReader:
    return KafkaRangesReader({"kafka.bootstrap.servers": "h:9092", **options}, FULL_SCHEMA)


def test_isolation_level_reaches_the_consumer_and_the_cluster_property_wins():
    assert reader().consumer_conf(None)["isolation.level"] == "read_committed"
    uncommitted = reader(isolationLevel="read_uncommitted").consumer_conf(None)
    assert uncommitted["isolation.level"] == "read_uncommitted"
    own = reader(isolationLevel="read_uncommitted", **{"kafka.isolation.level": "read_committed"})
    assert own.consumer_conf(None)["isolation.level"] == "read_committed"


def test_the_reader_never_commits_and_keeps_cluster_properties():
    conf = reader(**{"kafka.security.protocol": "SASL_SSL"}).consumer_conf(None)
    assert conf["security.protocol"] == "SASL_SSL" and conf["bootstrap.servers"] == "h:9092"
    assert conf["enable.auto.commit"] is False and conf["enable.auto.offset.store"] is False
