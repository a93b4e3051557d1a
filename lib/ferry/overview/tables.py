"""The overview's data: load Ferry's Delta tables and shape them for plotting.

The `with_*`/`filter_*` functions are pure DataFrame transforms that aggregate on Spark, so a
history of thousands of groups arrives at the driver as a few hundred points per plotted
group; the functions named after a panel (`lag_over_time`, `audit_latest`, ...) collect one
panel's pandas frame from the loaded tables (None where a table is missing).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TYPE_CHECKING

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import LongType

from ferry import delta
from ferry.config import FerryConfig
from ferry.status import COMPARED_VERDICTS, AuditVerdict, GroupStatus, LagStatus
from ferry.write.ledger import PHASE_INTENT, PHASE_OUTCOME, PHASE_PLAN

if TYPE_CHECKING:  # matplotlib and pandas are only needed where plots are drawn
    import pandas as pd

# A group in a migrate run whose intent was recorded but not its outcome: the run stopped
# between the two, and whether the group was written is for `--rollback`/a read-back to say.
NO_OUTCOME = "NO_OUTCOME"
_PHASE_RANK = {PHASE_INTENT: 1, PHASE_PLAN: 2, PHASE_OUTCOME: 3}


@dataclass(frozen=True)
class OverviewPaths:
    ledger: str | None = None
    history: str | None = None
    status: str | None = None
    commits: str | None = None
    audit: str | None = None


def paths_from_config(cfg: FerryConfig) -> OverviewPaths:
    # `audit` is read where the config has that section (older configs and versions do not).
    audit = getattr(cfg, "audit", None)
    return OverviewPaths(
        ledger=cfg.ledger.path,
        history=cfg.history.path,
        status=cfg.history.status_path,
        commits=cfg.offsets.commits_path,
        audit=getattr(audit, "path", None),
    )


def load_tables(spark: SparkSession, paths: OverviewPaths) -> dict[str, DataFrame | None]:
    """Each table as a DataFrame, None where its path is unset or holds no Delta table yet."""
    out: dict[str, DataFrame | None] = {}
    for name in (f.name for f in fields(paths)):
        path = getattr(paths, name)
        out[name] = delta.read(spark, path) if path and delta.exists(path) else None
    return out


# -------------------------------------------------------------------------------- transforms


def with_group_lag_over_time(history_df: DataFrame) -> DataFrame:
    """Per cluster × group × snapshot: total lag, largest time lag, partitions."""
    return (
        history_df.groupBy("cluster", "group", "snapshot_time")
        .agg(
            F.sum("lag").alias("total_lag"),
            F.max("time_lag_ms").alias("max_time_lag_ms"),
            F.count(F.lit(1)).alias("partitions"),
        )
        .select("cluster", "group", "snapshot_time", "total_lag", "max_time_lag_ms", "partitions")
    )


def filter_top_groups(group_lag_df: DataFrame, top: int) -> DataFrame:
    """Keep the `top` groups with the highest total lag in their latest snapshot."""
    latest = Window.partitionBy("cluster", "group").orderBy(F.desc("snapshot_time"))
    ranked = (
        group_lag_df.withColumn("n", F.row_number().over(latest))
        .filter(F.col("n") == 1)
        .select("cluster", "group", F.coalesce("total_lag", F.lit(0)).alias("latest_lag"))
        .orderBy(F.desc("latest_lag"), "group")
        .limit(top)
    )
    return group_lag_df.join(ranked.select("cluster", "group"), ["cluster", "group"]).select(
        *group_lag_df.columns
    )


def with_group_status_timeline(status_df: DataFrame) -> DataFrame:
    """One row per cluster × group × evaluation: the group's status as of that evaluation."""
    return (
        status_df.groupBy("cluster", "group", "as_of", "evaluated_at")
        .agg(
            F.first("group_status").alias("group_status"),
            F.first("group_totallag").alias("total_lag"),
            F.sum(F.when(F.col("status") != LagStatus.OK.value, 1).otherwise(0)).alias(
                "unhealthy_partitions"
            ),
        )
        .select(
            "cluster",
            "group",
            "as_of",
            "evaluated_at",
            "group_status",
            "total_lag",
            "unhealthy_partitions",
        )
    )


