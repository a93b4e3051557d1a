"""Offset reset rules with `kafka-consumer-groups --reset-offsets` semantics, as pure functions.

What a spec means (the stock tool's behaviour, which Ferry keeps):
- `--to-earliest` / `--to-latest`: the partition's log start / log end.
- `--to-current`: the committed offset, as it is (not clamped: exporting it is the stock
  backup recipe, and a backup must restore what was there; one outside [log start, log end]
  is noted); a partition without one goes to log end.
- `--to-offset N`: N. `--shift-by N`: committed + N (a partition without a committed offset
  cannot be shifted: the group is not reset, naming the partition).
- `--to-datetime T` / `--by-duration D` (T = now - D): the first record whose timestamp is at
  or after T; log end when no record is that new. A datetime without a zone is UTC.
- `--from-file CSV`: the offsets in the file.
Every other target is then clamped into [log start, log end], and each clamp is reported in
the plan's `note` rather than applied silently.
Scope: `--all-topics` is the partitions the group has committed offsets for; `--topic T` all
of T's partitions; `--topic T:0,2` those (tests/integration/test_conformance.py holds all of
this to the real tool).

CSV, both ways, no header: `topic,partition,offset` for one group, `group,topic,partition,offset`
for several. A malformed line is rejected with its line number.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from enum import Enum

from ferry.errors import UsageError
from ferry.keys import TopicPartitionKey


class ResetSpec(str, Enum):
    """The reset specs, named as kafka-consumer-groups' options (`--to-earliest` is
    TO_EARLIEST); values are those options' argparse names."""

    TO_EARLIEST = "to_earliest"
    TO_LATEST = "to_latest"
    TO_CURRENT = "to_current"
    TO_OFFSET = "to_offset"
    SHIFT_BY = "shift_by"
    TO_DATETIME = "to_datetime"
    BY_DURATION = "by_duration"
    FROM_FILE = "from_file"

    @property
    def is_at_time(self) -> bool:
        """Resolved by a timestamp lookup (ListOffsets by time)."""
        return self in (ResetSpec.TO_DATETIME, ResetSpec.BY_DURATION)


class ResetError(ValueError):
    """A spec, scope or CSV problem, described in one line."""


def chosen_spec(options: Mapping[str, object], now_ms: int) -> tuple[ResetSpec, object]:
    """The spec that the parsed options (by their argparse names) give, and its value: N for
    --to-offset and --shift-by, epoch ms for --to-datetime and --by-duration (now − D), None
    otherwise (--from-file's offsets are read with the file). A bad value, or no spec at all,
    is a UsageError."""
    try:
        return _chosen_spec(options, now_ms)
    except ResetError as exc:
        raise UsageError(str(exc)) from None


def _chosen_spec(options: Mapping[str, object], now_ms: int) -> tuple[ResetSpec, object]:
    for spec in ResetSpec:
        given = options.get(spec.value)
        if given is None or given is False:
            continue
        if spec is ResetSpec.TO_OFFSET and int(given) < 0:  # type: ignore[call-overload]
            raise ResetError("--to-offset must be >= 0")
        if spec in (ResetSpec.TO_OFFSET, ResetSpec.SHIFT_BY):
            return spec, int(given)  # type: ignore[call-overload]
        if spec is ResetSpec.TO_DATETIME:
            return spec, to_epoch_ms(parse_datetime(str(given)))
        if spec is ResetSpec.BY_DURATION:
            ago = parse_duration(str(given))
            return spec, int(now_ms - ago.total_seconds() * 1000)
        return spec, None
    raise ResetError("a reset spec is required (--to-earliest, --to-offset N, ...)")


@dataclass(frozen=True)
class Target:
    """Where one partition of one group would go."""

    group: str
    topic: str
    partition: int
    previous_offset: int | None
    new_offset: int
    note: str | None = None  # e.g. "clamped from 120 to log end 100"


_DURATION = re.compile(
    r"^P(?:(?P<days>\d+(?:\.\d+)?)D)?"
    r"(?:T(?:(?P<hours>\d+(?:\.\d+)?)H)?(?:(?P<minutes>\d+(?:\.\d+)?)M)?"
    r"(?:(?P<seconds>\d+(?:\.\d+)?)S)?)?$"
)


