"""The audit table: every audit run's rows appended to the Delta table at `audit.path`, so a
team can watch the numbers shrink over a cutover (the overview notebook charts them).

`AUDIT_SCHEMA` is a contract: its first twelve columns keep their names, types and order;
new columns are only ever added at the end (Delta appends merge them into older tables, whose
rows read them as null).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime

from pyspark.sql import SparkSession
from pyspark.sql.types import (
    BooleanType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from ferry import delta
from ferry.errors import FerryError, one_line

AUDIT_SCHEMA = StructType(
    [
        StructField("run_id", StringType(), False),
        StructField("audited_at", TimestampType(), False),
        StructField("group", StringType(), False),
        StructField("topic", StringType(), False),
        StructField("partition", IntegerType(), True),
        StructField("committed_offset", LongType(), True),
        StructField("exact_offset", LongType(), True),
        StructField("difference", LongType(), True),
        StructField("verdict", StringType(), False),
        StructField("is_live", BooleanType(), False),
        StructField("group_state", StringType(), False),
        StructField("note", StringType(), True),
        # added after the contract's twelve
        StructField("is_counted", BooleanType(), True),
        StructField("members", IntegerType(), True),
        StructField("source_state", StringType(), True),
    ]
)


def table_rows(rows: Sequence[Mapping], run_id: str, audited_at: datetime) -> list[dict]:
    """Audit rows as table rows: the run's id and time on each, enums as their names."""
    return [
        {
            **{f.name: r.get(f.name) for f in AUDIT_SCHEMA.fields},
            "run_id": run_id,
            "audited_at": audited_at,
            "verdict": str(r["verdict"]),
            "group_state": str(r["group_state"]),
            "source_state": None if r.get("source_state") is None else str(r["source_state"]),
        }
        for r in rows
    ]


def append(
    spark: SparkSession, path: str, rows: Sequence[Mapping], run_id: str, audited_at: datetime
) -> str:
    """Append one run's rows in one commit; returns the writer that ran (delta-spark or
    deltalake). A failure is one FerryError naming the table."""
    try:
        return delta.append_rows(
            spark,
            table_rows(rows, run_id, audited_at),
            AUDIT_SCHEMA,
            path,
            {"run_id": run_id, "action": "audit"},
        )
    except Exception as exc:  # noqa: BLE001 - any storage failure is the same to the user
        raise FerryError(f"cannot append to the audit table {path}: {one_line(exc)}") from exc