def with_group_outcomes(ledger_df: DataFrame, last_runs: int) -> DataFrame:
    """Per migrate run (the `last_runs` newest) × group: the group's final outcome and the
    partitions it covers. The last phase recorded decides: an outcome row (what an executing
    run wrote: its `status`), else a plan row (a dry run's decision, or an executing run's
    decision not to write: the group status that opens its `message`), else an intent alone
    (`NO_OUTCOME`). Rows older than phases count as outcomes when committed."""
    runs = ledger_df.filter(F.col("action") == "migrate")
    newest = (
        runs.select("run_id", "run_time").distinct().orderBy(F.desc("run_time")).limit(last_runs)
    )
    is_old_commit = F.col("phase").isNull() & F.col("is_committed")
    phase = F.when(is_old_commit, F.lit(PHASE_OUTCOME)).otherwise(
        F.coalesce(F.col("phase"), F.lit(PHASE_PLAN))
    )
    rank = F.lit(0)
    for name, value in _PHASE_RANK.items():
        rank = F.when(phase == name, F.lit(value)).otherwise(rank)
    decided = F.regexp_extract(F.coalesce(F.col("message"), F.lit("")), r"^([A-Z_]+)(:|$)", 1)
    outcome = (
        F.when(is_old_commit, F.lit(GroupStatus.COMMITTED.value))
        .when(phase == PHASE_OUTCOME, F.col("status"))
        .when(phase == PHASE_INTENT, F.lit(NO_OUTCOME))
        .when(decided != "", decided)
        .otherwise(F.lit(GroupStatus.UNKNOWN.value))
    )
    per_phase = (
        runs.join(newest, ["run_id", "run_time"])
        .select(
            "run_id",
            "run_time",
            "is_executed",
            "group",
            rank.alias("phase_rank"),
            outcome.alias("outcome"),
            F.coalesce(F.col("row_time"), F.col("run_time")).alias("row_time"),
        )
        .groupBy("run_id", "run_time", "is_executed", "group", "phase_rank")
        .agg(
            F.max_by("outcome", "row_time").alias("outcome"),
            F.count(F.lit(1)).alias("partitions"),
        )
    )
    last_phase = Window.partitionBy("run_id", "group").orderBy(F.desc("phase_rank"))
    return (
        per_phase.withColumn("n", F.row_number().over(last_phase))
        .filter(F.col("n") == 1)
        .select("run_id", "run_time", "is_executed", "group", "outcome", "partitions")
    )


def with_run_outcomes(group_outcomes_df: DataFrame) -> DataFrame:
    """Per run × outcome: the groups with that final outcome and their partitions."""
    return (
        group_outcomes_df.groupBy("run_id", "run_time", "is_executed", "outcome")
        .agg(
            F.count(F.lit(1)).alias("groups"),
            F.sum("partitions").cast(LongType()).alias("partitions"),
        )
        .select("run_id", "run_time", "is_executed", "outcome", "groups", "partitions")
    )


def with_commit_rate(commits_df: DataFrame, bucket_seconds: int) -> DataFrame:
    """Offset commits per group per time bucket (deletions left out)."""
    bucket = F.window("commit_timestamp", f"{bucket_seconds} seconds")
    return (
        commits_df.filter(~F.col("is_deletion") & F.col("commit_timestamp").isNotNull())
        .groupBy("group", bucket.alias("bucket"))
        .agg(F.count(F.lit(1)).alias("commits"))
        .select(
            "group",
            F.col("bucket.start").alias("bucket_start"),
            F.col("bucket.end").alias("bucket_end"),
            "commits",
        )
    )


def with_audit_by_group(audit_df: DataFrame) -> DataFrame:
    """Per audit run × group: partitions per verdict and the records at stake. `difference` is
    committed − exact offset in records, its direction given by the verdict: BEHIND records
    would be delivered again, AHEAD records skipped — unless the group is live on the
    destination (its consumers moved on: expected, counted apart as `ahead_live`)."""
    verdict = F.col("verdict")
    records = F.abs(F.col("difference"))
    is_live = F.coalesce(F.col("is_live"), F.lit(False))

    def partitions(condition):  # noqa: ANN001, ANN202 - a Column in, a Column out
        return F.sum(F.when(condition, 1).otherwise(0)).cast(LongType())

    def total(condition):  # noqa: ANN001, ANN202
        return F.coalesce(F.sum(F.when(condition, records)), F.lit(0)).cast(LongType())

    compared = sorted(v.value for v in COMPARED_VERDICTS)
    return (
        audit_df.groupBy("run_id", "group")
        .agg(
            F.min("audited_at").alias("audited_at"),
            F.count(F.lit(1)).alias("partitions"),
            partitions(verdict == AuditVerdict.EXACT.value).alias("exact"),
            partitions(verdict == AuditVerdict.BEHIND.value).alias("behind"),
            partitions(verdict == AuditVerdict.AHEAD.value).alias("ahead"),
            partitions(verdict == AuditVerdict.NO_COMMIT.value).alias("no_commit"),
            # any other verdict is the plan's own unresolved status
            partitions(~verdict.isin(*compared) | verdict.isNull()).alias("unresolved"),
            total(verdict == AuditVerdict.BEHIND.value).alias("delivered_again"),
            total((verdict == AuditVerdict.AHEAD.value) & ~is_live).alias("skipped"),
            total((verdict == AuditVerdict.AHEAD.value) & is_live).alias("ahead_live"),
            F.max(is_live).alias("is_live"),
        )
        .select(
            "run_id",
            "audited_at",
            "group",
            "partitions",
            "exact",
            "behind",
            "ahead",
            "no_commit",
            "unresolved",
            "delivered_again",
            "skipped",
            "ahead_live",
            "is_live",
        )
    )


