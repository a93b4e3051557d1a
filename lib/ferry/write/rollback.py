"""Undo a run: write back the offsets its groups had before a `migrate`, `copy`, `reset`,
`delete` (or rollback) run. `rollback_job` is the one entry for `migrate --rollback` and
`groups rollback`; docs/jobs/migrate.md#rollback says what it promises.

From the ledger, for each group the run wrote (an outcome committed or UNKNOWN) or only
announced (an intent without outcome: the run stopped first): the offsets it had before, the
offsets the run wrote, and whether a later run may have written it since
(`rules.superseding_runs`) — such a group is named and left alone. The others go through the
guarded write path (`ferry.write.commit.execute_writes`: write-ahead intent, claims, batches of
`admin.batch_groups`, one ledger commit of outcomes per batch) with this module's check right
before each write (`rules.rollback_check`): a group still at exactly the offsets the run wrote
is restored (or deleted, when it had no offsets before the run); one already at its previous
offsets is ALREADY_RESTORED (an earlier, killed try did it, or the run never wrote it) and
counts as rolled back; anything else moved on since and is named and left alone (MOVED).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from ferry import kafka
from ferry.kafka.cluster import Cluster
from ferry.keys import TopicPartitionKey
from ferry.status import GroupStatus
from ferry.write import commit, ledger, rules

if TYPE_CHECKING:
    from ferry.config import FerryConfig

# What a rollback prints, per group partition (migrate and groups alike).
ROLLBACK_COLUMNS = ["group", "topic", "partition", "previous_offset", "new_offset", "status"]
# A group's rollback is done with one of these (and no partition left it could not undo).
ROLLED_BACK = frozenset({GroupStatus.RESTORED, GroupStatus.DELETED, GroupStatus.ALREADY_RESTORED})


@dataclass
class RollbackGroup:
    group: str
    restore: dict[TopicPartitionKey, int]  # partitions that had an offset before the run
    unset: list[TopicPartitionKey]  # partitions that had none
    wrote: dict[TopicPartitionKey, int | None]  # what the run wrote (None: deleted)
    since: datetime | None = None  # when the run announced its write
    is_confirmed: bool = True  # False: intent only, the outcome was never recorded
    superseded_by: list[str] = field(default_factory=list)  # later runs that may have written it

    @property
    def partitions(self) -> list[TopicPartitionKey]:
        return sorted(set(self.restore) | set(self.unset))


@dataclass
class RunHistory:
    """What the ledger says about a run's groups on one cluster: its own rows, and per group
    every other executing run's writes of it (`rules.GroupWriteRecord`)."""

    rows: list  # the run's intent, outcome (and older committed) rows
    others: dict[str, list[rules.GroupWriteRecord]]
    rollbacks: set[str]  # earlier rollbacks of the run (its reruns)


def _row_time() -> F.Column:
    return F.coalesce(F.col("row_time"), F.col("run_time"))


def run_history(own_df: DataFrame, others_df: DataFrame, run_id: str) -> RunHistory:
    """The run's rows (`own_df`: its write rows, `ledger.read_run_writes`), and what other
    executing runs did to its groups on its cluster (`others_df`: their write rows there,
    `ledger.read_other_writes`, distinct rows enough)."""
    rows = own_df.select(
        "group",
        "topic",
        "partition",
        "previous_offset",
        "new_offset",
        "phase",
        "is_committed",
        "status",
        _row_time().alias("time"),
    ).collect()
    groups_df = own_df.select("group").distinct()
    announced = (F.col("phase") == ledger.PHASE_INTENT) | (
        F.col("phase").isNull() & F.col("is_committed")
    )
    summary_df = (
        others_df.join(groups_df, "group", "left_semi")
        .groupBy("run_id", "group")
        .agg(
            F.min(F.when(announced, _row_time())).alias("time"),
            F.max((F.col("phase") == ledger.PHASE_OUTCOME).cast("int")).alias("has_outcome"),
            F.max(F.col("is_committed").cast("int")).alias("is_committed"),
            F.max((F.col("status") == GroupStatus.UNKNOWN.value).cast("int")).alias("unknown"),
            F.first("rollback_of", ignorenulls=True).alias("rollback_of"),
        )
    )
    others: dict[str, list[rules.GroupWriteRecord]] = {}
    rollbacks: set[str] = set()
    for r in summary_df.collect():
        if r.rollback_of == run_id:
            rollbacks.add(r.run_id)
        if r.time is None:
            continue
        may_have_written = not r.has_outcome or bool(r.is_committed) or bool(r.unknown)
        others.setdefault(r.group, []).append(
            rules.GroupWriteRecord(
                r.run_id, r.time, may_have_written, bool(r.is_committed), r.rollback_of
            )
        )
    return RunHistory(rows, others, rollbacks)


