"""Lag history: the Delta tables behind `lag-snapshot` and `lag-status`.

`lag-snapshot` appends one `HISTORY_SCHEMA` row per group × topic × partition per run: the
committed offset, log end offset, lag and time lag from `ferry.groups`, plus the group's state
and whether it is consuming the partition. `lag-status` reads them back (`read_history`,
`filter_history`), evaluates them (`ferry.lag.evaluation`) into one `STATUS_SCHEMA` row per
group × partition, and optionally appends those to `history.status_path`.
"""

from __future__ import annotations

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


# ------------------------------------------------------------------------------- reading back


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