def filter_latest_audit(audit_by_group_df: DataFrame) -> DataFrame:
    """Each group's row from the newest audit run that covered it."""
    latest = Window.partitionBy("group").orderBy(F.desc("audited_at"), F.desc("run_id"))
    return (
        audit_by_group_df.withColumn("n", F.row_number().over(latest))
        .filter(F.col("n") == 1)
        .select(*audit_by_group_df.columns)
    )


def filter_top_audit_groups(audit_by_group_df: DataFrame, top: int) -> DataFrame:
    """Keep the `top` groups furthest from exact in their latest audit: records delivered
    again or skipped, then partitions unresolved or without a commit."""
    ranked = (
        filter_latest_audit(audit_by_group_df)
        .orderBy(
            F.desc(F.col("delivered_again") + F.col("skipped")),
            F.desc(F.col("unresolved") + F.col("no_commit")),
            "group",
        )
        .limit(top)
    )
    return audit_by_group_df.join(ranked.select("group"), ["group"]).select(
        *audit_by_group_df.columns
    )


def _collect(df: DataFrame, order_by: list[str]) -> pd.DataFrame:
    return df.orderBy(*order_by).toPandas()


# What each plot needs, from the loaded tables (None where the table is missing).


def lag_over_time(tables: dict[str, DataFrame | None], top: int) -> pd.DataFrame | None:
    history_df = tables.get("history")
    if history_df is None:
        return None
    top_df = filter_top_groups(with_group_lag_over_time(history_df), top)
    return _collect(top_df, ["cluster", "group", "snapshot_time"])


def status_timeline(tables: dict[str, DataFrame | None]) -> pd.DataFrame | None:
    status_df = tables.get("status")
    if status_df is None:
        return None
    return _collect(with_group_status_timeline(status_df), ["group", "as_of"])


def migration_outcomes(tables: dict[str, DataFrame | None], last_runs: int) -> pd.DataFrame | None:
    """Per run × final outcome: groups and partitions (the `last_runs` newest migrate runs)."""
    ledger_df = tables.get("ledger")
    if ledger_df is None:
        return None
    run_df = with_run_outcomes(with_group_outcomes(ledger_df, last_runs))
    return _collect(run_df, ["run_time", "outcome"])


def migration_groups(tables: dict[str, DataFrame | None], last_runs: int) -> pd.DataFrame | None:
    """Per run × group: its final outcome (the table under the chart)."""
    ledger_df = tables.get("ledger")
    if ledger_df is None:
        return None
    return _collect(with_group_outcomes(ledger_df, last_runs), ["run_time", "group"])


def commit_rate(tables: dict[str, DataFrame | None], bucket_seconds: int) -> pd.DataFrame | None:
    commits_df = tables.get("commits")
    if commits_df is None:
        return None
    return _collect(with_commit_rate(commits_df, bucket_seconds), ["group", "bucket_start"])


def audit_over_time(tables: dict[str, DataFrame | None], top: int) -> pd.DataFrame | None:
    """Per audit run × group (the `top` groups furthest from exact): verdicts and records."""
    audit_df = tables.get("audit")
    if audit_df is None:
        return None
    top_df = filter_top_audit_groups(with_audit_by_group(audit_df), top)
    return _collect(top_df, ["group", "audited_at"])


def audit_latest(tables: dict[str, DataFrame | None]) -> pd.DataFrame | None:
    """Every group's latest audit: what stands between it and an exact cutover now."""
    audit_df = tables.get("audit")
    if audit_df is None:
        return None
    latest_df = filter_latest_audit(with_audit_by_group(audit_df))
    return _collect(latest_df, ["group"])
