"""The overview's drawings: each `plot_*` takes a panel's collected pandas frame (or None)
and returns a matplotlib Figure; a missing table is a panel saying so, never an error.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ferry.overview.tables import NO_OUTCOME
from ferry.status import DONE_STATUSES, GroupStatus, LagStatus

if TYPE_CHECKING:  # matplotlib and pandas are only needed where plots are drawn
    import pandas as pd
    from matplotlib.figure import Figure

STATUS_COLOURS = {
    LagStatus.OK: "#2e7d32",
    LagStatus.WARN: "#f9a825",
    LagStatus.ERR: "#c62828",
    LagStatus.STOP: "#c62828",
    LagStatus.STALL: "#6a1b9a",
    LagStatus.REWIND: "#1565c0",
}
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
