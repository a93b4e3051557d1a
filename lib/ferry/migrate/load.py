"""Load: write the decided groups through `ferry.write.commit` (write-ahead ledger, claims, fresh
checks and one verified request per group, many groups per batch), record dry runs (with how far
ALREADY_MIGRATED groups are from the plan, counted as `audit` counts it), and export CSV
files."""

from __future__ import annotations

import csv
import json
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from datetime import datetime, timezone
from pathlib import Path

from pyspark.sql import SparkSession

from ferry.config import FerryConfig
from ferry.kafka.cluster import Cluster
from ferry.migrate.decision import GroupDecision
from ferry.migrate.difference import count_records
from ferry.migrate.ledger_table import PlanTables
from ferry.migrate.model import Plan
from ferry.migrate.spans import Count, Span, row_span, signed_difference
from ferry.output import (
    WRITE_ROWS,
    emit_json_lines,
    emit_rows,
    json_fields_array,
    json_fields_of_columns,
    json_row,
    stdout_held_until,
)
from ferry.session import in_background
from ferry.status import DONE_STATUSES, RETRY_STATUSES, GroupStatus
from ferry.write import commit
from ferry.write.ledger import BATCH_ROWS, PHASE_PLAN, Ledger

# What `migrate` prints per group partition (-o json: the field names are a contract).
OUTPUT_COLUMNS = [
    "group",
    "src_topic",
    "src_partition",
    "committed_offset",
    "dst_topic",
    "dst_partition",
    "destination_offset",
    "previous_offset",
    "difference",
    "status",
    "candidate_count",
    "duplicates",
    "unplaced",
    "group_status",
    "note",
]


def ledger_rows(plan: Plan, decisions: Mapping[str, GroupDecision], dst: Cluster) -> Iterator[dict]:
    """One ledger row per plan row, group by group: the partition's match, and the group's
    decision (status and why) in `message`."""
    for group in plan.groups():
        yield from group_ledger_rows(plan, group, decisions[group], dst)


def group_ledger_rows(plan: Plan, group: str, decision: GroupDecision, dst: Cluster) -> list[dict]:
    """The group's ledger rows, read from the plan's shared rows (no plan row is copied)."""
    cluster = dst.conf.get("bootstrap.servers")
    previous = plan.previous.get(group, {})
    message = _message(decision)
    out = []
    for r in plan.shared_rows_of(group):
        ts = r["anchor_timestamp_ms"]
        tp = (r["dst_topic"], r["dst_partition"])
        note, before = r.get("note"), r.get("previous_offset")
        out.append(
            {
                "cluster": cluster,
                "group": group,
                "source_group": group,
                "source_topic": r["src_topic"],
                "source_partition": r["src_partition"],
                "source_offset": r["committed_offset"],
                "topic": tp[0],
                "partition": tp[1],
                "previous_offset": previous.get(tp) if before is None else before,
                "new_offset": r["destination_offset"],
                "status": r["status"],
                "anchor_kind": r["anchor_kind"],
                "anchor_offset": r["anchor_offset"],
                "anchor_timestamp": None
                if ts is None
                else datetime.fromtimestamp(ts / 1000, tz=timezone.utc),
                "anchor_sha256": r["anchor_sha256"],
                "candidate_count": r["candidate_count"],
                "message": f"{decision.status}: {note}" if note else message,
            }
        )
    return out


def record_dry_run(
    plan: Plan, decisions: Mapping[str, GroupDecision], dst: Cluster, ledger: Ledger
) -> Callable[[], None]:
    """Start writing the dry run's ledger rows (`ledger_rows`' rows, built column-wise, in
    commits of `ledger.BATCH_ROWS` rows) on a thread of their own; the callable waits for
    them and raises their error. The ledger's writes hold no interpreter lock, so they run
    beside the output's making (10,000 groups: 0.8 s), which is shown once they are in
    (`ferry.output.stdout_held_until`)."""
    tables = _ledger_tables(plan, decisions, dst)(plan.groups())
    return in_background("ferry-record", ledger.append_tables, tables, PHASE_PLAN)


def _ledger_tables(
    plan: Plan, decisions: Mapping[str, GroupDecision], dst: Cluster
) -> PlanTables:
    """The plan's ledger rows as Arrow tables of `ledger.BATCH_ROWS` rows, each group's rows
    carrying its decision."""
    return PlanTables(
        plan,
        lambda g: _message(decisions[g]),
        dst.conf.get("bootstrap.servers"),
        BATCH_ROWS,
        lambda g: group_ledger_rows(plan, g, decisions[g], dst),
    )


def _message(decision: GroupDecision) -> str:
    return str(decision.status) + (f": {decision.message}" if decision.message else "")


