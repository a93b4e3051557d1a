"""Helpers for tests, the demo and the benchmarks: Apache Kafka's jars (`artifacts`), local
Kafka clusters (`brokers`), a fault proxy, test data producers and a replicator."""
