"""Undo a run: write back the offsets a group had before a `migrate`, `copy` or `reset` run.

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

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

from pyspark.sql import DataFrame, SparkSession

from ferry import kafka_admin, ledger
from ferry.kafka_admin import Cluster

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
) -> tuple[list[dict], dict[str, str | None]]:
    """Returns (ledger rows, group -> error or None)."""
    rows: list[dict] = []
    errors: dict[str, str | None] = defaultdict(lambda: None)
    for g in plan:
        committed = False
        error = None
        current = kafka_admin.committed_offsets(cluster, [g.group])[g.group]
        state = "landed" if g.is_confirmed else unconfirmed_state(g, current)
        if state == "not_written":
            error = None
            progress(f"{g.group}: the run never wrote it; nothing to roll back")
        elif state == "moved":
            error = (
                f"group {g.group}: its offsets changed since the run, which never recorded "
                "whether its write landed; not rolled back"
            )
        if execute and state == "landed":
            try:
                if g.restore and g.unset:
                    error = (
                        f"group {g.group}: {len(g.unset)} partitions had no offset before the run "
                        "and cannot be un-committed; restored the others"
                    )
                if g.restore:
                    kafka_admin.commit_if_inactive(cluster, g.group, g.restore)
                    committed = True
                elif g.unset:
                    info = kafka_admin.describe_groups(cluster, [g.group])[g.group]
                    if not info.is_inactive:
                        raise kafka_admin.GroupActiveError(
                            f"{cluster.name}: group {g.group} is {info.state}, not Empty; refused"
                        )
                    err = kafka_admin.delete_groups(cluster, [g.group])[g.group]
                    if err:
                        raise kafka_admin.ClusterError(f"deleting group {g.group}: {err}")
                    committed = True
                progress(f"rolled back {g.group}")
            except kafka_admin.ClusterError as exc:
                error = str(exc)
        errors[g.group] = error
        for tp in sorted(set(g.restore) | set(g.unset)):
            rows.append(
                {
                    "cluster": cluster.conf.get("bootstrap.servers"),
                    "group": g.group,
                    "topic": tp[0],
                    "partition": tp[1],
                    "previous_offset": current.get(tp),
                    "new_offset": g.restore.get(tp),
                    "status": _row_status(state, tp in g.restore),
                    "is_committed": committed,
                    "message": error,
                }
            )
    return rows, dict(errors)


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
) -> RollbackRun:
    """Roll back `run_id` on `cluster` (dry run unless `execute`) and record it in the ledger.

    Refused (UsageError) when there is no ledger, when the run committed nothing, or when the
    run changed another cluster than the one given: offsets are never written back to the
    wrong cluster."""
    from ferry import delta
    from ferry.cli import UsageError

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
    rows, errors = apply_rollback(cluster, plan, execute, progress)
    writer = own.append(rows, ledger.PHASE_OUTCOME if execute else ledger.PHASE_PLAN)
    return RollbackRun(plan, rows, {g: e for g, e in errors.items() if e}, own.run_id, writer)
