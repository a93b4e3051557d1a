"""Burrow's rules (`ferry.lag.rules`) evaluated over the lag history with Spark: each
partition's last N snapshots become a Burrow window, and every group is evaluated in one
grouped pass (`applyInArrow`, after the one shuffle of the whole evaluation) that calls
`ferry.lag.rules.partition_status` / `group_status` — the rules live only there. The result is
one `ferry.lag.history.STATUS_SCHEMA` row per group × partition carrying the group's status too.

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

from collections.abc import Mapping, Sequence
from typing import Any

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.types import (
    BooleanType,
    DoubleType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from ferry.lag.history import HISTORY_COLUMNS, STATUS_SCHEMA
from ferry.lag.rules import group_status, partition_complete, partition_status

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