def rollback_plan(history: RunHistory, run_id: str) -> list[RollbackGroup]:
    """The groups the run wrote, or may have (an outcome committed or UNKNOWN, or an intent
    without outcome), with the offsets they had before it and the offsets it wrote. Outcome
    rows hold the offsets read right before the write; an intent's, those of the plan."""
    rows = history.rows
    outcome = {r.group for r in rows if r.phase == ledger.PHASE_OUTCOME}
    landed = {
        r.group
        for r in rows
        if r.is_committed or (r.phase == ledger.PHASE_OUTCOME and r.status == GroupStatus.UNKNOWN)
    }
    since: dict[str, datetime] = {}
    for r in rows:
        if (r.phase == ledger.PHASE_INTENT or r.phase is None) and r.time is not None:
            since[r.group] = min(since.get(r.group, r.time), r.time)
    groups: dict[str, RollbackGroup] = {}
    for r in rows:
        if r.group in landed:
            # its outcome rows (UNKNOWN ones too); tables older than the phases: committed rows
            use = r.phase == ledger.PHASE_OUTCOME or (r.phase is None and r.is_committed)
        else:
            use = r.phase == ledger.PHASE_INTENT and r.group not in outcome
        if not use or r.topic is None:
            continue
        g = groups.setdefault(
            r.group,
            RollbackGroup(r.group, {}, [], {}, since.get(r.group), is_confirmed=r.group in landed),
        )
        tp = (r.topic, r.partition)
        g.wrote[tp] = r.new_offset
        if r.previous_offset is None:
            g.unset.append(tp)
        else:
            g.restore[tp] = r.previous_offset
    for g in groups.values():
        if g.since is not None:
            g.superseded_by = rules.superseding_runs(
                run_id, g.since, history.others.get(g.group, [])
            )
    return [groups[k] for k in sorted(groups)]


@dataclass
class RollbackWrite(commit.GroupWrite):
    """A group's rollback as a guarded write: `offsets` the ones to restore."""

    unset: tuple[TopicPartitionKey, ...] = ()
    wrote: dict[TopicPartitionKey, int | None] = field(default_factory=dict)
    run_id: str = ""  # the run being rolled back

    @property
    def partition_count(self) -> int:
        return len(set(self.offsets) | set(self.unset))


def _stuck_note(group: str, stuck: Sequence[TopicPartitionKey]) -> str:
    return (
        f"group {group}: {len(stuck)} partitions had no offset before the run and cannot be "
        "un-committed; restored the others"
    )


def check_batch(
    cluster: Cluster, batch: Sequence[RollbackWrite]
) -> tuple[dict[str, commit.WriteOutcome], dict[str, rules.RollbackCheck]]:
    """Each group's offsets now, checked against the run's (`rules.rollback_check`): the
    outcomes of the groups decided without a write (ALREADY_RESTORED, MOVED, FAILED), and the
    checks of those to write."""
    errors: dict[str, kafka.ClusterError] = {}
    current = kafka.committed_offsets(cluster, [w.group for w in batch], errors)
    out: dict[str, commit.WriteOutcome] = {}
    checks: dict[str, rules.RollbackCheck] = {}
    for w in batch:
        if w.group in errors:
            out[w.group] = commit.WriteOutcome(
                w.group, GroupStatus.FAILED, False, str(errors[w.group])
            )
            continue
        now = current[w.group]
        check = rules.rollback_check(now, w.offsets, w.unset, w.wrote)
        if check.decision == rules.ROLLBACK_ALREADY:
            note = _stuck_note(w.group, check.stuck) if check.stuck else None
            out[w.group] = commit.WriteOutcome(
                w.group, GroupStatus.ALREADY_RESTORED, True, note, now
            )
        elif check.decision == rules.ROLLBACK_MOVED:
            message = (
                f"group {w.group}: its offsets changed since run {w.run_id} wrote them; left alone"
            )
            out[w.group] = commit.WriteOutcome(w.group, GroupStatus.MOVED, False, message, now)
        else:
            checks[w.group] = check
            out[w.group] = commit.WriteOutcome(w.group, GroupStatus.READY, False, None, now)
    return out, checks