def parse_duration(text: str) -> timedelta:
    """ISO-8601 `PnDTnHnMnS` (the subset kafka-consumer-groups accepts), e.g. P1DT2H, PT30M."""
    match = _DURATION.match(text.strip().upper())
    if not match or text.strip().upper() in ("P", "PT") or text.strip().upper().endswith("T"):
        raise ResetError(f"--by-duration {text!r} is not an ISO-8601 duration like PnDTnHnMnS")
    parts = {k: float(v) for k, v in match.groupdict().items() if v is not None}
    return timedelta(**parts)


def parse_datetime(text: str, option: str = "--to-datetime") -> datetime:
    """ISO-8601 date-time; without a zone it is UTC (kafka-consumer-groups uses local time,
    which on a scheduler is rarely what anyone means). Errors name `option`."""
    raw = text.strip()
    if raw.endswith("Z"):
        raw = raw[:-1] + "+00:00"
    try:
        value = datetime.fromisoformat(raw)
    except ValueError:
        raise ResetError(
            f"{option} {text!r} is not an ISO-8601 date-time like 2026-01-31T12:00:00"
        ) from None
    if value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    return value


def to_epoch_ms(value: datetime) -> int:
    return int(value.timestamp() * 1000)


def parse_scope(topic_args: Iterable[str]) -> dict[str, tuple[int, ...] | None]:
    """`--topic T` (all partitions) or `--topic T:0,2` → {topic: partitions or None}."""
    scope: dict[str, tuple[int, ...] | None] = {}
    for arg in topic_args:
        topic, sep, parts = arg.partition(":")
        if not topic:
            raise ResetError(f"--topic {arg!r} has no topic name")
        if not sep:
            scope[topic] = None
            continue
        try:
            partitions = tuple(sorted({int(p) for p in parts.split(",") if p.strip() != ""}))
        except ValueError:
            raise ResetError(f"--topic {arg!r}: partitions must be integers like T:0,1") from None
        if not partitions or any(p < 0 for p in partitions):
            raise ResetError(f"--topic {arg!r}: partitions must be integers >= 0 like T:0,1")
        if topic in scope and scope[topic] is None:
            continue  # already all partitions
        scope[topic] = tuple(sorted(set(scope.get(topic) or ()) | set(partitions)))
    return scope


def parse_offsets_csv(text: str, source: str = "CSV") -> dict[str, dict[TopicPartitionKey, int]]:
    """Read a reset CSV (3 columns: one group, key ""; 4 columns: group first) into
    {group: {(topic, partition): offset}}. All lines must have the same shape."""
    out: dict[str, dict[TopicPartitionKey, int]] = {}
    width = None
    for number, row in enumerate(csv.reader(io.StringIO(text)), start=1):
        if not row or all(not c.strip() for c in row):
            continue
        cells = [c.strip() for c in row]
        if len(cells) not in (3, 4):
            raise ResetError(
                f"{source} line {number}: expected topic,partition,offset or "
                f"group,topic,partition,offset, got {len(cells)} fields"
            )
        if width is None:
            width = len(cells)
        elif len(cells) != width:
            raise ResetError(
                f"{source} line {number}: {len(cells)} fields where earlier lines have {width}"
            )
        group = cells[0] if width == 4 else ""
        topic, partition, offset = cells[-3:]
        if not topic or (width == 4 and not group):
            raise ResetError(f"{source} line {number}: empty group or topic")
        try:
            p, o = int(partition), int(offset)
        except ValueError:
            raise ResetError(
                f"{source} line {number}: partition and offset must be integers, "
                f"got {partition!r}, {offset!r}"
            ) from None
        if p < 0 or o < 0:
            raise ResetError(f"{source} line {number}: partition and offset must be >= 0")
        key = (topic, p)
        if key in out.setdefault(group, {}):
            raise ResetError(f"{source} line {number}: {topic}[{p}] appears twice")
        out[group][key] = o
    if not out:
        raise ResetError(f"{source} has no offsets")
    return out


