"""Lag history: the Delta tables behind `lag-snapshot` and `lag-status`, and Burrow's rules
(`ferry.lag.rules`) evaluated over them with Spark.

`lag-snapshot` appends one `HISTORY_SCHEMA` row per group × topic × partition per run: the
committed offset, log end offset, lag and time lag from `ferry.groups`, plus the group's state.
`lag-status` keeps each partition's last N snapshots (a window function), turns them into a
Burrow window and evaluates every group in one grouped pass (`applyInArrow`, after the one
shuffle of the whole evaluation) that calls
`ferry.lag.rules.partition_status` / `group_status` — the rules live only there. Its result, one
`STATUS_SCHEMA` row per group × partition carrying the group's status too, is what gets printed
and optionally appended to `history.status_path`.

Commit times. Burrow judges a window of *commits* stamped with their commit time; Ferry only
sees snapshots of committed offsets (OffsetFetch gives no commit time). Each snapshot is one
window entry (the window is the last N snapshots), and its timestamp — the time the offset is
taken to have been committed — is:

- the snapshot time when the group is consuming that partition (`is_consuming`: the group is
  in an active state and the partition is assigned to a member, or the broker reports no
  assignments at all): a live consumer keeps committing, even the same offset;
- otherwise the offset carries its last known commit time forward: the latest snapshot in the
  current run of this offset value (consecutive snapshots with the same offset, over the whole
  history, not just the window) in which the group was consuming, else the run's first
  snapshot — when the offset was first seen at that value.

So a progressing consumer is OK (or WARN), an active consumer stuck at one offset is STALL
(new entry each snapshot, same offset), and a stopped consumer (inactive, offset unchanged,
lag > 0) is STOP: its entries all keep the old time, so "now − last commit > last − first
commit" holds. An active consumer that holds a partition without committing cannot be told
apart from one committing the same offset, so it is STALL, never STOP. Pick window × snapshot
interval longer than the longest pause between commits of a healthy *inactive* consumer (a
batch job that commits and leaves), or it shows STOP between runs — as Burrow's window of
commits would for a consumer that commits less often than its window spans.

Now. The rules' "now" is each group's newest snapshot time: status is "as of the group's last
snapshot", so a late or dead scheduler never turns into STOP everywhere, and a group that
disappeared keeps its last status (`as_of` shows how old it is). `now_ms` (`lag-status --now`)
instead evaluates every group as of that time, ignoring later snapshots.

Partitions are evaluated if they are in their group's newest snapshot (offsets that were
deleted or expired drop out, as in Burrow). Broker offsets are the log end offsets of the same
snapshots and current lag is the newest snapshot's lag, so Burrow's "caught up recently" rule
holds off a STOP while any log end in the window is at or below the last committed offset.
"""

from __future__ import annotations

