"""What `notebooks/ferry_overview.ipynb` shows, as functions: load Ferry's Delta tables, shape
them for plotting, and draw the plots. The notebook only calls these.

Tables (any may be missing; a missing one is a panel saying so, never an error):
- the migration ledger (`ledger.path`, `ferry.write.ledger.LEDGER_SCHEMA`);
- the lag history (`history.path`, `ferry.lag.history.HISTORY_SCHEMA`) and the evaluated
  statuses (`history.status_path`, `ferry.lag.history.STATUS_SCHEMA`);
- the decoded offset commits (`offsets.commits_path`, `ferry.offsets_topic.OFFSET_COMMITS_SCHEMA`).

The `with_*` functions are pure DataFrame transforms that aggregate on Spark, so a history of
thousands of groups arrives at the driver as a few hundred points per plotted group; `plot_*`
take the collected pandas frames and return a matplotlib Figure. Plots show the `top` groups
by their latest total lag (or by rows, for commits) so they stay readable.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from ferry import delta
from ferry.config import FerryConfig

if TYPE_CHECKING:  # matplotlib and pandas are only needed where plots are drawn
    import pandas as pd
    from matplotlib.figure import Figure

STATUS_COLOURS = {
    "OK": "#2e7d32",
    "WARN": "#f9a825",
    "ERR": "#c62828",
    "STOP": "#c62828",
    "STALL": "#6a1b9a",
    "REWIND": "#1565c0",
}
# Ledger statuses of a migrate run, resolved ones first.
MIGRATE_STATUSES = (
    "MATCHED",
    "MATCHED_NEXT",
    "EMPTY",
    "AMBIGUOUS",
    "INCONSISTENT",
    "PENDING",
    "NOT_FOUND",
    "NO_DESTINATION",
    "REFUSED",
)


@dataclass(frozen=True)
class OverviewPaths:
    ledger: str | None = None
    history: str | None = None
    status: str | None = None
    commits: str | None = None


def paths_from_config(cfg: FerryConfig) -> OverviewPaths:
    return OverviewPaths(
        ledger=cfg.ledger.path,
        history=cfg.history.path,
        status=cfg.history.status_path,
        commits=cfg.offsets.commits_path,
    )


def load_tables(spark: SparkSession, paths: OverviewPaths) -> dict[str, DataFrame | None]:
    """Each table as a DataFrame, None where its path is unset or holds no Delta table yet."""
    out: dict[str, DataFrame | None] = {}
    for name in ("ledger", "history", "status", "commits"):
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
            F.sum(F.when(F.col("status") != "OK", 1).otherwise(0)).alias("unhealthy_partitions"),
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


def with_migration_outcomes(ledger_df: DataFrame, last_runs: int) -> DataFrame:
    """Per migrate run (the `last_runs` newest): partitions per status, groups committed.
    Intent rows are left out: each partition's decision is its plan or outcome row."""
    runs = ledger_df.filter(F.col("action") == "migrate")
    if "phase" in ledger_df.columns:
        runs = runs.filter(F.col("phase").isNull() | (F.col("phase") != "intent"))
    newest = (
        runs.select("run_id", "run_time").distinct().orderBy(F.desc("run_time")).limit(last_runs)
    )
    per_status = (
        runs.join(newest, ["run_id", "run_time"])
        .groupBy("run_id", "run_time", "is_executed", "status")
        .agg(
            F.count(F.lit(1)).alias("partitions"),
            F.countDistinct(F.when(F.col("is_committed"), F.col("group"))).alias(
                "committed_groups"
            ),
            F.countDistinct("group").alias("groups"),
        )
    )
    return per_status.select(
        "run_id", "run_time", "is_executed", "status", "partitions", "groups", "committed_groups"
    )


def with_commit_rate(commits_df: DataFrame, bucket_seconds: int) -> DataFrame:
    """Offset commits per group per time bucket (deletions left out)."""
    bucket = F.window("commit_timestamp", f"{bucket_seconds} seconds")
    return (
        commits_df.filter(~F.col("is_deletion") & F.col("commit_timestamp").isNotNull())
        .groupBy("group", bucket.alias("bucket"))
        .agg(F.count(F.lit(1)).alias("commits"))
        .select("group", F.col("bucket.start").alias("bucket_start"), "commits")
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
    ledger_df = tables.get("ledger")
    if ledger_df is None:
        return None
    return _collect(with_migration_outcomes(ledger_df, last_runs), ["run_time", "status"])


def commit_rate(
    tables: dict[str, DataFrame | None], bucket_seconds: int
) -> pd.DataFrame | None:
    commits_df = tables.get("commits")
    if commits_df is None:
        return None
    return _collect(with_commit_rate(commits_df, bucket_seconds), ["group", "bucket_start"])


# ------------------------------------------------------------------------------------ plots


def _empty(title: str, why: str) -> Figure:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 1.6))
    ax.set_axis_off()
    ax.set_title(title)
    ax.text(0.5, 0.4, why, ha="center", va="center", transform=ax.transAxes, color="#555555")
    return fig


