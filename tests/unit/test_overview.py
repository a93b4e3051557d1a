"""The overview's pure parts (ferry.overview) on tiny inline tables: each migrate run's groups by
their final outcome from the ledger's phases, the audit panel's records at stake per group and
run, and the two plots' text: no label over another or over the title."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import matplotlib
import pytest

from ferry import overview
from ferry.audit import AUDIT_SCHEMA
from ferry.status import DONE_STATUSES
from ferry.write.ledger import LEDGER_COLUMNS, LEDGER_SCHEMA

matplotlib.use("Agg")

T0 = datetime(2026, 1, 31, 12, 0, tzinfo=timezone.utc)


def at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


def frame(spark, rows: list[tuple], schema):
    """Rows as a DataFrame sent as Arrow (no Python workers to start), timestamps in UTC."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema

    arrow_schema = to_arrow_schema(schema, timezone="UTC")
    return spark.createDataFrame(
        pa.Table.from_pylist(
            [dict(zip(schema.fieldNames(), r, strict=True)) for r in rows], schema=arrow_schema
        ),
        schema,
    )


def ledger_row(run: str, minute: float, executed: bool, group: str, phase: str | None, **kw):
    row = dict.fromkeys(LEDGER_COLUMNS)
    row.update(
        run_id=run,
        run_time=at(minute),
        action="migrate",
        is_executed=executed,
        group=group,
        topic="t",
        partition=0,
        status="MATCHED",
        is_committed=False,
        phase=phase,
        row_time=at(minute),
    )
    row.update(kw)
    return tuple(row[c] for c in LEDGER_COLUMNS)


def ledger(spark, rows):
    return frame(spark, rows, LEDGER_SCHEMA)


def plan(run, minute, executed, group, message, partition=0):
    return ledger_row(run, minute, executed, group, "plan", message=message, partition=partition)


def intent(run, minute, group, partition=0):
    return ledger_row(run, minute, True, group, "intent", message="READY", partition=partition)


def outcome(run, minute, group, status, partition=0, committed=False):
    return ledger_row(
        run,
        minute,
        True,
        group,
        "outcome",
        status=status,
        is_committed=committed,
        partition=partition,
        row_time=at(minute + 0.5),
    )


def group_outcomes(spark, rows, last_runs=10) -> dict[tuple[str, str], tuple[str, int]]:
    got = overview.with_group_outcomes(ledger(spark, rows), last_runs).collect()
    return {(r["run_id"], r["group"]): (r["outcome"], r["partitions"]) for r in got}


def test_each_group_gets_its_last_phase_as_outcome(spark):
    rows = [
        # a dry run: plan rows only, the group status opening the message
        plan("dry", 0, False, "a", "READY", 0),
        plan("dry", 0, False, "a", "READY", 1),
        plan("dry", 0, False, "b", "PENDING: 1 of 1 partitions unresolved (PENDING)"),
        # an execute: a written (intent, outcome), one left alone (plan), one whose outcome
        # was never recorded (intent only), one refused at write time (intent, outcome)
        intent("run", 5, "a", 0),
        intent("run", 5, "a", 1),
        outcome("run", 5, "a", "COMMITTED", 0, committed=True),
        outcome("run", 5, "a", "COMMITTED", 1, committed=True),
        plan("run", 5, True, "b", "ALREADY_MIGRATED: destination at or past the plan"),
        intent("run", 5, "c"),
        intent("run", 5, "d"),
        outcome("run", 5, "d", "REFUSED"),
        # a ledger older than the phases: committed rows were its outcome rows
        ledger_row("old", 1, True, "a", None, is_committed=True, message="COMMITTED"),
        ledger_row("old", 1, True, "b", None, message="REFUSED: group is active"),
        ledger_row("old", 1, True, "e", None, message=None),
    ]
    assert group_outcomes(spark, rows) == {
        ("dry", "a"): ("READY", 2),
        ("dry", "b"): ("PENDING", 1),
        ("run", "a"): ("COMMITTED", 2),
        ("run", "b"): ("ALREADY_MIGRATED", 1),
        ("run", "c"): (overview.NO_OUTCOME, 1),
        ("run", "d"): ("REFUSED", 1),
        ("old", "a"): ("COMMITTED", 1),
        ("old", "b"): ("REFUSED", 1),
        ("old", "e"): ("UNKNOWN", 1),
    }