import socket
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import (
    BooleanType,
    DoubleType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from ferry import delta
from ferry.lag.rules import group_status, partition_complete, partition_status
from ferry.status import ACTIVE_STATES

HISTORY_SCHEMA = StructType(
    [
        StructField("snapshot_time", TimestampType(), False),  # one per lag-snapshot run
        StructField("cluster", StringType(), False),  # bootstrap servers
        StructField("group", StringType(), False),
        StructField("group_state", StringType(), True),  # EMPTY, STABLE, ... (DescribeGroups)
        StructField("is_consuming", BooleanType(), False),  # active and assigned: committing
        StructField("topic", StringType(), False),
        StructField("partition", IntegerType(), False),
        StructField("committed_offset", LongType(), True),  # null: assigned, never committed
        StructField("log_start_offset", LongType(), True),
        StructField("log_end_offset", LongType(), True),
        StructField("lag", LongType(), True),  # log end − committed
        StructField("time_lag_ms", LongType(), True),  # age of the next unread record; 0 caught up
        StructField("member_id", StringType(), True),
        StructField("client_id", StringType(), True),
        StructField("host", StringType(), True),
    ]
)
HISTORY_COLUMNS = HISTORY_SCHEMA.fieldNames()

STATUS_SCHEMA = StructType(
    [
        StructField("evaluated_at", TimestampType(), False),  # when lag-status ran
        StructField("as_of", TimestampType(), False),  # the rules' "now"
        StructField("cluster", StringType(), False),
        StructField("group", StringType(), False),
        StructField("topic", StringType(), False),
        StructField("partition", IntegerType(), False),
        StructField("status", StringType(), False),  # OK, WARN, STOP, STALL, REWIND
        StructField("complete", DoubleType(), False),  # filled share of the window's slots
        StructField("current_lag", LongType(), False),
        # Oldest and newest window entries: offset, inferred commit time, snapshot time, lag.
        StructField("start_offset", LongType(), True),
        StructField("start_committed_at", TimestampType(), True),
        StructField("start_observed_at", TimestampType(), True),
        StructField("start_lag", LongType(), True),
        StructField("end_offset", LongType(), True),
        StructField("end_committed_at", TimestampType(), True),
        StructField("end_observed_at", TimestampType(), True),
        StructField("end_lag", LongType(), True),
        StructField("owner", StringType(), True),  # the member's host, as Burrow's owner
        StructField("client_id", StringType(), True),
        StructField("window", IntegerType(), False),
        StructField("allowed_lag", LongType(), False),
        StructField("group_status", StringType(), False),  # OK, WARN, ERR
        StructField("group_complete", DoubleType(), False),
        StructField("group_totallag", LongType(), False),
        StructField("group_partition_count", IntegerType(), False),
        StructField("is_maxlag", BooleanType(), False),  # the group's Burrow `maxlag` partition
    ]
)
STATUS_COLUMNS = STATUS_SCHEMA.fieldNames()

_KEY = ("cluster", "group", "topic", "partition")

# What the grouped evaluation returns: STATUS_SCHEMA with times as epoch ms and without the
# run-wide constants, which are added afterwards in Spark.
_EVAL_SCHEMA = StructType(
    [
        StructField("cluster", StringType(), False),
        StructField("group", StringType(), False),
        StructField("topic", StringType(), False),
        StructField("partition", IntegerType(), False),
        StructField("as_of_ms", LongType(), False),
        StructField("status", StringType(), False),
        StructField("complete", DoubleType(), False),
        StructField("current_lag", LongType(), False),
        *(
            StructField(f"{end}_{name}", LongType(), True)
            for end in ("start", "end")
            for name in ("offset", "committed_ms", "observed_ms", "lag")
        ),
        StructField("owner", StringType(), True),
        StructField("client_id", StringType(), True),
        StructField("group_status", StringType(), False),
        StructField("group_complete", DoubleType(), False),
        StructField("group_totallag", LongType(), False),
        StructField("group_partition_count", IntegerType(), False),
        StructField("is_maxlag", BooleanType(), False),
    ]
)


# --------------------------------------------------------------------------------- snapshot


def with_snapshot_columns(describe_df: DataFrame, snapshot_ms: int, cluster: str) -> DataFrame:
    """`ferry.groups.with_lag` output as history rows of one snapshot taken at `snapshot_ms`.

    `is_consuming` needs the whole group: brokers that report no member assignments (the
    local test broker) leave only the group state to go by.
    """
    is_assigned = F.col("member_id").isNotNull()
    has_assignments = F.max(is_assigned.cast(IntegerType())).over(Window.partitionBy("group")) == 1
    is_active = F.coalesce(
        F.col("group_state").isin(*sorted(s.value for s in ACTIVE_STATES)), F.lit(False)
    )
    is_consuming = is_active & (is_assigned | ~has_assignments)
    return describe_df.select(
        F.timestamp_millis(F.lit(snapshot_ms)).alias("snapshot_time"),
        F.lit(cluster).alias("cluster"),
        "group",
        "group_state",
        F.coalesce(is_consuming, F.lit(False)).alias("is_consuming"),
        "topic",
        "partition",
        "committed_offset",
        "log_start_offset",
        "log_end_offset",
        "lag",
        "time_lag_ms",
        "member_id",
        "client_id",
        "host",
    ).to(HISTORY_SCHEMA)


def append_history(spark: SparkSession, history_df: DataFrame, path: str) -> str:
    """Append snapshot rows to the history table; returns which Delta writer ran."""
    return delta.append(spark, history_df.select(*HISTORY_COLUMNS), path)


def read_history(spark: SparkSession, path: str) -> DataFrame:
    return delta.read(spark, path).select(*HISTORY_COLUMNS)


def append_status(spark: SparkSession, status_df: DataFrame, path: str) -> str:
    """Append evaluated rows to the status table; returns which Delta writer ran."""
    return delta.append(spark, status_df.select(*STATUS_COLUMNS), path)


# ------------------------------------------------------------------------------- evaluation


def filter_history(
    history_df: DataFrame, group_pattern: str | None = None, as_of_ms: int | None = None
) -> DataFrame:
    """Rows of groups whose id fully matches the regex, taken at or before `as_of_ms`."""
    out = history_df
    if group_pattern is not None:
        out = out.filter(F.col("group").rlike(f"^(?:{group_pattern})$"))
    if as_of_ms is not None:
        out = out.filter(F.col("snapshot_time") <= F.timestamp_millis(F.lit(as_of_ms)))
    return out.select(*HISTORY_COLUMNS)


def with_entry_time(history_df: DataFrame) -> DataFrame:
    """Adds `snapshot_ms` and `entry_ms`, the inferred commit time of each row's offset (see
    the module docstring; null when nothing is committed).

    Runs of one offset value are numbered by a running count of changes, so this must see the
    partition's whole history, not only the window.
    """
    by_time = Window.partitionBy(*_KEY).orderBy("snapshot_time")
    so_far = by_time.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    offset = F.col("committed_offset")
    is_new_value = ~offset.eqNullSafe(F.lag(offset).over(by_time))
    runs_df = history_df.withColumn("snapshot_ms", F.unix_millis("snapshot_time")).withColumn(
        "_run", F.sum(is_new_value.cast(LongType())).over(so_far)
    )
    in_run = (
        Window.partitionBy(*_KEY, "_run")
        .orderBy("snapshot_time")
        .rowsBetween(Window.unboundedPreceding, Window.currentRow)
    )
    last_consuming = F.max(F.when(F.col("is_consuming"), F.col("snapshot_ms"))).over(in_run)
    first_seen = F.min("snapshot_ms").over(in_run)
    entry_ms = F.when(offset.isNotNull(), F.coalesce(last_consuming, first_seen))
    return runs_df.select(*HISTORY_COLUMNS, "snapshot_ms", entry_ms.alias("entry_ms"))


def filter_window(entries_df: DataFrame, window: int) -> DataFrame:
    """Each partition's last `window` snapshots."""
    newest_first = Window.partitionBy(*_KEY).orderBy(F.col("snapshot_time").desc())
    return (
        entries_df.withColumn("_n", F.row_number().over(newest_first))
        .filter(F.col("_n") <= window)
        .drop("_n")
    )


def evaluate(
    window_df: DataFrame,
    window: int,
    allowed_lag: int,
    evaluated_ms: int,
    now_ms: int | None = None,
) -> DataFrame:
    """Burrow status of every group × partition in `window_df` (output of `filter_window`),
    one grouped pass per group; `now_ms` None: each group's newest snapshot time."""
    from pyspark.sql.pandas.types import to_arrow_schema

    arrow_schema = to_arrow_schema(_EVAL_SCHEMA)
    names = _EVAL_SCHEMA.fieldNames()

    # Arrow rather than pandas: nullable offsets stay Python ints instead of NaN floats.
    def evaluate_arrow(table):  # noqa: ANN001, ANN202 - pyarrow.Table in and out
        import pyarrow as pa

        rows = evaluate_group(table.to_pylist(), window, allowed_lag, now_ms)
        return pa.Table.from_pylist([{n: r[n] for n in names} for r in rows], arrow_schema)

    inputs_df = window_df.select(
        *_KEY,
        "snapshot_ms",
        "entry_ms",
        "committed_offset",
        "log_end_offset",
        "lag",
        "host",
        "client_id",
    )
    eval_df = inputs_df.groupBy("cluster", "group").applyInArrow(evaluate_arrow, _EVAL_SCHEMA)

    def at(name: str):  # noqa: ANN202
        return F.timestamp_millis(F.col(f"{name}_ms")).alias(f"{name}_at")

    return eval_df.select(
        F.timestamp_millis(F.lit(evaluated_ms)).alias("evaluated_at"),
        F.timestamp_millis("as_of_ms").alias("as_of"),
        *_KEY,
        "status",
        "complete",
        "current_lag",
        "start_offset",
        at("start_committed"),
        at("start_observed"),
        "start_lag",
        "end_offset",
        at("end_committed"),
        at("end_observed"),
        "end_lag",
        "owner",
        "client_id",
        F.lit(window).cast(IntegerType()).alias("window"),
        F.lit(allowed_lag).cast(LongType()).alias("allowed_lag"),
        "group_status",
        "group_complete",
        "group_totallag",
        "group_partition_count",
        "is_maxlag",
    ).to(STATUS_SCHEMA)


def evaluate_history(
    history_df: DataFrame,
    window: int,
    allowed_lag: int,
    evaluated_ms: int,
    now_ms: int | None = None,
) -> DataFrame:
    """History rows (already filtered) → status rows: entry times, window, grouped rules.

    One shuffle: rows are hashed by group once, which already places each partition's rows
    together for the windows (keyed by group × topic × partition) and each group's rows
    together for the grouped evaluation; otherwise each would shuffle the history again.
    """
    by_group_df = history_df.repartition("cluster", "group")
    window_df = filter_window(with_entry_time(by_group_df), window)
    return evaluate(window_df, window, allowed_lag, evaluated_ms, now_ms)


def evaluate_group(
    snapshots: Sequence[Mapping[str, Any]],
    window: int,
    allowed_lag: int,
    now_ms: int | None = None,
) -> list[dict]:
    """One group's status rows (times in ms) from its windowed snapshot rows.

    Each row needs: cluster, group, topic, partition, snapshot_ms, entry_ms,
    committed_offset, log_end_offset, lag, host, client_id. Partitions missing from the group's
    newest snapshot are left out; fewer than `window` snapshots leave leading empty slots.
    """
    if not snapshots:
        return []
    newest = max(r["snapshot_ms"] for r in snapshots)
    now = newest if now_ms is None else now_ms
    by_partition: dict[tuple[str, int], list[Mapping[str, Any]]] = {}
    for row in snapshots:
        by_partition.setdefault((row["topic"], row["partition"]), []).append(row)
    partitions = []
    for (topic, partition), rows in sorted(by_partition.items()):
        rows = sorted(rows, key=lambda r: r["snapshot_ms"])[-window:]
        if rows[-1]["snapshot_ms"] != newest:
            continue
        slots: list[dict | None] = [None] * (window - len(rows))
        slots += [_entry(r) for r in rows]
        brokers = [r["log_end_offset"] for r in rows if r["log_end_offset"] is not None]
        current_lag = max(rows[-1]["lag"] or 0, 0)
        filled = [s for s in slots if s is not None]
        partitions.append(
            {
                "topic": topic,
                "partition": partition,
                "owner": rows[-1]["host"],
                "client_id": rows[-1]["client_id"],
                "status": partition_status(slots, brokers, now, allowed_lag, current_lag),
                "start": filled[0] if filled else None,
                "end": filled[-1] if filled else None,
                "current_lag": current_lag,
                "complete": partition_complete(slots),
            }
        )
    result = group_status(partitions)
    first = snapshots[0]
    out = []
    for part in result["partitions"]:
        row = {
            "cluster": first["cluster"],
            "group": first["group"],
            "topic": part["topic"],
            "partition": part["partition"],
            "as_of_ms": now,
            "status": part["status"],
            "complete": float(part["complete"]),
            "current_lag": part["current_lag"],
            "owner": part["owner"],
            "client_id": part["client_id"],
            "group_status": result["status"],
            "group_complete": float(result["complete"]),
            "group_totallag": result["totallag"],
            "group_partition_count": result["partition_count"],
            "is_maxlag": part is result["maxlag"],
        }
        for end in ("start", "end"):
            entry = part[end] or {}
            row[f"{end}_offset"] = entry.get("offset")
            row[f"{end}_committed_ms"] = entry.get("timestamp")
            row[f"{end}_observed_ms"] = entry.get("observed_at")
            row[f"{end}_lag"] = entry.get("lag")
        out.append(row)
    return out


def _entry(row: Mapping[str, Any]) -> dict | None:
    if row["committed_offset"] is None:
        return None
    return {
        "offset": row["committed_offset"],
        "timestamp": row["entry_ms"],
        "lag": row["lag"],
        "observed_at": row["snapshot_ms"],
    }


# ----------------------------------------------------------------------------------- output


def status_rows(status_table: Any) -> list[dict]:
    """A collected `pyarrow.Table` of status rows as dicts ordered by cluster, group, topic and
    partition, times as naive local datetimes exactly as `DataFrame.collect()` gives them —
    without pickling a Row per partition, and column by column (pyarrow makes time-zone-aware
    datetimes one at a time, several times slower)."""
    import pyarrow as pa

    names = status_table.column_names
    columns = []
    for name in names:
        column = status_table.column(name)
        if pa.types.is_timestamp(column.type):
            micros = column.cast(pa.int64()).to_pylist()
            columns.append([None if us is None else _local_datetime(us) for us in micros])
        else:
            columns.append(column.to_pylist())
    rows = [dict(zip(names, values, strict=True)) for values in zip(*columns, strict=True)]
    return sorted(rows, key=lambda r: (r["cluster"], r["group"], r["topic"], r["partition"]))


def _local_datetime(micros: int) -> datetime:
    # What pyspark's TimestampType.fromInternal does for collect().
    return datetime.fromtimestamp(micros // 1_000_000).replace(microsecond=micros % 1_000_000)


def burrow_responses(
    status_rows: Iterable[Mapping[str, Any]], show_all: bool = False, host: str | None = None
) -> list[dict]:
    """One Burrow `/v3/kafka/(cluster)/consumer/(group)/status` answer per group, from status
    rows (STATUS_SCHEMA dicts, times as datetimes or epoch ms). Like Burrow, `partitions`
    lists only partitions that are not OK unless `show_all` (Burrow's `/lag` endpoint)."""
    host = host if host is not None else socket.gethostname()
    endpoint = "lag" if show_all else "status"
    groups: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for row in status_rows:
        groups.setdefault((row["cluster"], row["group"]), []).append(row)
    out = []
    for (cluster, group), rows in sorted(groups.items()):
        rows = sorted(rows, key=lambda r: (r["topic"], r["partition"]))
        parts = [_burrow_partition(r) for r in rows]
        maxlag = next((p for p, r in zip(parts, rows, strict=True) if r["is_maxlag"]), None)
        first = rows[0]
        out.append(
            {
                "error": False,
                "message": "consumer status returned",
                "status": {
                    "cluster": cluster,
                    "group": group,
                    "status": first["group_status"],
                    "complete": first["group_complete"],
                    "partitions": [p for p in parts if show_all or p["status"] != "OK"],
                    "partition_count": first["group_partition_count"],
                    "maxlag": maxlag,
                    "totallag": first["group_totallag"],
                },
                "request": {
                    "url": f"/v3/kafka/{cluster}/consumer/{group}/{endpoint}",
                    "host": host,
                },
            }
        )
    return out


def _burrow_partition(row: Mapping[str, Any]) -> dict:
    def offset(end: str) -> dict | None:
        if row[f"{end}_offset"] is None:
            return None
        return {
            "offset": row[f"{end}_offset"],
            "timestamp": _ms(row[f"{end}_committed_at"]),
            "observedAt": _ms(row[f"{end}_observed_at"]),
            "lag": row[f"{end}_lag"],
        }

    return {
        "topic": row["topic"],
        "partition": row["partition"],
        "owner": row["owner"] or "",
        "client_id": row["client_id"] or "",
        "status": row["status"],
        "start": offset("start"),
        "end": offset("end"),
        "current_lag": row["current_lag"],
        "complete": row["complete"],
    }


def _ms(value: datetime | int | None) -> int | None:
    if value is None or isinstance(value, int):
        return value
    # Spark hands out naive datetimes in the local zone; .timestamp() reads them back the same.
    return round(value.timestamp() * 1000)
