"""`lag-status` output: the partitions that are not OK (all with --all-partitions) and one row
per group as tables or CSV, or Burrow's HTTP answers as JSON (`ferry.lag.burrow`); and the
closing tally. Plain functions over the evaluated status rows: no Spark here."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from ferry.lag import burrow
from ferry.lag.history import STATUS_COLUMNS
from ferry.output import emit, emit_json
from ferry.status import GROUP_LAG_STATUSES, LagStatus

PARTITION_COLUMNS = [
    "group",
    "topic",
    "partition",
    "status",
    "current_lag",
    "complete",
    "start_offset",
    "end_offset",
    "end_committed_at",
    "owner",
]
GROUP_COLUMNS = [
    "cluster",
    "group",
    "status",
    "complete",
    "partition_count",
    "totallag",
    "maxlag",
    "as_of",
]


def group_rows(rows: Sequence[Mapping[str, Any]]) -> list[dict]:
    """One output row per group from its status rows (which all carry the group's columns)."""
    out: dict[tuple[str, str], dict] = {}
    for row in rows:
        key = (row["cluster"], row["group"])
        if key not in out:
            out[key] = {
                "cluster": row["cluster"],
                "group": row["group"],
                "status": row["group_status"],
                "complete": row["group_complete"],
                "partition_count": row["group_partition_count"],
                "totallag": row["group_totallag"],
                "maxlag": None,
                "as_of": row["as_of"],
            }
        if row["is_maxlag"]:
            out[key]["maxlag"] = f"{row['topic']}[{row['partition']}]"
    return list(out.values())


def emit_status(rows: Sequence[Mapping[str, Any]], fmt: str, all_partitions: bool) -> str:
    """The status on stdout in `fmt`; returns the tally, e.g. `3 groups evaluated (2 OK, ...)`."""
    shown = [r for r in rows if all_partitions or r["status"] != LagStatus.OK]
    groups = group_rows(rows)
    if fmt == "json":
        emit_json(burrow.burrow_responses(rows, all_partitions))
    elif fmt == "csv":
        emit(shown, STATUS_COLUMNS, "csv")
    else:
        emit(shown, PARTITION_COLUMNS, "table")
        print()
        emit(groups, GROUP_COLUMNS, "table")
    counts = Counter(g["status"] for g in groups)
    tally = ", ".join(f"{counts[s]} {s}" for s in GROUP_LAG_STATUSES)
    return f"{len(groups)} groups evaluated ({tally})"
