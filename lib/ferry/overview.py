"""What `notebooks/ferry_overview.ipynb` shows, as functions: load Ferry's Delta tables, shape
them for plotting, and draw the plots. The notebook only calls these.

Tables (any may be missing; a missing one is a panel saying so, never an error):
- the migration ledger (`ledger.path`, `ferry.write.ledger.LEDGER_SCHEMA`);
- the lag history (`history.path`, `ferry.lag.history.HISTORY_SCHEMA`) and the evaluated
  statuses (`history.status_path`, `ferry.lag.history.STATUS_SCHEMA`);
- the decoded offset commits (`offsets.commits_path`, `ferry.offsets_topic.OFFSET_COMMITS_SCHEMA`);
- the audits (`audit.path`: one row per audit run × group × partition with `verdict` and
  `difference` = committed − exact offset, in records).

The `with_*` functions are pure DataFrame transforms that aggregate on Spark, so a history of
thousands of groups arrives at the driver as a few hundred points per plotted group; `plot_*`
take the collected pandas frames and return a matplotlib Figure. Plots show the `top` groups
by their latest total lag (or by rows, for commits; by records off, for audits) so they stay
readable.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TYPE_CHECKING

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from ferry import delta
from ferry.config import FerryConfig
from ferry.status import DONE_STATUSES, GroupStatus
from ferry.write.ledger import PHASE_INTENT, PHASE_OUTCOME, PHASE_PLAN

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
# A group in a migrate run whose intent was recorded but not its outcome: the run stopped
# between the two, and whether the group was written is for `--rollback`/a read-back to say.
NO_OUTCOME = "NO_OUTCOME"
# Each group's final outcome in a migrate run, in legend order, with its label and colour:
# successes green, the dry run's "would be written" blue, worth another run amber, needing a
# person red, not known purple and grey.
OUTCOME_STYLES: dict[str, tuple[str, str]] = {
    GroupStatus.COMMITTED: ("committed", "#1b5e20"),
    GroupStatus.ALREADY_MIGRATED: ("already migrated", "#66bb6a"),
    GroupStatus.NOTHING_TO_MIGRATE: ("nothing to migrate", "#c5e1a5"),
    GroupStatus.READY: ("would be committed (dry run)", "#64b5f6"),
    GroupStatus.PENDING: ("pending: replica behind", "#ffb300"),
    GroupStatus.CLAIMED: ("claimed by another run", "#ffe082"),
    GroupStatus.REFUSED: ("refused", "#c62828"),
    GroupStatus.UNRESOLVED: ("unresolved", "#ef6c00"),
    GroupStatus.FAILED: ("failed", "#4e342e"),
    GroupStatus.UNKNOWN: ("unknown: sent, not confirmed", "#6a1b9a"),
    NO_OUTCOME: ("intent without outcome", "#9e9e9e"),
}
_PHASE_RANK = {PHASE_INTENT: 1, PHASE_PLAN: 2, PHASE_OUTCOME: 3}
# Audit verdicts with a direction; any other verdict is the plan's unresolved status.
AUDIT_VERDICTS = ("EXACT", "BEHIND", "AHEAD", "NO_COMMIT")


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
            F.sum("partitions").cast("long").alias("partitions"),
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
        return F.sum(F.when(condition, 1).otherwise(0)).cast("long")

    def total(condition):  # noqa: ANN001, ANN202
        return F.coalesce(F.sum(F.when(condition, records)), F.lit(0)).cast("long")

    return (
        audit_df.groupBy("run_id", "group")
        .agg(
            F.min("audited_at").alias("audited_at"),
            F.count(F.lit(1)).alias("partitions"),
            partitions(verdict == "EXACT").alias("exact"),
            partitions(verdict == "BEHIND").alias("behind"),
            partitions(verdict == "AHEAD").alias("ahead"),
            partitions(verdict == "NO_COMMIT").alias("no_commit"),
            partitions(~verdict.isin(*AUDIT_VERDICTS) | verdict.isNull()).alias("unresolved"),
            total(verdict == "BEHIND").alias("delivered_again"),
            total((verdict == "AHEAD") & ~is_live).alias("skipped"),
            total((verdict == "AHEAD") & is_live).alias("ahead_live"),
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


# ------------------------------------------------------------------------------------ plots


def _empty(title: str, why: str) -> Figure:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 1.6))
    ax.set_axis_off()
    ax.set_title(title)
    ax.text(0.5, 0.4, why, ha="center", va="center", transform=ax.transAxes, color="#555555")
    return fig


def _time_axis(ax, times: pd.Series) -> None:  # noqa: ANN001 - a matplotlib Axes
    """Short date labels (the date once, then times); a single instant gets a few minutes
    either side instead of matplotlib's default span of years."""
    import matplotlib.dates as mdates
    import pandas as pd

    locator = mdates.AutoDateLocator()
    ax.xaxis.set_major_locator(locator)
    ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator))
    first, last = pd.Timestamp(times.min()), pd.Timestamp(times.max())
    if first == last:
        ax.set_xlim(first - pd.Timedelta(minutes=5), last + pd.Timedelta(minutes=5))


