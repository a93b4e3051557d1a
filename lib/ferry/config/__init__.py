"""Ferry's YAML config: loaded into frozen dataclasses and validated before anything connects.

Cluster sections (`source`, `destination`, `cluster`) are librdkafka client properties passed
through unchanged, so security.protocol, sasl.* and ssl.* work as in any librdkafka client.
`${VAR}` in any string reads the environment (`$${VAR}` is a literal `${VAR}`); a missing
variable is an error naming it. `--set a.b=c` overrides a key; the value is read as YAML.
Errors are one line naming the full key path, and for unknown keys the nearest valid one.

- `model`: the dataclasses and their defaults;
- `validate`: parsed YAML checked and built into them;
- `load`: `load_config` (file, `--set`, `${VAR}`, then validate), `parse_set`, and
  `require`/`require_shared` (a job's keys present; in cluster deploy mode its tables on
  shared storage).

This package's names are what the rest of Ferry imports: `from ferry.config import
load_config, require, FerryConfig`.
"""

from ferry.config.load import TABLES, load_config, parse_set, require, require_shared
from ferry.config.model import (
    ALL_KEYS,
    CLUSTER_SECTIONS,
    HASH_FIELDS,
    PARTITIONING_MODES,
    SEARCH_MODES,
    SECTIONS,
    AdminConfig,
    AuditConfig,
    FerryConfig,
    HistoryConfig,
    LedgerConfig,
    MatchingConfig,
    OffsetsTopicConfig,
    ReaderConfig,
    RenameRule,
    Selection,
    TopicSelection,
)
from ferry.errors import ConfigError

__all__ = [
    "ALL_KEYS",
    "CLUSTER_SECTIONS",
    "HASH_FIELDS",
    "PARTITIONING_MODES",
    "SEARCH_MODES",
    "SECTIONS",
    "TABLES",
    "AdminConfig",
    "AuditConfig",
    "ConfigError",
    "FerryConfig",
    "HistoryConfig",
    "LedgerConfig",
    "MatchingConfig",
    "OffsetsTopicConfig",
    "ReaderConfig",
    "RenameRule",
    "Selection",
    "TopicSelection",
    "load_config",
    "parse_set",
    "require",
    "require_shared",
]
