"""The one place Ferry talks to Kafka (with `ferry.testing`, which plays the clusters' users).

- `cluster`: a cluster's properties, time limits and reader settings, built one way from the
  config, and the one consumer configuration;
- `metadata`, `log_offsets`, `groups`: cluster ids, topics, watermarks, groups, committed
  offsets, deletes, all in bulk, under one retry policy (`retry`, classifying errors with
  `failures`; `admin` re-exports them for old importers);
- `isolated`: a worker process for the one admin call that can crash the client (committed
  offsets: librdkafka issue 5040);
- `commits`: group offsets written one request per group, confirmed by reading them back;
- `reader`: the one read loop (plain assigned consumer, reconnects, time limit), shared by the
  driver and the executors;
- `records`: `read`, the one entry point for reading records: offset ranges in, a DataFrame
  out, read on the driver or through Spark by size;
- `probes`: first records at offsets and verified timestamp lookups;
- `source`: the `ferry-kafka` Spark Python Data Source that reads large reads on executors.

Everything else imports these names from `ferry.kafka`; each is imported from its module on
first use (`ferry.lazy`), so importing one module of this package does not load the Spark data
source.
"""

from ferry import lazy

_HOMES = {
    "Cluster": "ferry.kafka.cluster",
    "ClusterError": "ferry.errors",
    "CommitUnknownError": "ferry.kafka.cluster",
    "GroupActiveError": "ferry.kafka.groups",
    "GroupInfo": "ferry.kafka.groups",
    "KafkaReadError": "ferry.kafka.reader",
    "OffsetRange": "ferry.kafka.reader",
    "RangeReader": "ferry.kafka.reader",
    "TopicPartitionKey": "ferry.keys",
    "active_error": "ferry.kafka.groups",
    "alter_offsets_each": "ferry.kafka.commits",
    "by_state": "ferry.kafka.commits",
    "check_reachable": "ferry.kafka.metadata",
    "cluster_id": "ferry.kafka.metadata",
    "committed_offsets": "ferry.kafka.groups",
    "delete_groups": "ferry.kafka.groups",
    "describe_groups": "ferry.kafka.groups",
    "first_records_at": "ferry.kafka.probes",
    "is_transient": "ferry.kafka.failures",
    "group_infos": "ferry.kafka.groups",
    "list_group_infos": "ferry.kafka.groups",
    "list_groups": "ferry.kafka.groups",
    "list_offsets": "ferry.kafka.log_offsets",
    "list_topics": "ferry.kafka.metadata",
    "offsets_for_many_timestamps": "ferry.kafka.probes",
    "offsets_for_timestamps": "ferry.kafka.probes",
    "read": "ferry.kafka.records",
    "read_arrow": "ferry.kafka.records",
    "timestamp_offsets": "ferry.kafka.log_offsets",
    "watermarks": "ferry.kafka.log_offsets",
}
__all__ = sorted(_HOMES)
__getattr__ = lazy.exports(__name__, _HOMES)