def write_batch(
    cluster: Cluster, batch: Sequence[commit.GroupWrite]
) -> dict[str, commit.WriteOutcome]:
    """Step 3 of the write path for a rollback's batch: states (Empty or Dead only), offsets
    now, `rules.rollback_check`, then every restore and delete in flight together."""
    rollbacks = [w for w in batch if isinstance(w, RollbackWrite)]
    out: dict[str, commit.WriteOutcome] = {}
    may_write, failed, active, _listed = kafka.by_state(cluster, [w.group for w in rollbacks])
    for group, error in failed.items():
        out[group] = commit.WriteOutcome(group, GroupStatus.FAILED, False, str(error))
    for group, error in active.items():
        out[group] = commit.WriteOutcome(group, GroupStatus.REFUSED, False, str(error))
    inactive = [w for w in rollbacks if w.group in may_write]
    checked, checks = check_batch(cluster, inactive)
    out.update({g: o for g, o in checked.items() if g not in checks})
    previous = {g: checked[g].previous for g in checks}
    deletes = [
        w
        for w in inactive
        if w.group in checks and checks[w.group].decision == rules.ROLLBACK_DELETE
    ]
    alters = [
        w
        for w in inactive
        if w.group in checks and checks[w.group].decision == rules.ROLLBACK_ALTER
    ]
    if deletes:
        out.update(commit.delete(cluster, deletes, previous))
    if alters:
        results = kafka.alter_offsets_each(cluster, {w.group: w.offsets for w in alters})
        for w in alters:
            done = commit.outcome(
                w.group, results[w.group], previous[w.group], GroupStatus.RESTORED
            )
            if done.is_committed and checks[w.group].stuck:
                done.message = _stuck_note(w.group, checks[w.group].stuck)
            out[w.group] = done
    return out


def _rows(
    g: RollbackGroup,
    cluster_id: str | None,
    status: str,
    previous: dict | None,
    message: str | None,
) -> list[dict]:
    """One ledger (and output) row per partition of the group: `previous_offset` its offset
    right before this rollback as read (`previous` None: an intent's, what the run wrote),
    `new_offset` the one restored (None: none before the run)."""
    return [
        {
            "cluster": cluster_id,
            "group": g.group,
            "topic": tp[0],
            "partition": tp[1],
            "previous_offset": g.wrote.get(tp) if previous is None else previous.get(tp),
            "new_offset": g.restore.get(tp),
            "status": str(status),
            "is_committed": False,
            "message": message,
        }
        for tp in g.partitions
    ]


def _superseded_message(g: RollbackGroup) -> str:
    runs = ", ".join(g.superseded_by)
    return (
        f"group {g.group}: written since by run {runs}, which this run's rollback would undo; "
        f"left alone (roll back {runs} first)"
    )


