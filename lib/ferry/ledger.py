"""The audit ledger: one Delta table shared by `migrate` and the `groups` verbs.

One row per run × group × partition, for dry runs too (`is_executed` false), so every plan
that was shown is on record next to every change that was made. A run that committed offsets
can be undone with `--rollback RUN_ID`: the previous offsets recorded here are written back,
and the rollback is itself a run in the ledger.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from datetime import datetime, timezone

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    BinaryType,
    BooleanType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from ferry import delta

LEDGER_SCHEMA = StructType(
    [
        StructField("run_id", StringType(), False),
        StructField("run_time", TimestampType(), False),
        StructField("action", StringType(), False),  # migrate, rollback, copy, reset, delete
        StructField("is_executed", BooleanType(), False),  # false: dry run
        StructField("cluster", StringType(), True),  # bootstrap servers of the cluster written
        StructField("group", StringType(), False),
        StructField("source_group", StringType(), True),
        StructField("source_topic", StringType(), True),
        StructField("source_partition", IntegerType(), True),
        StructField("source_offset", LongType(), True),
        StructField("topic", StringType(), True),  # the topic/partition whose offset is set
        StructField("partition", IntegerType(), True),
        StructField("previous_offset", LongType(), True),
        StructField("new_offset", LongType(), True),
        StructField("status", StringType(), True),
        StructField("is_committed", BooleanType(), False),
        StructField("anchor_kind", StringType(), True),
        StructField("anchor_offset", LongType(), True),
        StructField("anchor_timestamp", TimestampType(), True),
        StructField("anchor_sha256", BinaryType(), True),
        StructField("candidate_count", IntegerType(), True),
        StructField("message", StringType(), True),
    ]
)
LEDGER_COLUMNS = LEDGER_SCHEMA.fieldNames()


def new_run_id(action: str) -> str:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return f"{action}-{stamp}-{uuid.uuid4().hex[:6]}"


def ledger_rows_df(
    spark: SparkSession, rows: Iterable[Mapping], run_id: str, action: str, is_executed: bool
) -> DataFrame:
    """Rows (dicts with any subset of the ledger columns) as a DataFrame of the ledger schema."""
    now = datetime.now(timezone.utc)
    full = [
        {
            **{c: None for c in LEDGER_COLUMNS},
            "is_committed": False,
            **dict(r),
            "run_id": run_id,
            "run_time": now,
            "action": action,
            "is_executed": is_executed,
        }
        for r in rows
    ]
    return spark.createDataFrame([tuple(r[c] for c in LEDGER_COLUMNS) for r in full], LEDGER_SCHEMA)


def append(spark: SparkSession, ledger_df: DataFrame, path: str) -> str:
    """Append to the ledger; returns which Delta writer ran."""
    return delta.append(spark, ledger_df.select(*LEDGER_COLUMNS), path)


def read(spark: SparkSession, path: str) -> DataFrame:
    return delta.read(spark, path).select(*LEDGER_COLUMNS)


def filter_run_commits(ledger_df: DataFrame, run_id: str) -> DataFrame:
    """The rows of one run that actually changed a committed offset."""
    return ledger_df.filter((F.col("run_id") == run_id) & F.col("is_committed")).select(
        "group", "topic", "partition", "previous_offset", "new_offset", "action", "cluster"
    )