def test_a_rerun_that_finds_every_group_migrated_is_all_success(spark):
    rows = [plan("rerun", 9, True, g, "ALREADY_MIGRATED") for g in "abc"]
    [run] = overview.with_run_outcomes(
        overview.with_group_outcomes(ledger(spark, rows), 5)
    ).collect()
    assert (run["outcome"], run["groups"], run["partitions"]) == ("ALREADY_MIGRATED", 3, 3)
    styles = overview.OUTCOME_STYLES
    assert "ALREADY_MIGRATED" in DONE_STATUSES
    assert styles["ALREADY_MIGRATED"][1] != styles["READY"][1]  # success, not the dry run's


def test_only_the_newest_migrate_runs_are_kept(spark):
    rows = [plan(f"r{i}", i, True, "g", "ALREADY_MIGRATED") for i in range(4)]
    rows.append(ledger_row("reset", 9, True, "g", "outcome", action="reset", status="COMMITTED"))
    assert {run for run, _ in group_outcomes(spark, rows, last_runs=2)} == {"r2", "r3"}


# ---------------------------------------------------------------------------------- audit


def audit_row(run: str, minute: float, group: str, partition: int, verdict: str, diff, live=False):
    row = dict.fromkeys(AUDIT_SCHEMA.fieldNames())
    row.update(
        run_id=run,
        audited_at=at(minute),
        group=group,
        topic="t",
        partition=partition,
        committed_offset=None if verdict == "NO_COMMIT" else 100 + (diff or 0),
        exact_offset=None if verdict in ("PENDING", "AMBIGUOUS") else 100,
        difference=diff,
        verdict=verdict,
        is_live=live,
        group_state="STABLE" if live else "EMPTY",
    )
    return tuple(row[c] for c in AUDIT_SCHEMA.fieldNames())


AUDITS = [
    audit_row("a1", 0, "billing", 0, "BEHIND", -40),
    audit_row("a1", 0, "billing", 1, "BEHIND", -2),
    audit_row("a1", 0, "billing", 2, "AHEAD", 7),
    audit_row("a1", 0, "live", 0, "AHEAD", 500, live=True),
    audit_row("a1", 0, "live", 1, "EXACT", 0, live=True),
    audit_row("a1", 0, "new", 0, "NO_COMMIT", None),
    audit_row("a1", 0, "new", 1, "PENDING", None),
    audit_row("a2", 60, "billing", 0, "BEHIND", -3),
    audit_row("a2", 60, "billing", 1, "EXACT", 0),
    audit_row("a2", 60, "billing", 2, "EXACT", 0),
]


def test_audit_by_group_counts_records_by_direction(spark):
    audit_df = frame(spark, AUDITS, AUDIT_SCHEMA)
    got = {
        (r["run_id"], r["group"]): r.asDict()
        for r in overview.with_audit_by_group(audit_df).collect()
    }
    billing = got[("a1", "billing")]
    assert (billing["delivered_again"], billing["skipped"], billing["ahead_live"]) == (42, 7, 0)
    assert (billing["behind"], billing["ahead"], billing["exact"]) == (2, 1, 0)
    live = got[("a1", "live")]
    # ahead on a live group: its consumers moved on, not records lost
    assert (live["skipped"], live["ahead_live"], live["is_live"]) == (0, 500, True)
    new = got[("a1", "new")]
    assert (new["no_commit"], new["unresolved"], new["delivered_again"]) == (1, 1, 0)
    assert got[("a2", "billing")]["delivered_again"] == 3


def test_latest_audit_and_top_groups(spark):
    by_group_df = overview.with_audit_by_group(frame(spark, AUDITS, AUDIT_SCHEMA))
    latest = {r["group"]: r["run_id"] for r in overview.filter_latest_audit(by_group_df).collect()}
    assert latest == {"billing": "a2", "live": "a1", "new": "a1"}
    # billing still has records at stake in its latest audit; then the unresolved one
    top = overview.filter_top_audit_groups(by_group_df, 2).collect()
    assert {r["group"] for r in top} == {"billing", "new"}
    assert len([r for r in top if r["group"] == "billing"]) == 2  # every run of a kept group


# ---------------------------------------------------------------------------------- plots