@dataclass
class RollbackRun:
    """What one `--rollback RUN_ID` did: rows for output and ledger, errors per group."""

    plan: list[RollbackGroup]
    rows: list[dict]
    errors: dict[str, str]  # group -> why it was not (fully) rolled back
    statuses: dict[str, str]
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
    lease_ms: int = 900_000,
) -> RollbackRun:
    """Roll back `run_id` on `cluster` (dry run unless `execute`) and record it in the ledger.

    Refused (UsageError) when there is no ledger, when the run committed nothing, or when the
    run changed another cluster than the one given: offsets are never written back to the
    wrong cluster."""
    from ferry import delta
    from ferry.errors import UsageError
    from ferry.runtime import keep, release

    if not delta.exists(ledger_path):
        raise UsageError(f"no ledger at ledger.path {ledger_path}")
    progress(f"reading run {run_id}'s writes from the ledger")
    own_df = keep(ledger.read_run_writes(spark, ledger_path, run_id))
    changed = {r.cluster for r in own_df.select("cluster").distinct().collect()}
    here = cluster.conf.get("bootstrap.servers")
    if changed and changed != {here}:
        raise UsageError(
            f"run {run_id} changed {', '.join(sorted(c or '?' for c in changed))}, "
            f"not {cluster.name}"
        )
    others_df = ledger.read_other_writes(spark, ledger_path, run_id, here)
    history = run_history(own_df, others_df, run_id)
    release(own_df)
    progress(f"run {run_id}: {len(history.rows)} rows of writes")
    plan = rollback_plan(history, run_id)
    if not plan:
        raise UsageError(f"run {run_id} committed nothing in ledger {ledger_path}")
    own = ledger.Ledger(
        spark, ledger_path, ledger.new_run_id("rollback"), "rollback", execute, rollback_of=run_id
    )
    blocked = [g for g in plan if g.superseded_by]
    writes = [
        RollbackWrite(
            g.group,
            dict(g.restore),
            _rows(g, here, GroupStatus.READY, None, None),
            is_delete=not g.restore,
            is_forward_only=False,
            unset=tuple(g.unset),
            wrote=dict(g.wrote),
            run_id=run_id,
        )
        for g in plan
        if not g.superseded_by
    ]
    outcomes: dict[str, commit.WriteOutcome] = {
        g.group: commit.WriteOutcome(
            g.group, GroupStatus.WRITTEN_SINCE, False, _superseded_message(g)
        )
        for g in blocked
    }
    blocked_rows = [
        row
        for g in blocked
        for row in _rows(g, here, GroupStatus.WRITTEN_SINCE, {}, outcomes[g.group].message)
    ]
    if execute:
        outcomes.update(
            commit.execute_writes(
                cluster, writes, blocked_rows, own, lease_ms, progress, batch_groups,
                write=write_batch, ignore_claims={run_id, *history.rollbacks},
            )
        )  # fmt: skip
    else:
        size = max(1, batch_groups or commit.BATCH_GROUPS)
        for start in range(0, len(writes), size):
            outcomes.update(check_batch(cluster, writes[start : start + size])[0])
    rows = []
    for g in plan:  # sorted by group
        o = outcomes[g.group]
        group_rows = _rows(g, here, o.status, o.previous, o.message)
        for row in group_rows:
            row["is_committed"] = o.is_committed
        rows += group_rows
    if not execute:
        own.append(rows, ledger.PHASE_PLAN)
    done = ROLLED_BACK if execute else ROLLED_BACK | {GroupStatus.READY}
    errors = {
        g: o.message or str(o.status)
        for g, o in outcomes.items()
        if o.message or o.status not in done
    }
    statuses = {g: str(o.status) for g, o in outcomes.items()}
    writer = own.writer or delta.writer_name(spark)
    return RollbackRun(plan, rows, errors, statuses, own.run_id, writer)


def given_run_id(positional: str | None, option: str | None) -> str:
    """The run id `groups rollback` was given, as RUN_ID or --rollback RUN_ID (once)."""
    from ferry.errors import UsageError

    if positional and option and positional != option:
        raise UsageError("give the run id once: RUN_ID or --rollback RUN_ID")
    if not (run_id := positional or option):
        raise UsageError("rollback needs the RUN_ID of a copy, reset or delete run")
    return run_id


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
    a summary, and return the exit code: 0 every group rolled back (or, in a dry run, would
    be), 75 the only groups left are claimed by another run, 1 otherwise (each group left
    named on stderr, one line each)."""
    from ferry.config import require
    from ferry.errors import EXIT_INCOMPLETE, EXIT_OK, EXIT_TRY_AGAIN
    from ferry.output import emit, print_summary
    from ferry.session import build_session

    require(cfg, section, "ledger.path")
    cluster = Cluster.from_config(cfg, section)
    kafka.check_reachable(cluster)  # one clear error instead of a timeout mid-run
    spark = build_session("ferry-rollback")
    done = run_rollback(
        spark, cluster, cfg.ledger.path, run_id, execute, progress, cfg.admin.batch_groups,
        cfg.ledger.lease_ms,
    )  # fmt: skip
    emit(done.rows, ROLLBACK_COLUMNS, output)
    for group, error in sorted(done.errors.items()):
        print(f"not rolled back: {group}: {error}", file=sys.stderr)
    n, failed = len(done.plan), len(done.errors)
    if execute:
        summary = f"{n - failed} of {n} groups rolled back"
    else:
        summary = (
            f"{n - failed} of {n} groups would be rolled back (dry run; re-run with --execute)"
        )
    summary += f"; run {done.run_id}; ledger {cfg.ledger.path} via {done.writer}"
    print_summary(summary, output)
    if not done.errors:
        return EXIT_OK
    claimed = {g for g, s in done.statuses.items() if s == GroupStatus.CLAIMED}
    return EXIT_TRY_AGAIN if set(done.errors) <= claimed else EXIT_INCOMPLETE
