"""Ferry's YAML config: loaded into frozen dataclasses and validated before anything connects.

Cluster sections (`source`, `destination`, `cluster`) are librdkafka client properties passed
through unchanged, so security.protocol, sasl.* and ssl.* work as in any librdkafka client.
`${VAR}` in any string reads the environment (`$${VAR}` is a literal `${VAR}`); a missing
variable is an error naming it. `--set a.b=c` overrides a key; the value is read as YAML.
Errors are one line naming the full key path, and for unknown keys the nearest valid one.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

from ferry.errors import ConfigError  # noqa: F401 - re-exported

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
    # through the ferry-kafka data source on the executors
    driver_max_offsets: int = 250_000


@dataclass(frozen=True)
class AdminConfig:
    timeout_ms: int = 10_000  # one admin request attempt
    retry_ms: int = 60_000  # all attempts of one admin operation (transient errors only;
    # a cluster that answers nothing fails sooner, after reader.timeout_ms)
    # groups written per batch (one describe, one offsets fetch, concurrent writes, one
    # ledger commit); also the bound on the time between a group's check and its write
    batch_groups: int = 200


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

    def client(self, section: str):  # noqa: ANN201 - ferry.kafka.Cluster
        """The named cluster section with this config's read and admin settings."""
        from ferry.kafka.cluster import Cluster

        return Cluster.from_config(self, section)


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


