"""The one place Ferry talks to Kafka (with `ferry.testing`, which plays the clusters' users).

- `cluster`: a cluster's properties, time limits and reader settings, built one way from the
  config, and the one consumer configuration;
- `admin`: metadata, watermarks, groups, committed offsets, deletes,
  all in bulk, under one retry policy;
- `commits`: group offsets written one request per group, confirmed by reading them back;
- `reader`: the one read loop (plain assigned consumer, reconnects, time limit), shared by the
  driver and the executors;
- `records`: `read`, the one entry point for reading records: offset ranges in, a DataFrame
  out, read on the driver or through Spark by size;
- `probes`: first records at offsets and verified timestamp lookups;
- `source`: the `ferry-kafka` Spark Python Data Source that reads large reads on executors.

Everything else imports these names from `ferry.kafka`.
"""

from ferry.kafka.admin import (
    GroupActiveError,
    GroupInfo,
    TopicPartitionKey,
    active_error,
    check_reachable,
    committed_offsets,
    delete_groups,
    describe_groups,
    is_transient,
    list_groups,
    list_offsets,
    list_topics,
    watermarks,
)
from ferry.kafka.cluster import Cluster, ClusterError, CommitUnknownError
from ferry.kafka.commits import alter_offsets_each, by_state
from ferry.kafka.probes import first_records_at, offsets_for_timestamps
from ferry.kafka.reader import KafkaReadError, OffsetRange, RangeReader
from ferry.kafka.records import read

__all__ = [
    "Cluster",
    "ClusterError",
    "CommitUnknownError",
    "GroupActiveError",
    "GroupInfo",
    "KafkaReadError",
    "OffsetRange",
    "RangeReader",
    "TopicPartitionKey",
    "active_error",
    "alter_offsets_each",
    "by_state",
    "check_reachable",
    "committed_offsets",
    "delete_groups",
    "describe_groups",
    "first_records_at",
    "is_transient",
    "list_groups",
    "list_offsets",
    "list_topics",
    "offsets_for_timestamps",
    "read",
    "watermarks",
]
