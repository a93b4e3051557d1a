"""The Flink jars Ferry's savepoint tool runs on, fetched by Maven coordinates into the cache.

`migrate --flink-savepoint` reads and writes a savepoint with Flink's own classes (its
checkpoint metadata serializers, its operator state backend) and the Kafka connector's own
serializers, in a JVM Ferry starts (`ferry.flink.tool`). Those jars are resolved once with Ivy
into `$FERRY_CACHE/flink-<version>/` exactly as the test brokers' jars are
(`ferry.testing.artifacts.fetch`, which honours `FERRY_MAVEN_MIRROR`), and also serve the
tests' Flink job (a local mini-cluster: `flink-clients`).

The product needs them at run time, so the versions and coordinates are decided here, not in
`ferry.testing`; `python -m ferry.testing.artifacts flink` fetches them ahead of time like the
other sets (`make test-slow` does).
"""

from __future__ import annotations

FLINK_VERSION = "2.2.0"
KAFKA_CONNECTOR_VERSION = f"5.0.0-{FLINK_VERSION.rsplit('.', 1)[0]}"  # 5.0.0-2.2
# The savepoints the tool reads and writes: checkpoint metadata version 6, which Flink 2.1
# and 2.2 write (2.0 writes 5, with connector 4.0); it refuses others (FerrySavepointTool).


# Resolved with their dependencies (Ivy, `ferry.testing.artifacts.FLINK`).
FLINK_COORDINATES = (
    ("org.apache.flink", "flink-runtime", FLINK_VERSION),
    ("org.apache.flink", "flink-streaming-java", FLINK_VERSION),
    ("org.apache.flink", "flink-clients", FLINK_VERSION),
    ("org.apache.flink", "flink-connector-kafka", KAFKA_CONNECTOR_VERSION),
    # the connector's pom has it `provided` (a Flink distribution's lib/ holds it)
    ("org.apache.flink", "flink-connector-base", FLINK_VERSION),
)