def dry_run_differences(
    spark: SparkSession,
    dst: Cluster,
    plan: Plan,
    decisions: Mapping[str, GroupDecision],
    cfg: FerryConfig,
    progress: Callable[[str], None],
) -> dict[Span, Count]:
    """How far groups already at or past the plan are from it: the records between each such
    partition's offset now and the plan's, counted once per span as `audit` counts them
    (`with_difference` puts them on the rows)."""
    spans = {
        span
        for group, d in decisions.items()
        if d.status == GroupStatus.ALREADY_MIGRATED
        for r in plan.rows_of(group)
        if (span := row_span(r))
    }
    return count_records(spark, dst, spans, {}, cfg, progress)


def with_difference(row: dict, counts: Mapping[Span, Count]) -> dict:
    """`difference` (offset now - the plan's, in records) on a row of an ALREADY_MIGRATED
    group; a span too wide to count says so in the row's note."""
    if row.get("previous_offset") is None:
        return row
    span = row_span(row)
    if span is None:
        row["difference"] = 0 if row.get("destination_offset") is not None else None
        return row
    records, counted = counts[span]
    row["difference"] = signed_difference(
        row["previous_offset"], row["destination_offset"], records
    )
    if not counted:
        bound = "difference not counted (more offsets apart than audit.max_count_offsets)"
        row["note"] = f"{row['note']}; {bound}" if row.get("note") else bound
    return row


def output_rows(
    plan: Plan, decisions: Mapping[str, GroupDecision], counts: Mapping[Span, Count] | None
) -> Iterator[dict]:
    """The rows `migrate` prints, group by group: each plan row with its group's status, and
    for ALREADY_MIGRATED groups the difference from the plan when `counts` (a dry run's
    `dry_run_differences`) is given."""
    for group in plan.groups():
        yield from output_rows_of(plan, group, decisions[group], counts)


# The output columns a group partition takes from its position's matching result, in two runs
# around `previous_offset` and `difference` (which are the group's): `OUTPUT_COLUMNS` order.
_BEFORE_GROUP = OUTPUT_COLUMNS[1:7]
_AFTER_GROUP = OUTPUT_COLUMNS[9:13]


def output_json(
    plan: Plan, decisions: Mapping[str, GroupDecision], counts: Mapping[Span, Count] | None
) -> Iterator[str]:
    """`output_rows` as the JSON texts `-o json` prints, one per row (the same text). The
    positions' fields are encoded once, column by column (`json_fields_array`), and each
    row is joined from its group's and its position's texts by Arrow's kernels, groups of
    about `WRITE_ROWS` rows at a time: 640,000 rows as a dict each, encoded one by one, took
    12 s (load 9); joined in Python per row, 320,000 rows took 3.2 s. Groups with rows made
    outside matching, or whose rows carry a difference, go through `output_rows`."""
    fields: _PositionTexts | None = None
    batch: list[str] = []
    size = 0
    for group in plan.groups():
        decision = decisions[group]
        has_difference = decision.status == GroupStatus.ALREADY_MIGRATED and counts is not None
        if plan.extra.get(group) or group in plan.group_notes or has_difference:
            if batch:
                yield from fields.rows(plan, decisions, batch)  # type: ignore[union-attr]
                batch, size = [], 0
            for row in output_rows_of(plan, group, decision, counts):
                yield json_row(row, OUTPUT_COLUMNS)
            continue
        if fields is None:  # the first group that needs them: every position's, at once
            fields = _PositionTexts(plan)
        batch.append(group)
        size += len(plan.exact.get(group, {}))
        if size >= WRITE_ROWS:
            yield from fields.rows(plan, decisions, batch)
            batch, size = [], 0
    if batch:
        yield from fields.rows(plan, decisions, batch)  # type: ignore[union-attr]


def emit_plan(
    plan: Plan,
    decisions: Mapping[str, GroupDecision],
    counts: Mapping[Span, Count] | None,
    fmt: str,
    recorded: Callable[[], object] | None = None,
) -> None:
    """Print the plan to stdout as `fmt` (table, csv or json lines). `recorded`: a dry run's
    wait for its ledger record (`record_dry_run`): the plan is held until it returns and
    never shown when it fails, so every plan shown is on record."""
    with stdout_held_until(recorded):
        if fmt == "json":
            emit_json_lines(output_json(plan, decisions, counts))
        else:
            emit_rows(lambda: output_rows(plan, decisions, counts), OUTPUT_COLUMNS, fmt)