def overlapping_texts(fig) -> list[tuple[str, str]]:
    """Pairs of texts drawn on a figure whose boxes intersect. Tick labels count where their
    tick lies within the axis' view (matplotlib keeps, but does not draw, those beyond it)."""
    from matplotlib.text import Text

    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    ticks, drawn = set(), []
    for ax in fig.axes:
        for axis, limits in ((ax.xaxis, ax.get_xlim()), (ax.yaxis, ax.get_ylim())):
            lo, hi = sorted(limits)
            slack = (hi - lo) * 1e-9
            for tick in axis.get_major_ticks() + axis.get_minor_ticks():
                ticks.update({id(tick.label1), id(tick.label2)})
                if lo - slack <= tick.get_loc() <= hi + slack:
                    drawn += [t for t in (tick.label1, tick.label2) if t.get_visible()]
    drawn += [t for t in fig.findobj(Text) if id(t) not in ticks and t.get_visible()]
    boxes = [(t.get_text(), t.get_window_extent(renderer)) for t in drawn if t.get_text().strip()]
    return [
        (a, b)
        for i, (a, box_a) in enumerate(boxes)
        for b, box_b in boxes[i + 1 :]
        if box_a.overlaps(box_b)
    ]


def runs_pdf(n_runs: int):
    import pandas as pd

    rows = []
    for i in range(n_runs):
        executed = i % 3 != 0
        mix = (
            {"COMMITTED": 180, "REFUSED": 3, "PENDING": 17}
            if executed
            else {"READY": 190, "UNRESOLVED": 10}
        )
        for status, groups in mix.items():
            rows.append(
                {
                    "run_id": f"migrate-2026013{i}T120000Z-abc{i:03d}",
                    "run_time": pd.Timestamp(at(i * 61)),
                    "is_executed": executed,
                    "outcome": status,
                    "groups": groups,
                    "partitions": groups * 4,
                }
            )
    rows.append({**rows[-1], "run_id": "rerun", "run_time": pd.Timestamp(at(999)),
                 "is_executed": True, "outcome": "ALREADY_MIGRATED", "groups": 200})  # fmt: skip
    return pd.DataFrame(rows)


@pytest.mark.parametrize("n_runs", [1, 5, 12])
def test_migration_chart_labels_do_not_overlap(n_runs):
    fig = overview.plot_migrations(runs_pdf(n_runs))
    assert overlapping_texts(fig) == []
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert labels[-1].endswith("execute  …rerun") and "dry run" in labels[0]


def test_migration_chart_colours_each_run_by_outcome():
    fig = overview.plot_migrations(runs_pdf(3))
    ax = fig.axes[0]
    # the rerun (top bar) is one segment, in the already-migrated green, not the dry run's blue
    top = max(p.get_y() for p in ax.patches)
    rerun = [p for p in ax.patches if p.get_y() == top and p.get_width() > 0]
    colour = matplotlib.colors.to_hex(rerun[0].get_facecolor())
    assert [len(rerun), colour] == [1, overview.OUTCOME_STYLES["ALREADY_MIGRATED"][1]]
    assert colour != overview.OUTCOME_STYLES["READY"][1]
    summaries = [t.get_text() for t in ax.texts if "/" in t.get_text()]
    assert summaries == ["190/200 ready", "180/200 done", "180/200 done", "200/200 done"]


def test_audit_chart_draws_each_group_and_no_overlap(spark):
    by_group_df = overview.with_audit_by_group(frame(spark, AUDITS, AUDIT_SCHEMA))
    pdf = by_group_df.orderBy("group", "audited_at").toPandas()
    fig = overview.plot_audit(pdf)
    assert overlapping_texts(fig) == []
    again, skipped = fig.axes[:2]
    lines = {line.get_label(): list(line.get_ydata()) for line in again.get_lines()}
    assert lines["billing"] == [42, 3]
    assert [list(line.get_ydata()) for line in skipped.get_lines()] == [[7, 0], [0], [0]]


def test_missing_tables_are_empty_panels():
    for fig in (overview.plot_migrations(None), overview.plot_audit(None)):
        assert "yet" in " ".join(t.get_text() for t in fig.axes[0].texts)


def test_paths_tolerate_a_config_without_audit():
    from ferry.config import FerryConfig, LedgerConfig

    paths = overview.paths_from_config(FerryConfig(ledger=LedgerConfig(path="/l")))
    assert (paths.ledger, paths.audit) == ("/l", None)

    class WithAudit:  # a config object that has the section
        ledger = LedgerConfig(path="/l")
        history = FerryConfig().history
        offsets = FerryConfig().offsets
        audit = type("Audit", (), {"path": "/a"})()

    assert overview.paths_from_config(WithAudit()).audit == "/a"
