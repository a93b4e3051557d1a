"""The one place Ferry talks to Kafka (with `ferry.testing`, which plays the clusters' users).

- `cluster`: a cluster's properties and time limits, built one way from the config;
- `admin`: metadata, watermarks, groups, committed offsets, deletes,
  all in bulk, under one retry policy;
- `commits`: group offsets written one request per group, confirmed by reading them back;
- `probes`: first records at offsets and verified timestamp lookups;
- `source`: the `ferry-kafka` Spark Python Data Source that reads offset ranges.

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
from ferry.kafka.source import KafkaReadError, OffsetRange, read_ranges

__all__ = [
    "Cluster",
    "ClusterError",
    "CommitUnknownError",
    "GroupActiveError",
    "GroupInfo",
    "KafkaReadError",
    "OffsetRange",
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
    "read_ranges",
    "watermarks",
]