class _PositionTexts:
    """Per position (in `plan.position_order`), its JSON fields before and after the group's, as
    Arrow strings."""

    def __init__(self, plan: Plan) -> None:
        table = plan.position_table
        if table is not None:  # matching's own columns: no value is read out of a dict
            arrays = {c: table.column(c) for c in table.column_names}
            before = json_fields_of_columns(arrays, _BEFORE_GROUP, table.num_rows)
            after = json_fields_of_columns(arrays, _AFTER_GROUP, table.num_rows)
        if table is None or before is None or after is None:
            rows = [plan.positions[p] for p in plan.position_order]
            before = json_fields_array(rows, _BEFORE_GROUP)
            after = json_fields_array(rows, _AFTER_GROUP)
        self.before, self.after = before, after

    def rows(
        self, plan: Plan, decisions: Mapping[str, GroupDecision], groups: list[str]
    ) -> list[str]:
        """The rows of `groups` (matched exactly, no difference), group by group, each group's
        partitions in order."""
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        taken: list[int] = []
        counts: list[int] = []
        previous: list[int | None] = []
        for group in groups:
            at = plan.exact_at(group)
            taken += at
            counts.append(len(at))
            now = plan.previous.get(group)
            if now:
                destinations = plan.position_destinations
                previous += [now.get(destinations[i]) for i in at]
            else:
                previous += [None] * len(at)
        per_row = pa.array(np.repeat(np.arange(len(groups)), counts))
        heads = pa.array(['{"group": ' + json.dumps(g) + ", " for g in groups], pa.string())
        tails = pa.array(
            [f', "group_status": {json.dumps(str(decisions[g].status))}, "note": null}}'
             for g in groups],
            pa.string(),
        )  # fmt: skip
        at = pa.array(taken, pa.int64())
        before_now = pc.fill_null(pc.cast(pa.array(previous, pa.int64()), pa.string()), "null")
        return pc.binary_join_element_wise(
            heads.take(per_row),
            self.before.take(at),
            ', "previous_offset": ',
            before_now,
            ', "difference": null, ',
            self.after.take(at),
            tails.take(per_row),
            "",
        ).to_pylist()


def output_rows_of(
    plan: Plan, group: str, decision: GroupDecision, counts: Mapping[Span, Count] | None
) -> list[dict]:
    """One group's `output_rows`."""
    status = str(decision.status)  # a plain str: the encoder's fast path
    rows = plan.rows_of(group)
    for row in rows:
        row["group_status"] = status
        if decision.status == GroupStatus.ALREADY_MIGRATED and counts is not None:
            with_difference(row, counts)
    return rows


def commit_groups(
    dst: Cluster,
    plan: Plan,
    decisions: Mapping[str, GroupDecision],
    ledger: Ledger,
    lease_ms: int,
    allow_rewind: bool,
    progress: Callable[[str], None],
    batch_groups: int | None = None,
) -> None:
    """Write every READY group, `batch_groups` (default `commit.BATCH_GROUPS`) at a time;
    `decisions` get what happened (status and why). Ledger rows are built group by group as
    they are appended."""

    def rows_of(group: str) -> Callable[[], list[dict]]:
        return lambda: group_ledger_rows(plan, group, decisions[group], dst)

    writes = [
        commit.GroupWrite(d.group, d.offsets, rows_of(d.group), allow_rewind=allow_rewind)
        for d in decisions.values()
        if d.is_write
    ]
    kept = commit.LedgerTables(
        _ledger_tables(plan, decisions, dst),
        [g for g in plan.groups() if not decisions[g].is_write],
    )
    outcomes = commit.execute_writes(dst, writes, kept, ledger, lease_ms, progress, batch_groups)
    for group, outcome in outcomes.items():
        decisions[group].status = outcome.status
        decisions[group].message = outcome.message


def export_csv(plan: Plan, decisions: Mapping[str, GroupDecision], directory: str) -> list[Path]:
    """One `kafka-consumer-groups --reset-offsets --from-file` CSV per group that was (or, in
    a dry run, would be) written."""
    out_dir = Path(directory)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for group in plan.groups():
        rows = plan.rows_of(group)
        if decisions[group].status not in (GroupStatus.COMMITTED, GroupStatus.READY) or not rows:
            continue
        lines = sorted((r["dst_topic"], r["dst_partition"], r["destination_offset"]) for r in rows)
        path = out_dir / f"{_safe_name(group)}.csv"
        with path.open("w", newline="") as fh:
            csv.writer(fh, lineterminator="\n").writerows(lines)
        written.append(path)
    return written


def _safe_name(group: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in group)


def summary(
    plan: Plan, decisions: Mapping[str, GroupDecision], is_executed: bool, ledger: Ledger
) -> tuple[list[str], str]:
    """What `migrate` says after its rows: a line per group not migrated (why, and whether
    another run may do it), and the total line."""
    lines = []
    for group, d in sorted(decisions.items()):
        if d.status in RETRY_STATUSES:
            lines.append(f"not migrated yet: {group}: {d.message} ({d.status}: run again later)")
        elif d.status not in DONE_STATUSES:
            lines.append(f"not migrated: {group}: {d.message} ({d.status})")
    done = [g for g, d in decisions.items() if d.status in DONE_STATUSES]
    counts = Counter(str(d.status) for d in decisions.values())
    detail = ", ".join(f"{s} {n}" for s, n in sorted(counts.items()))
    verb = "migrated" if is_executed else "resolved (dry run; re-run with --execute to commit)"
    total = (
        f"{len(done)} of {len(decisions)} groups {verb}, "
        f"{sum(plan.row_count(g) for g in done)} partitions ({detail}); "
        f"run {ledger.run_id}; ledger {ledger.path} via {ledger.writer}"
    )
    return lines, total