def plot_lag(group_lag_pdf: pd.DataFrame | None) -> Figure:
    """Total lag and largest time lag per group over time (two panels, shared time axis)."""
    import matplotlib.pyplot as plt

    title = "Lag per group"
    if group_lag_pdf is None or group_lag_pdf.empty:
        return _empty(title, "no lag history yet: run lag-snapshot (history.path)")
    fig, (lag_ax, time_ax) = plt.subplots(2, 1, figsize=(10, 6), sharex=True)
    for (cluster, group), rows in group_lag_pdf.groupby(["cluster", "group"], sort=True):
        label = group if group_lag_pdf["cluster"].nunique() == 1 else f"{group} ({cluster})"
        lag_ax.plot(rows["snapshot_time"], rows["total_lag"], marker="o", label=label)
        time_ax.plot(rows["snapshot_time"], rows["max_time_lag_ms"] / 1000, marker="o")
    lag_ax.set_title(title)
    lag_ax.set_ylabel("records behind")
    time_ax.set_ylabel("time lag (s)")
    time_ax.set_xlabel("snapshot time (UTC)")
    lag_ax.legend(loc="upper left", fontsize="small", ncol=2)
    fig.autofmt_xdate()
    fig.tight_layout()
    return fig


def plot_status_timeline(timeline_pdf: pd.DataFrame | None) -> Figure:
    """One row per group, one mark per evaluation, coloured by Burrow group status."""
    import matplotlib.pyplot as plt

    title = "Group health (Burrow rules)"
    if timeline_pdf is None or timeline_pdf.empty:
        return _empty(title, "no evaluations yet: run lag-status (history.status_path)")
    groups = sorted(timeline_pdf["group"].unique())
    fig, ax = plt.subplots(figsize=(10, 1 + 0.45 * len(groups)))
    rows = {g: i for i, g in enumerate(groups)}
    for status, part in timeline_pdf.groupby("group_status"):
        ax.scatter(
            part["as_of"],
            part["group"].map(rows),
            color=STATUS_COLOURS.get(status, "#777777"),
            marker="s",
            s=120,
            label=status,
        )
    ax.set_yticks(range(len(groups)), groups)
    ax.set_ylim(-0.7, len(groups) - 0.3)
    ax.set_title(title)
    ax.set_xlabel("as of (UTC)")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
    fig.autofmt_xdate()
    fig.tight_layout()
    return fig


def plot_migrations(outcomes_pdf: pd.DataFrame | None) -> Figure:
    """Partitions per status for the last migrate runs (stacked), groups committed above."""
    import matplotlib.pyplot as plt

    title = "Last migrations"
    if outcomes_pdf is None or outcomes_pdf.empty:
        return _empty(title, "no migrate runs in the ledger yet (ledger.path)")
    runs = outcomes_pdf.drop_duplicates("run_id").sort_values("run_time")
    labels = [
        f"{r.run_time:%m-%d %H:%M}\n{'execute' if r.is_executed else 'dry run'}"
        for r in runs.itertuples()
    ]
    counts = outcomes_pdf.pivot_table(
        index="run_id", columns="status", values="partitions", aggfunc="sum", fill_value=0
    ).reindex(runs["run_id"])
    ordered = [s for s in MIGRATE_STATUSES if s in counts.columns]
    ordered += [s for s in counts.columns if s not in ordered]
    fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(runs)), 4))
    bottom = [0] * len(runs)
    palette = plt.get_cmap("tab10")
    for i, status in enumerate(ordered):
        values = counts[status].tolist()
        ax.bar(range(len(runs)), values, bottom=bottom, label=status, color=palette(i % 10))
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    committed = outcomes_pdf.groupby("run_id")["committed_groups"].max().reindex(runs["run_id"])
    groups = outcomes_pdf.groupby("run_id")["groups"].max().reindex(runs["run_id"])
    for x, (top, c, g) in enumerate(zip(bottom, committed, groups, strict=True)):
        ax.annotate(f"{c}/{g} groups committed", (x, top), ha="center", va="bottom", fontsize=8)
    ax.set_xticks(range(len(runs)), labels, fontsize=8)
    ax.set_ylabel("group partitions")
    ax.set_title(title)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
    fig.tight_layout()
    return fig


def plot_commit_rate(rate_pdf: pd.DataFrame | None, top: int) -> Figure:
    """Offset commits per time bucket for the `top` most committing groups."""
    import matplotlib.pyplot as plt

    title = "Offset commits (decoded __consumer_offsets)"
    if rate_pdf is None or rate_pdf.empty:
        return _empty(title, "no decoded commits yet: run decode-offsets (offsets.commits_path)")
    busiest = rate_pdf.groupby("group")["commits"].sum().nlargest(top).index
    fig, ax = plt.subplots(figsize=(10, 3.5))
    for group in sorted(busiest):
        rows = rate_pdf[rate_pdf["group"] == group]
        ax.plot(
            rows["bucket_start"], rows["commits"], drawstyle="steps-post", marker="o", label=group
        )
    ax.set_title(title)
    ax.set_ylabel("commits per bucket")
    ax.legend(loc="upper left", fontsize="small", ncol=2)
    fig.autofmt_xdate()
    fig.tight_layout()
    return fig
