"""Undo a run: write back the offsets a group had before a `migrate`, `copy`, `reset` or
`delete` run. `rollback_job` is the one entry for `migrate --rollback` and `groups rollback`.

Rollback reads what the run wrote from the ledger and, for each group — only if it is Empty
or Dead right now — commits the recorded previous offsets in one request. A group whose
outcome the run recorded as committed is restored. A group the run only announced (an intent
row without an outcome: the run stopped before it could record one) is restored only if its
offsets are still exactly what the run meant to write — then the write landed; if they are
still the previous ones nothing happened, and if they are anything else the group moved on
since and is left alone. Partitions the group had no offset for before the run cannot be
un-committed one by one through the Admin API; when that holds for every partition of a
group, the group is deleted (it did not exist before the run), otherwise the rollback of that
group is reported as incomplete.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pyspark.sql import DataFrame, SparkSession

from ferry import kafka
from ferry.kafka.cluster import Cluster
from ferry.write import commit, ledger

if TYPE_CHECKING:
    from ferry.config import FerryConfig

# What a rollback prints, per group partition (migrate and groups alike).
ROLLBACK_COLUMNS = ["group", "topic", "partition", "previous_offset", "new_offset", "status"]


@dataclass
class RollbackGroup:
    group: str
    restore: dict[tuple[str, int], int]  # partitions that had an offset before the run
    unset: list[tuple[str, int]]  # partitions that had none
    run_offsets: dict[tuple[str, int], int | None]  # what the run wrote (None: deleted)
    is_confirmed: bool = True  # False: intent only, the outcome was never recorded


def rollback_plan(ledger_df: DataFrame, run_id: str) -> list[RollbackGroup]:
    """The groups the run changed (or announced it would), with their previous offsets
    (collected: one row per partition the run wrote)."""
    rows = ledger.filter_run_writes(ledger_df, run_id).collect()
    outcomes = {r.group for r in rows if r.phase == ledger.PHASE_OUTCOME}
    committed = {r.group for r in rows if r.is_committed}
    groups: dict[str, RollbackGroup] = {}
    for r in rows:
        if r.group in committed:
            # Outcome rows hold the offsets read right before the write; older tables have
            # only committed rows.
            use = r.is_committed
        else:
            use = r.phase == ledger.PHASE_INTENT and r.group not in outcomes
        if not use:
            continue
        g = groups.setdefault(
            r.group, RollbackGroup(r.group, {}, [], {}, is_confirmed=r.group in committed)
        )
        tp = (r.topic, r.partition)
        g.run_offsets[tp] = r.new_offset
        if r.previous_offset is None:
            g.unset.append(tp)
        else:
            g.restore[tp] = r.previous_offset
    return [groups[k] for k in sorted(groups)]


def unconfirmed_state(g: RollbackGroup, current: dict[tuple[str, int], int]) -> str:
    """For an intent without outcome: `landed`, `not_written` or `moved`."""

    def matches(expected: dict) -> bool:
        return all(current.get(tp) == off for tp, off in expected.items())

    if matches(g.run_offsets):
        return "landed"
    before = {**g.restore, **{tp: None for tp in g.unset}}
    if matches(before):
        return "not_written"
    return "moved"


def apply_rollback(
    cluster: Cluster,
    plan: list[RollbackGroup],
    execute: bool,
    progress: Callable[[str], None],
    batch_groups: int | None = None,
) -> tuple[list[dict], dict[str, str | None]]:
    """Returns (ledger rows, group -> error or None). Groups go in batches, as `ferry.write.commit`
    writes them: one offset fetch round, one group listing, every write in flight together."""
    rows: list[dict] = []
    errors: dict[str, str | None] = {}
    size = max(1, batch_groups or commit.BATCH_GROUPS)
    for start in range(0, len(plan), size):
        batch_rows, batch_errors = _rollback_batch(
            cluster, plan[start : start + size], execute, progress
        )
        rows += batch_rows
        errors.update(batch_errors)
    return rows, errors


def _rollback_batch(
    cluster: Cluster,
    batch: list[RollbackGroup],
    execute: bool,
    progress: Callable[[str], None],
) -> tuple[list[dict], dict[str, str | None]]:
    current = kafka.committed_offsets(cluster, [g.group for g in batch])
    states: dict[str, str] = {}
    errors: dict[str, str | None] = {}
    for g in batch:
        states[g.group] = "landed" if g.is_confirmed else unconfirmed_state(g, current[g.group])
        errors[g.group] = None
        if states[g.group] == "not_written":
            progress(f"{g.group}: the run never wrote it; nothing to roll back")
        elif states[g.group] == "moved":
            errors[g.group] = (
                f"group {g.group}: its offsets changed since the run, which never recorded "
                "whether its write landed; not rolled back"
            )
    landed = [g for g in batch if execute and states[g.group] == "landed"]
    failed = _restore(cluster, landed)
    committed = set()
    for g in landed:
        if failed.get(g.group):
            errors[g.group] = failed[g.group]
            continue
        committed.add(g.group)
        if g.restore and g.unset:
            errors[g.group] = (
                f"group {g.group}: {len(g.unset)} partitions had no offset before the run "
                "and cannot be un-committed; restored the others"
            )
        progress(f"rolled back {g.group}")
    rows = [
        {
            "cluster": cluster.conf.get("bootstrap.servers"),
            "group": g.group,
            "topic": tp[0],
            "partition": tp[1],
            "previous_offset": current[g.group].get(tp),
            "new_offset": g.restore.get(tp),
            "status": _row_status(states[g.group], tp in g.restore),
            "is_committed": g.group in committed,
            "message": errors[g.group],
        }
        for g in batch
        for tp in sorted(set(g.restore) | set(g.unset))
    ]
    return rows, errors


def _restore(cluster: Cluster, groups: list[RollbackGroup]) -> dict[str, str]:
    """Write back each group's previous offsets (or delete a group that had none), only if
    it is Empty or Dead right now; group -> error for those that were not."""
    may_write, not_described, active = kafka.by_state(cluster, [g.group for g in groups])
    failed = {group: str(error) for group, error in {**not_described, **active}.items()}
    ready = [g for g in groups if g.group in may_write]
    restores = {g.group: g.restore for g in ready if g.restore}
    for group, error in kafka.alter_offsets_each(cluster, restores).items():
        if error is not None:
            failed[group] = str(error)
    deletes = [g.group for g in ready if not g.restore and g.unset]
    for group, text in kafka.delete_groups(cluster, deletes).items():
        if text:
            failed[group] = f"deleting group {group}: {text}"
    return failed


def _row_status(state: str, had_offset: bool) -> str:
    if state == "landed":
        return "RESTORED" if had_offset else "UNSET"
    return "NOT_WRITTEN" if state == "not_written" else "MOVED"


@dataclass
class RollbackRun:
    """What one `--rollback RUN_ID` did: rows for output and ledger, errors per group."""

    plan: list[RollbackGroup]
    rows: list[dict]
    errors: dict[str, str]  # group -> why it was not rolled back
    run_id: str
    writer: str


def run_rollback(
    spark: SparkSession,
    cluster: Cluster,
    ledger_path: str,
    run_id: str,
    execute: bool,
    progress: Callable[[str], None],
    batch_groups: int | None = None,
) -> RollbackRun:
    """Roll back `run_id` on `cluster` (dry run unless `execute`) and record it in the ledger.

    Refused (UsageError) when there is no ledger, when the run committed nothing, or when the
    run changed another cluster than the one given: offsets are never written back to the
    wrong cluster."""
    from ferry import delta
    from ferry.errors import UsageError

    if not delta.exists(ledger_path):
        raise UsageError(f"no ledger at ledger.path {ledger_path}")
    ledger_df = ledger.read(spark, ledger_path)
    changed = {
        r.cluster for r in ledger.filter_run_writes(ledger_df, run_id).select("cluster").collect()
    }
    here = cluster.conf.get("bootstrap.servers")
    if changed and changed != {here}:
        raise UsageError(
            f"run {run_id} changed {', '.join(sorted(c or '?' for c in changed))}, "
            f"not {cluster.name}"
        )
    plan = rollback_plan(ledger_df, run_id)
    if not plan:
        raise UsageError(f"run {run_id} committed nothing in ledger {ledger_path}")
    own = ledger.Ledger(spark, ledger_path, ledger.new_run_id("rollback"), "rollback", execute)
    if execute:  # write-ahead, as every write: what is about to be restored, before it is
        here_id = cluster.conf.get("bootstrap.servers")
        own.append(
            [
                {
                    "cluster": here_id,
                    "group": g.group,
                    "topic": tp[0],
                    "partition": tp[1],
                    "previous_offset": g.run_offsets.get(tp),
                    "new_offset": g.restore.get(tp),
                    "status": "RESTORE" if tp in g.restore else "UNSET",
                }
                for g in plan
                for tp in sorted(set(g.restore) | set(g.unset))
            ],
            ledger.PHASE_INTENT,
        )
    rows, errors = apply_rollback(cluster, plan, execute, progress, batch_groups)
    writer = own.append(rows, ledger.PHASE_OUTCOME if execute else ledger.PHASE_PLAN)
    return RollbackRun(plan, rows, {g: e for g, e in errors.items() if e}, own.run_id, writer)


def rollback_job(
    cfg: FerryConfig,
    section: str,
    run_id: str,
    execute: bool,
    output: str,
    progress: Callable[[str], None],
) -> int:
    """`migrate --rollback RUN_ID` and `groups rollback RUN_ID`: roll the run back on the
    config's `section` cluster (the one it changed), print one row per group partition and
    a summary, and return the exit code (0 every group rolled back, 1 not)."""
    from ferry.config import require
    from ferry.errors import EXIT_INCOMPLETE, EXIT_OK
    from ferry.output import emit, print_summary
    from ferry.session import build_session

    require(cfg, section, "ledger.path")
    cluster = cfg.client(section)
    kafka.check_reachable(cluster)  # one clear error instead of a timeout mid-run
    spark = build_session("ferry-rollback")
    done = run_rollback(
        spark, cluster, cfg.ledger.path, run_id, execute, progress, cfg.admin.batch_groups
    )
    emit(done.rows, ROLLBACK_COLUMNS, output)
    for group, error in sorted(done.errors.items()):
        print(f"not rolled back: {group}: {error}", file=sys.stderr)
    n, failed = len(done.plan), len(done.errors)
    if execute:
        summary = f"{n - failed} of {n} groups rolled back"
    else:
        summary = f"{n} groups would be rolled back (dry run; re-run with --execute)"
    summary += f"; run {done.run_id}; ledger {cfg.ledger.path} via {done.writer}"
    print_summary(summary, output)
    return EXIT_OK if not done.errors else EXIT_INCOMPLETE
