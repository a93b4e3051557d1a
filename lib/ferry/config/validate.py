"""A config's parsed YAML checked and built into `ferry.config.model`'s dataclasses: every
error is one line naming the full key path, and for unknown keys the nearest valid one."""

from __future__ import annotations

import difflib
import re
from dataclasses import fields
from typing import Any

from ferry.config.model import (
    ALL_KEYS,
    CLUSTER_SECTIONS,
    HASH_FIELDS,
    MAX_CONTEXT,
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


def _suggest(path: str) -> str:
    close = difflib.get_close_matches(path, ALL_KEYS, n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


def _as_int(value: Any, path: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"{path} must be an integer >= {minimum}, got {value!r}")
    return value


def _context(value: Any, path: str) -> int:
    k = _as_int(value, path, 0)
    if k > MAX_CONTEXT:
        raise ConfigError(f"{path} must be at most {MAX_CONTEXT} records, got {k}")
    return k


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


def build(data: dict) -> FerryConfig:
    """Parsed YAML (overrides applied, `${VAR}` expanded) → a FerryConfig, or ConfigError."""
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
        context=_context(d.get("context", default.context), f"{s}.context"),
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
    def section(d: dict, s: str):  # noqa: ANN202
        return cls(**{k: _optional_str(v, f"{s}.{k}") for k, v in d.items()})

    return section


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
