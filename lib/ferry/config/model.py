"""What a Ferry config holds: frozen dataclasses, one per section, with their defaults — and
`require`, a job's check that the keys it needs are set. Built from YAML, and checked on the
way, by `ferry.config.validate`.

Config is the layer below everything that uses it: it imports nothing of Ferry but its errors.
A cluster section becomes a client through `ferry.kafka.Cluster.from_config(cfg, section)`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from ferry.errors import ConfigError

CLUSTER_SECTIONS = ("source", "destination", "cluster")
HASH_FIELDS = ("key", "value", "headers")


@dataclass(frozen=True)
class Selection:
    include: tuple[str, ...] = (".*",)
    exclude: tuple[str, ...] = ()

    def matches(self, name: str) -> bool:
        return any(re.fullmatch(p, name) for p in self.include) and not any(
            re.fullmatch(p, name) for p in self.exclude
        )


@dataclass(frozen=True)
class RenameRule:
    match: str
    replace: str


@dataclass(frozen=True)
class TopicSelection(Selection):
    rename: tuple[RenameRule, ...] = ()

    def destination_topic(self, name: str) -> str:
        """First rule whose regex is found in the name wins (Python re.sub semantics)."""
        for rule in self.rename:
            if re.search(rule.match, name):
                return re.sub(rule.match, rule.replace, name, count=1)
        return name


SEARCH_MODES = ("narrow", "full")
PARTITIONING_MODES = ("auto", "same", "reconcile")
# matching.context's largest value: matching ranks a candidate by one long with each side's
# matched context in 16 bits (`ferry.migrate.matching.resolve`)
MAX_CONTEXT = 2**16 - 1


@dataclass(frozen=True)
class MatchingConfig:
    window_before_ms: int = 60_000
    window_after_ms: int = 60_000
    context: int = 16
    hash: tuple[str, ...] = ("key", "value")
    ignore_headers: tuple[str, ...] = ()
    # narrow: read outward from each anchor until decided (ferry.migrate.search); full: read
    # every anchor's whole window
    search: str = "narrow"
    # (source topic regex, same|reconcile|auto) rules, first match wins; auto: reconcile when
    # the destination topic's partition count differs (ferry.migrate.reconcile)
    partitioning: tuple[tuple[str, str], ...] = ((".*", "auto"),)
    # reconcile mode: a group whose frontier band (earliest unconsumed .. latest consumed
    # record, plus the windows) is wider than this is not planned
    max_band_ms: int = 3_600_000

    def partitioning_for(self, topic: str) -> str:
        """same, reconcile or auto for a source topic."""
        for pattern, mode in self.partitioning:
            if re.search(pattern, topic):
                return mode
        return "auto"


@dataclass(frozen=True)
class ReaderConfig:
    max_records_per_task: int = 50_000  # reads through Spark: offsets per task at most
    timeout_ms: int = 30_000  # a read (or probe) without progress for this long fails
    isolation_level: str = "read_committed"
    # a read of at most this many offsets runs on the driver (no Spark job); larger ones
    # through the ferry-kafka data source on the executors; reads of payloads count 4 a record
    driver_max_offsets: int = 1_000_000


@dataclass(frozen=True)
class AdminConfig:
    timeout_ms: int = 10_000  # one admin request attempt
    retry_ms: int = 60_000  # all attempts of one admin operation (transient errors only;
    # a cluster that answers nothing fails sooner, after reader.timeout_ms)
    # groups written per batch (one group listing, one offsets fetch, concurrent writes, one
    # ledger commit); also the bound on the time between a group's check and its write
    batch_groups: int = 1000


@dataclass(frozen=True)
class LedgerConfig:
    path: str | None = None
    # An executing run's intent to write a group is a claim other runs respect this long;
    # a run that died without recording its outcome blocks the group no longer than this.
    lease_ms: int = 900_000


@dataclass(frozen=True)
class HistoryConfig:
    path: str | None = None
    status_path: str | None = None
    window: int = 10
    allowed_lag: int = 0


@dataclass(frozen=True)
class OffsetsTopicConfig:
    commits_path: str | None = None
    groups_path: str | None = None
    quarantine_path: str | None = None


@dataclass(frozen=True)
class AuditConfig:
    path: str | None = None  # Delta table the audit rows are appended to (none: not kept)
    # A partition whose committed and exact offsets lie further apart is not read: its
    # difference is the offset span, an upper bound on the records (is_counted false).
    max_count_offsets: int = 100_000


@dataclass(frozen=True)
class FerryConfig:
    source: Mapping[str, str] | None = None
    destination: Mapping[str, str] | None = None
    cluster: Mapping[str, str] | None = None
    groups: Selection = field(default_factory=Selection)
    topics: TopicSelection = field(default_factory=TopicSelection)
    matching: MatchingConfig = field(default_factory=MatchingConfig)
    reader: ReaderConfig = field(default_factory=ReaderConfig)
    admin: AdminConfig = field(default_factory=AdminConfig)
    ledger: LedgerConfig = field(default_factory=LedgerConfig)
    history: HistoryConfig = field(default_factory=HistoryConfig)
    offsets: OffsetsTopicConfig = field(default_factory=OffsetsTopicConfig)
    audit: AuditConfig = field(default_factory=AuditConfig)

    def cluster_name(self, section: str) -> str:
        conf = getattr(self, section) or {}
        return f"{section} ({conf.get('bootstrap.servers', '?')})"


SECTIONS: dict[str, type] = {
    "groups": Selection,
    "topics": TopicSelection,
    "matching": MatchingConfig,
    "reader": ReaderConfig,
    "admin": AdminConfig,
    "ledger": LedgerConfig,
    "history": HistoryConfig,
    "offsets": OffsetsTopicConfig,
    "audit": AuditConfig,
}
ALL_KEYS = (
    list(CLUSTER_SECTIONS)
    + [f"{s}.{f.name}" for s, cls in SECTIONS.items() for f in fields(cls)]
    + list(SECTIONS)
)


def require(cfg: FerryConfig, *keys: str) -> None:
    """Fail with the first missing key among the dotted `keys`."""
    for key in keys:
        node: Any = cfg
        for part in key.split("."):
            node = getattr(node, part, None)
        if node is None:
            raise ConfigError(f"missing required config key '{key}'")
