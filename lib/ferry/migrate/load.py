"""Load: write the decided groups through `ferry.write.commit` (write-ahead ledger, claims, fresh
checks and one verified request per group, many groups per batch), record dry runs (with how far
ALREADY_MIGRATED groups are from the plan, counted as `audit` counts it), and export CSV
files."""

from __future__ import annotations

import csv
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from pathlib import Path

from pyspark.sql import SparkSession

from ferry.config import FerryConfig
from ferry.kafka.cluster import Cluster
from ferry.migrate.decision import GroupDecision
from ferry.migrate.difference import add_differences
from ferry.migrate.plan import Plan
from ferry.status import GroupStatus
from ferry.write import commit
from ferry.write.ledger import PHASE_PLAN, Ledger


def ledger_rows(plan: Plan, decisions: Mapping[str, GroupDecision], dst: Cluster) -> list[dict]:
    """One ledger row per plan row: the partition's match, and the group's decision (status
    and why) in `message`."""
    out = []
    for r in plan.rows:
        decision = decisions[r["group"]]
        ts = r["anchor_timestamp_ms"]
        why = r.get("note") or decision.message
        out.append(
            {
                "cluster": dst.conf.get("bootstrap.servers"),
                "group": r["group"],
                "source_group": r["group"],
                "source_topic": r["src_topic"],
                "source_partition": r["src_partition"],
                "source_offset": r["committed_offset"],
                "topic": r["dst_topic"],
                "partition": r["dst_partition"],
                "previous_offset": r["previous_offset"],
                "new_offset": r["destination_offset"],
                "status": r["status"],
                "anchor_kind": r["anchor_kind"],
                "anchor_offset": r["anchor_offset"],
                "anchor_timestamp": None
                if ts is None
                else datetime.fromtimestamp(ts / 1000, tz=timezone.utc),
                "anchor_sha256": r["anchor_sha256"],
                "candidate_count": r["candidate_count"],
                "message": decision.status + (f": {why}" if why else ""),
            }
        )
    return out


def record_dry_run(
    plan: Plan, decisions: Mapping[str, GroupDecision], dst: Cluster, ledger: Ledger
) -> None:
    ledger.append(ledger_rows(plan, decisions, dst), PHASE_PLAN)


def dry_run_differences(
    spark: SparkSession,
    dst: Cluster,
    plan: Plan,
    decisions: Mapping[str, GroupDecision],
    cfg: FerryConfig,
    progress: Callable[[str], None],
) -> None:
    """The plan rows of ALREADY_MIGRATED groups get `difference`: the records from the plan's
    offset to the one the destination group has (what `audit` reports for them)."""
    add_differences(
        spark,
        dst,
        (r for r in plan.rows if decisions[r["group"]].status == GroupStatus.ALREADY_MIGRATED),
        cfg,
        progress,
    )


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
    `decisions` get what happened (status and why)."""
    rows_by_group: dict[str, list[dict]] = {}
    for row in ledger_rows(plan, decisions, dst):
        rows_by_group.setdefault(row["group"], []).append(row)
    writes = [
        commit.GroupWrite(d.group, d.offsets, rows_by_group[d.group], allow_rewind=allow_rewind)
        for d in decisions.values()
        if d.is_write
    ]
    kept = [r for g, rows in rows_by_group.items() if not decisions[g].is_write for r in rows]
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
    for group, rows in plan.by_group().items():
        if decisions[group].status not in (GroupStatus.COMMITTED, "READY") or not rows:
            continue
        lines = sorted((r["dst_topic"], r["dst_partition"], r["destination_offset"]) for r in rows)
        path = out_dir / f"{_safe_name(group)}.csv"
        with path.open("w", newline="") as fh:
            csv.writer(fh, lineterminator="\n").writerows(lines)
        written.append(path)
    return written


def _safe_name(group: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in group)
