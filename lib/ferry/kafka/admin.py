"""The old home of the bulk admin calls, kept while importers move: every name here is
defined in the module that owns its concept —

- `ferry.kafka.failures`: which client errors are transient, which need a fresh client;
- `ferry.kafka.retry`: `retry_each`, the one retry loop of every admin call;
- `ferry.kafka.metadata`: `check_reachable`, `list_topics`;
- `ferry.kafka.log_offsets`: `watermarks`, `list_offsets`;
- `ferry.kafka.groups`: `list_groups`, `describe_groups`, `committed_offsets`, `delete_groups`,
  `GroupInfo`, `GroupActiveError`;
- `ferry.keys`: `TopicPartitionKey`.

New code imports from those (or from `ferry.kafka`), not from here.
"""

from ferry.kafka.cluster import Cluster, ClusterError, ClusterRefusedError
from ferry.kafka.failures import is_transient, is_transient_error
from ferry.kafka.groups import (
    GroupActiveError,
    GroupInfo,
    active_error,
    committed_offsets,
    delete_groups,
    describe_groups,
    list_groups,
)
from ferry.kafka.log_offsets import OFFSET_INVALID, list_offsets, watermarks
from ferry.kafka.metadata import check_reachable, list_topics
from ferry.kafka.retry import checked_future, failed_future, retry_each
from ferry.keys import TopicPartitionKey

__all__ = [
    "OFFSET_INVALID",
    "Cluster",
    "ClusterError",
    "ClusterRefusedError",
    "GroupActiveError",
    "GroupInfo",
    "TopicPartitionKey",
    "active_error",
    "check_reachable",
    "checked_future",
    "committed_offsets",
    "delete_groups",
    "describe_groups",
    "failed_future",
    "is_transient",
    "is_transient_error",
    "list_groups",
    "list_offsets",
    "list_topics",
    "retry_each",
    "watermarks",
]