def _suggest(path: str) -> str:
    close = difflib.get_close_matches(path, ALL_KEYS, n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


_VAR = re.compile(r"\$\$\{([^}]*)\}|\$\{([^}]*)\}")


def _expand(value: Any, path: str, env: Mapping[str, str]) -> Any:
    if isinstance(value, str):

        def sub(m: re.Match) -> str:
            if m.group(1) is not None:
                return "${" + m.group(1) + "}"
            name = m.group(2)
            if name not in env:
                raise ConfigError(f"environment variable {name} is not set (used by {path})")
            return env[name]

        return _VAR.sub(sub, value)
    if isinstance(value, dict):
        return {k: _expand(v, f"{path}.{k}" if path else str(k), env) for k, v in value.items()}
    if isinstance(value, list):
        return [_expand(v, f"{path}[{i}]", env) for i, v in enumerate(value)]
    return value


def parse_set(expr: str) -> tuple[list[str], object]:
    """`a.b=c` → (["a", "b"], c); inside a cluster section the rest is one librdkafka key."""
    if "=" not in expr:
        raise ConfigError(f"--set {expr!r} must look like key=value")
    key, raw = expr.split("=", 1)
    parts = key.strip().split(".")
    if parts[0] in CLUSTER_SECTIONS and len(parts) > 1:
        parts = [parts[0], ".".join(parts[1:])]
    if not all(parts):
        raise ConfigError(f"--set {expr!r} has an empty key")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    return parts, value


def _as_int(value: Any, path: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"{path} must be an integer >= {minimum}, got {value!r}")
    return value


def _as_str_tuple(value: Any, path: str) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{path} must be a list of strings, got {value!r}")
    return tuple(value)


def _regexes(value: Any, path: str) -> tuple[str, ...]:
    items = _as_str_tuple(value, path)
    for i, pattern in enumerate(items):
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ConfigError(f"{path}[{i}] is not a valid regex {pattern!r}: {exc}") from None
    return items


def _optional_str(value: Any, path: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise ConfigError(f"{path} must be a string, got {value!r}")


def _cluster(value: Any, section: str) -> dict[str, str]:
    if not isinstance(value, dict):
        raise ConfigError(f"{section} must be a mapping of librdkafka client properties")
    out = {}
    for key, val in value.items():
        if isinstance(val, dict | list) or val is None:
            raise ConfigError(f"{section}.{key} must be a single value, got {val!r}")
        out[str(key)] = ("true" if val else "false") if isinstance(val, bool) else str(val)
    if "bootstrap.servers" not in out:
        raise ConfigError(f"missing required config key '{section}.bootstrap.servers'")
    return out


def _check_keys(section: str, data: dict, cls: type) -> None:
    allowed = {f.name for f in fields(cls)}
    for key in data:
        if key not in allowed:
            path = f"{section}.{key}"
            raise ConfigError(f"unknown config key '{path}'{_suggest(path)}")


def _build(data: dict) -> FerryConfig:
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        if key in CLUSTER_SECTIONS:
            kwargs[key] = _cluster(value, key)
            continue
        if key not in SECTIONS:
            raise ConfigError(f"unknown config key '{key}'{_suggest(key)}")
        if value is None:
            continue
        if not isinstance(value, dict):
            raise ConfigError(f"{key} must be a mapping, got {value!r}")
        _check_keys(key, value, SECTIONS[key])
        kwargs[key] = _SECTION_BUILDERS[key](value, key)
    return FerryConfig(**kwargs)


def _selection(d: dict, s: str) -> Selection:
    return Selection(
        include=_regexes(d.get("include", [".*"]), f"{s}.include"),
        exclude=_regexes(d.get("exclude", []), f"{s}.exclude"),
    )


def _topics(d: dict, s: str) -> TopicSelection:
    base = _selection(d, s)
    rules = d.get("rename", []) or []
    if not isinstance(rules, list):
        raise ConfigError(f"{s}.rename must be a list of {{match, replace}}")
    built = []
    for i, rule in enumerate(rules):
        path = f"{s}.rename[{i}]"
        if not isinstance(rule, dict) or set(rule) != {"match", "replace"}:
            raise ConfigError(f"{path} must have exactly the keys match and replace")
        match, replace = str(rule["match"]), str(rule["replace"])
        try:
            compiled = re.compile(match)
        except re.error as exc:
            raise ConfigError(f"{path}.match is not a valid regex {match!r}: {exc}") from None
        names = {i: n for n, i in compiled.groupindex.items()}
        shape = "".join(
            f"(?P<{names[i]}>)" if i in names else "()" for i in range(1, compiled.groups + 1)
        )
        try:  # a match with the same groups checks the template's references up front
            re.match(shape, "").expand(replace)  # type: ignore[union-attr]
        except (re.error, IndexError) as exc:
            raise ConfigError(
                f"{path}.replace is not a valid template {replace!r}: {exc}"
            ) from None
        built.append(RenameRule(match, replace))
    return TopicSelection(include=base.include, exclude=base.exclude, rename=tuple(built))


def _matching(d: dict, s: str) -> MatchingConfig:
    default = MatchingConfig()
    hash_fields = _as_str_tuple(d.get("hash", list(default.hash)), f"{s}.hash")
    bad = [h for h in hash_fields if h not in HASH_FIELDS]
    if bad or not hash_fields or len(set(hash_fields)) != len(hash_fields):
        raise ConfigError(
            f"{s}.hash must be a non-empty list of distinct {', '.join(HASH_FIELDS)}, "
            f"got {list(hash_fields)}"
        )
    search = d.get("search", default.search)
    if search not in SEARCH_MODES:
        raise ConfigError(f"{s}.search must be one of {', '.join(SEARCH_MODES)}, got {search!r}")
    return MatchingConfig(
        search=search,
        partitioning=_partitioning(d.get("partitioning", "auto"), f"{s}.partitioning"),
        max_band_ms=_as_int(d.get("max_band_ms", default.max_band_ms), f"{s}.max_band_ms", 1),
        window_before_ms=_as_int(
            d.get("window_before_ms", default.window_before_ms), f"{s}.window_before_ms", 0
        ),
        window_after_ms=_as_int(
            d.get("window_after_ms", default.window_after_ms), f"{s}.window_after_ms", 0
        ),
        context=_as_int(d.get("context", default.context), f"{s}.context", 0),
        hash=hash_fields,
        ignore_headers=_as_str_tuple(d.get("ignore_headers", []), f"{s}.ignore_headers"),
    )


def _partitioning(value: Any, path: str) -> tuple[tuple[str, str], ...]:
    """`auto|same|reconcile` for every topic, or a list of {match: REGEX, mode: MODE} rules."""
    modes = ", ".join(PARTITIONING_MODES)
    if isinstance(value, str):
        if value not in PARTITIONING_MODES:
            raise ConfigError(f"{path} must be one of {modes}, got {value!r}")
        return ((".*", value),)
    if not isinstance(value, list):
        raise ConfigError(f"{path} must be one of {modes}, or a list of {{match, mode}}")
    rules = []
    for i, rule in enumerate(value):
        where = f"{path}[{i}]"
        if not isinstance(rule, dict) or set(rule) != {"match", "mode"}:
            raise ConfigError(f"{where} must have exactly the keys match and mode")
        if rule["mode"] not in PARTITIONING_MODES:
            raise ConfigError(f"{where} must be one of {modes}, got {rule['mode']!r}")
        try:
            re.compile(str(rule["match"]))
        except re.error as exc:
            raise ConfigError(f"{where}.match is not a valid regex: {exc}") from None
        rules.append((str(rule["match"]), str(rule["mode"])))
    return tuple(rules)


def _reader(d: dict, s: str) -> ReaderConfig:
    default = ReaderConfig()
    iso = d.get("isolation_level", default.isolation_level)
    if iso not in ("read_committed", "read_uncommitted"):
        raise ConfigError(
            f"{s}.isolation_level must be read_committed or read_uncommitted, got {iso!r}"
        )
    return ReaderConfig(
        max_records_per_task=_as_int(
            d.get("max_records_per_task", default.max_records_per_task),
            f"{s}.max_records_per_task",
            1,
        ),
        timeout_ms=_as_int(d.get("timeout_ms", default.timeout_ms), f"{s}.timeout_ms", 1),
        isolation_level=iso,
        driver_max_offsets=_as_int(
            d.get("driver_max_offsets", default.driver_max_offsets), f"{s}.driver_max_offsets", 0
        ),
    )


def _admin(d: dict, s: str) -> AdminConfig:
    default = AdminConfig()
    return AdminConfig(
        timeout_ms=_as_int(d.get("timeout_ms", default.timeout_ms), f"{s}.timeout_ms", 1),
        retry_ms=_as_int(d.get("retry_ms", default.retry_ms), f"{s}.retry_ms", 0),
        batch_groups=_as_int(d.get("batch_groups", default.batch_groups), f"{s}.batch_groups", 1),
    )


def _ledger(d: dict, s: str) -> LedgerConfig:
    return LedgerConfig(
        path=_optional_str(d.get("path"), f"{s}.path"),
        lease_ms=_as_int(d.get("lease_ms", LedgerConfig().lease_ms), f"{s}.lease_ms", 0),
    )


def _paths(cls: type):  # noqa: ANN202
    def build(d: dict, s: str):  # noqa: ANN202
        return cls(**{k: _optional_str(v, f"{s}.{k}") for k, v in d.items()})

    return build


def _history(d: dict, s: str) -> HistoryConfig:
    default = HistoryConfig()
    return HistoryConfig(
        path=_optional_str(d.get("path"), f"{s}.path"),
        status_path=_optional_str(d.get("status_path"), f"{s}.status_path"),
        window=_as_int(d.get("window", default.window), f"{s}.window", 1),
        allowed_lag=_as_int(d.get("allowed_lag", default.allowed_lag), f"{s}.allowed_lag", 0),
    )


def _audit(d: dict, s: str) -> AuditConfig:
    default = AuditConfig()
    return AuditConfig(
        path=_optional_str(d.get("path"), f"{s}.path"),
        max_count_offsets=_as_int(
            d.get("max_count_offsets", default.max_count_offsets), f"{s}.max_count_offsets", 0
        ),
    )


_SECTION_BUILDERS = {
    "groups": _selection,
    "topics": _topics,
    "matching": _matching,
    "reader": _reader,
    "admin": _admin,
    "ledger": _ledger,
    "history": _history,
    "offsets": _paths(OffsetsTopicConfig),
    "audit": _audit,
}


def load_config(
    path: str | Path | None,
    overrides: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
) -> FerryConfig:
    """Read, override, expand and validate a config file (None: overrides only)."""
    data: dict = {}
    if path is not None:
        p = Path(path)
        try:
            text = p.read_text()
        except OSError as exc:
            raise ConfigError(f"cannot read config file {p}: {exc.strerror}") from None
        try:
            loaded = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f" line {mark.line + 1}" if mark is not None else ""
            problem = getattr(exc, "problem", None) or "invalid YAML"
            raise ConfigError(f"{p}{where}: {problem}") from None
        if loaded is not None and not isinstance(loaded, dict):
            raise ConfigError(f"{p}: the top level must be a mapping of sections")
        data = loaded or {}
    for expr in overrides:
        parts, value = parse_set(expr)
        node = data
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"--set {expr!r}: {part} is not a section")
        node[parts[-1]] = value
    data = _expand(data, "", os.environ if env is None else env)
    return _build(data)


def require(cfg: FerryConfig, *keys: str) -> None:
    """Fail with the first missing key among the dotted `keys`."""
    for key in keys:
        node: Any = cfg
        for part in key.split("."):
            node = getattr(node, part, None)
        if node is None:
            raise ConfigError(f"missing required config key '{key}'")