def plot_lag(group_lag_pdf: pd.DataFrame | None) -> Figure:
    """Total lag and largest time lag per group over time (two panels, shared time axis)."""
    import matplotlib.pyplot as plt

    title = "Lag per group"
    if group_lag_pdf is None or group_lag_pdf.empty:
        return _empty(title, "no lag history yet: run lag-snapshot (history.path)")
    fig, (lag_ax, time_ax) = plt.subplots(2, 1, figsize=(10, 6), sharex=True, layout="constrained")
    for (cluster, group), rows in group_lag_pdf.groupby(["cluster", "group"], sort=True):
        label = group if group_lag_pdf["cluster"].nunique() == 1 else f"{group} ({cluster})"
        lag_ax.plot(rows["snapshot_time"], rows["total_lag"], marker="o", label=label)
        time_ax.plot(rows["snapshot_time"], rows["max_time_lag_ms"] / 1000, marker="o")
    lag_ax.set_title(title)
    lag_ax.set_ylabel("records behind")
    time_ax.set_ylabel("time lag (s)")
    time_ax.set_xlabel("snapshot time (UTC)")
    _time_axis(time_ax, group_lag_pdf["snapshot_time"])
    lag_ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
    return fig


def plot_status_timeline(timeline_pdf: pd.DataFrame | None) -> Figure:
    """One row per group, one mark per evaluation, coloured by Burrow group status."""
    import matplotlib.pyplot as plt

    title = "Group health (Burrow rules)"
    if timeline_pdf is None or timeline_pdf.empty:
        return _empty(title, "no evaluations yet: run lag-status (history.status_path)")
    groups = sorted(timeline_pdf["group"].unique())
    fig, ax = plt.subplots(figsize=(10, 1.2 + 0.45 * len(groups)), layout="constrained")
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
    _time_axis(ax, timeline_pdf["as_of"])
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
    return fig