def format_offsets_csv(targets: Iterable[Target], with_group: bool) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    for t in sorted(targets, key=lambda t: (t.group, t.topic, t.partition)):
        row = [t.topic, t.partition, t.new_offset]
        writer.writerow([t.group, *row] if with_group else row)
    return buf.getvalue()


def clamp(offset: int, log_start: int, log_end: int) -> tuple[int, str | None]:
    """The stock tool's range check: out-of-range targets move to the nearest end, reported."""
    if offset < log_start:
        return log_start, f"clamped from {offset} to log start {log_start}"
    if offset > log_end:
        return log_end, f"clamped from {offset} to log end {log_end}"
    return offset, None


def _outside(offset: int, log_start: int, log_end: int) -> str | None:
    """A note for a committed offset kept as it is although outside the log."""
    if offset < log_start:
        return f"kept {offset}, below log start {log_start}"
    if offset > log_end:
        return f"kept {offset}, past log end {log_end}"
    return None


def resolve_targets(
    group: str,
    spec: ResetSpec | str,
    value: object,
    partitions: Iterable[TopicPartitionKey],
    committed: Mapping[TopicPartitionKey, int],
    bounds: Mapping[TopicPartitionKey, tuple[int, int]],
    offsets_at_time: Mapping[TopicPartitionKey, int | None] | None = None,
) -> list[Target]:
    """One group's targets for a spec over the given partitions.

    `value` is the spec's argument: N for to_offset/shift_by, {(topic, partition): offset} for
    from_file, unused otherwise. `offsets_at_time` is, for to_datetime/by_duration, the first
    offset at or after the time per partition (None: no record that new). Raises ResetError
    naming the group and partition when a partition cannot be reset.
    """
    try:
        spec = ResetSpec(spec)
    except ValueError:
        raise ResetError(f"unknown reset spec {spec!r}") from None
    targets = []
    for key in sorted(set(partitions)):
        topic, partition = key
        if key not in bounds:
            raise ResetError(f"group {group}: {topic}[{partition}] does not exist on the cluster")
        log_start, log_end = bounds[key]
        current = committed.get(key)
        if spec is ResetSpec.TO_EARLIEST:
            wanted = log_start
        elif spec is ResetSpec.TO_LATEST:
            wanted = log_end
        elif spec is ResetSpec.TO_CURRENT:
            wanted = current if current is not None else log_end
        elif spec is ResetSpec.TO_OFFSET:
            wanted = int(value)  # type: ignore[arg-type]
        elif spec is ResetSpec.SHIFT_BY:
            if current is None:
                raise ResetError(
                    f"group {group}: {topic}[{partition}] has no committed offset to shift"
                )
            wanted = current + int(value)  # type: ignore[arg-type]
        elif spec.is_at_time:
            found = (offsets_at_time or {}).get(key)
            wanted = log_end if found is None else found
        else:
            wanted = value[key]  # type: ignore[index]
        if spec is ResetSpec.TO_CURRENT and current is not None:
            new_offset, note = current, _outside(current, log_start, log_end)
        else:
            new_offset, note = clamp(wanted, log_start, log_end)
        targets.append(Target(group, topic, partition, current, new_offset, note))
    return targets


def scoped_partitions(
    scope: Mapping[str, tuple[int, ...] | None] | None,
    committed: Mapping[TopicPartitionKey, int],
    topic_partitions: Mapping[str, int],
) -> list[TopicPartitionKey]:
    """The partitions a reset covers. `scope` None means --all-topics: the partitions the
    group has committed offsets for (the stock tool's, not every partition of those topics);
    `--topic T` means all of T's partitions; `--topic T:0,1` those partitions."""
    if scope is None:
        return sorted(committed)
    out = []
    for topic, partitions in scope.items():
        if topic not in topic_partitions:
            raise ResetError(f"topic {topic} does not exist on the cluster")
        count = topic_partitions[topic]
        chosen = range(count) if partitions is None else partitions
        for p in chosen:
            if p >= count:
                raise ResetError(f"topic {topic} has {count} partitions; there is no partition {p}")
            out.append((topic, p))
    return sorted(out)