def plot_migrations(outcomes_pdf: pd.DataFrame | None) -> Figure:
    """One horizontal bar per migrate run (newest on top, labelled on the axis), split by its
    groups' final outcomes and coloured by outcome; how many of its groups are done at the
    bar's end."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    title = "Last migrations: groups by final outcome"
    if outcomes_pdf is None or outcomes_pdf.empty:
        return _empty(title, "no migrate runs in the ledger yet (ledger.path)")
    runs = outcomes_pdf.drop_duplicates("run_id").sort_values("run_time")
    counts = outcomes_pdf.pivot_table(
        index="run_id", columns="outcome", values="groups", aggfunc="sum", fill_value=0
    ).reindex(runs["run_id"], fill_value=0)
    ordered = [o for o in OUTCOME_STYLES if o in counts.columns]
    ordered += sorted(o for o in counts.columns if o not in OUTCOME_STYLES)
    totals = counts.sum(axis=1).tolist()
    done = counts[[o for o in ordered if o in DONE_STATUSES]].sum(axis=1).tolist()
    width = max(totals) / 0.8  # room at the right for each bar's summary

    fig, ax = plt.subplots(figsize=(10, 1.5 + 0.45 * len(runs)), layout="constrained")
    ys = list(range(len(runs)))
    left = [0] * len(runs)
    for outcome in ordered:
        label, colour = OUTCOME_STYLES.get(outcome, (outcome.lower(), "#bdbdbd"))
        values = counts[outcome].tolist()
        ax.barh(ys, values, left=left, color=colour, edgecolor="white", height=0.6, label=label)
        for y, x0, v in zip(ys, left, values, strict=True):
            if v and v / width >= 0.04:  # a number only where it fits inside its segment
                ax.text(x0 + v / 2, y, str(v), ha="center", va="center", fontsize=8,
                        color=_text_colour(colour))  # fmt: skip
        left = [a + b for a, b in zip(left, values, strict=True)]
    for y, run, n_done, total in zip(ys, runs.itertuples(), done, totals, strict=True):
        what = "done" if run.is_executed else "ready"
        ax.text(total + width * 0.01, y, f"{n_done}/{total} {what}", va="center", fontsize=8)
    ax.set_yticks(ys, [_run_label(r) for r in runs.itertuples()], fontsize=8)
    ax.set_ylim(-0.6, len(runs) - 0.4)
    ax.set_xlim(0, width)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("groups")
    ax.set_title(title)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
    return fig


def _run_label(run) -> str:  # noqa: ANN001 - a row of runs.itertuples()
    mode = "execute" if run.is_executed else "dry run"
    return f"{run.run_time:%Y-%m-%d %H:%M:%S}  {mode}  …{str(run.run_id)[-6:]}"


def _text_colour(background: str) -> str:
    """Black on light colours, white on dark ones (perceived brightness of the hex colour)."""
    r, g, b = (int(background[i : i + 2], 16) for i in (1, 3, 5))
    return "black" if 0.299 * r + 0.587 * g + 0.114 * b > 140 else "white"


def plot_commit_rate(rate_pdf: pd.DataFrame | None, top: int) -> Figure:
    """Offset commits per time bucket for the `top` most committing groups."""
    import matplotlib.pyplot as plt
    import pandas as pd

    title = "Offset commits (decoded __consumer_offsets)"
    if rate_pdf is None or rate_pdf.empty:
        return _empty(title, "no decoded commits yet: run decode-offsets (offsets.commits_path)")
    busiest = rate_pdf.groupby("group")["commits"].sum().nlargest(top).index
    # Buckets without commits are absent from the table: drawn as zeros, not bridged.
    starts = pd.date_range(
        rate_pdf["bucket_start"].min(),
        rate_pdf["bucket_start"].max(),
        freq=(rate_pdf["bucket_end"] - rate_pdf["bucket_start"]).iloc[0],
    )
    fig, ax = plt.subplots(figsize=(10, 3.5), layout="constrained")
    for group in sorted(busiest):
        rows = rate_pdf[rate_pdf["group"] == group].set_index("bucket_start")["commits"]
        rows = rows.reindex(starts, fill_value=0)
        ax.plot(rows.index, rows.values, drawstyle="steps-post", label=group,
                marker="o" if len(starts) <= 60 else None)  # fmt: skip
    ax.set_title(title)
    ax.set_ylabel("commits per bucket")
    ax.set_xlabel("commit time (UTC)")
    ax.set_ylim(bottom=0)
    _time_axis(ax, rate_pdf["bucket_start"])
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
    return fig


def plot_audit(audit_pdf: pd.DataFrame | None) -> Figure:
    """Per group over the audit runs: records its consumers would receive again (committed
    behind exact) and records they would skip (ahead of exact, group not live)."""
    import matplotlib.pyplot as plt

    title = "Audit: committed offsets against the exact translation"
    if audit_pdf is None or audit_pdf.empty:
        return _empty(title, "no audits yet: run audit with audit.path set")
    fig, (again_ax, skip_ax) = plt.subplots(
        2, 1, figsize=(10, 6), sharex=True, layout="constrained"
    )
    fig.get_layout_engine().set(h_pad=0.2)  # the panels' y labels apart
    for group, rows in audit_pdf.groupby("group", sort=True):
        [line] = again_ax.plot(rows["audited_at"], rows["delivered_again"], marker="o", label=group)
        skip_ax.plot(rows["audited_at"], rows["skipped"], marker="o", color=line.get_color())
        # Zero records at stake is not exact where partitions have no commit or no answer.
        open_ = rows[(rows["no_commit"] + rows["unresolved"]) > 0]
        again_ax.scatter(open_["audited_at"], open_["delivered_again"], marker="x", s=90,
                         color=line.get_color(), zorder=3)  # fmt: skip
    if ((audit_pdf["no_commit"] + audit_pdf["unresolved"]) > 0).any():
        again_ax.plot(
            [], [], "x", color="#555555", label="partitions without\na commit or unresolved"
        )
    again_ax.set_title(title)
    again_ax.set_ylabel("records delivered again\n(BEHIND)")
    skip_ax.set_ylabel("records skipped\n(AHEAD, not live)")
    skip_ax.set_xlabel("audited at (UTC)")
    for ax, column in ((again_ax, "delivered_again"), (skip_ax, "skipped")):
        ax.set_ylim(0, max(1, audit_pdf[column].max()) * 1.1)
        ax.yaxis.get_major_locator().set_params(integer=True)
    _time_axis(skip_ax, audit_pdf["audited_at"])
    again_ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
    return fig
