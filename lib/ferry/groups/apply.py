"""The changing verbs (`groups copy`, `reset`, `delete`) from plan to report: plans made from
what the cluster says now (`ferry.groups.plans`, pure), written through the guarded write path
when --execute (`ferry.write.commit`: intent, state check, forward rule, verified write,
outcome), then the rows, warnings, summary and exit code."""

from __future__ import annotations

import sys
from collections.abc import Callable, Collection, Mapping, Sequence

from ferry import kafka
from ferry.errors import EXIT_INCOMPLETE, EXIT_OK, UsageError
from ferry.groups import describe, finish, plans, reset, selection
from ferry.groups.plans import GroupChange
from ferry.groups.reset import Target
from ferry.kafka.cluster import Cluster
from ferry.output import emit, print_summary
from ferry.status import GroupStatus
from ferry.write import commit, reruns
from ferry.write.ledger import Ledger

CHANGE_COLUMNS = [
    "group",
    "source_group",
    "topic",
    "partition",
    "previous_offset",
    "new_offset",
    "status",
    "note",
]
_DONE = {"copy": "copied", "reset": "reset", "delete": "deleted"}
Write = Callable[[list[GroupChange]], list[GroupChange]]  # writes (with --execute), returns them


def check_copy(targets: Sequence[str], delete_source: bool, allow_active_source: bool) -> None:
    """`groups copy`'s options that cannot go together (UsageError)."""
    if len(set(targets)) != len(targets):
        raise UsageError("--to names a group twice")
    if delete_source and allow_active_source:
        raise UsageError("--delete-source cannot be combined with --allow-active-source")


def copy(
    cluster: Cluster,
    source: str,
    targets: Sequence[str],
    topic_pattern: str | None,
    allow_active_source: bool,
    allow_rewind: bool,
    delete_source: bool,
    write: Write | None,
) -> list[GroupChange]:
    """`groups copy`: the copies planned and written; with `delete_source`, the source group
    deleted afterwards, and only when every copy was written (`write` None: a dry run)."""
    state = describe.fetch_groups(cluster, [source, *targets])
    planned = plans.plan_copy(
        source, list(targets), state, topic_pattern, allow_active_source, allow_rewind
    )
    if write is None:
        return planned + (plans.plan_delete([source], state) if delete_source else [])
    planned = write(planned)
    if delete_source:
        deleted = delete_source_change(cluster, source, planned)
        if deleted is None:
            print(f"warning: {source} kept: not every copy succeeded", file=sys.stderr)
        else:
            planned += write([deleted])
    return planned


def plan_reset(
    cluster: Cluster,
    chosen: selection.ResetSelection,
    spec: reset.ResetSpec,
    value: object,
    progress: Callable[[str], None],
    unfinished: finish.Unfinished | None = None,
) -> list[GroupChange]:
    """`groups reset`: each chosen group's targets, from the cluster's log bounds (and, for a
    time spec, its timestamp lookups) now; with `unfinished`, a killed relative reset's plan
    finished (`ferry.groups.finish`: `value` is then the one that plan resolved)."""
    state = describe.fetch_groups(cluster, chosen.groups)
    selection.check_scope(chosen.scope, state.topic_partitions)
    partitions = plans.reset_partitions(chosen.groups, state, chosen.scope, chosen.file_offsets)
    keys = {k for v in partitions.values() if isinstance(v, list) for k in v}
    progress(f"resetting {len(chosen.groups)} groups over {len(keys)} partitions")
    bounds = kafka.watermarks(cluster, keys)
    at_time = None
    if spec.is_at_time:
        at_time = kafka.offsets_for_timestamps(cluster, dict.fromkeys(keys, value), bounds)
    planned = plans.plan_reset(partitions, state, spec, value, chosen.file_offsets, bounds, at_time)
    return planned if unfinished is None else finish.plan_finish(unfinished, state, planned)


def write(
    planned: list[GroupChange],
    cluster: Cluster,
    run_ledger: Ledger | None,
    lease_ms: int,
    batch_groups: int | None,
    allow_rewind: bool,
    progress: Callable[[str], None],
    ignore_claims: Collection[str] = (),
) -> list[GroupChange]:
    """Write every planned group that has something to write; the rest are recorded as kept.
    Each change's outcome (or error) is set on it. No ledger: a dry run, nothing written.
    `ignore_claims`: runs whose open intents do not hold a group back (a killed run this one
    finishes). Returns `planned`."""
    if run_ledger is None:
        return planned
    writes = group_writes(planned, cluster, allow_rewind)
    written = {w.group for w in writes}
    cluster_id = cluster.conf.get("bootstrap.servers")
    kept = plans.ledger_rows([c for c in planned if c.group not in written], cluster_id, True)
    if isinstance(run_ledger, reruns.CommandLedger):
        # A group not done with nothing to reset has no ledger row: its commits count it, so
        # the same command knows this run did not do all it was asked (ferry.groups.finish).
        run_ledger.unrecorded = sum(1 for c in planned if c.error is not None and not c.targets)
    outcomes = commit.execute_writes(
        cluster, writes, kept, run_ledger, lease_ms, progress, batch_groups,
        ignore_claims=ignore_claims,
    )  # fmt: skip
    record_outcomes(planned, outcomes)
    return planned


def group_writes(
    changes: Sequence[GroupChange], cluster: Cluster, allow_rewind: bool = False
) -> list[commit.GroupWrite]:
    """The executable changes as guarded writes (copies are forward only; resets may move a
    group anywhere, as kafka-consumer-groups does)."""
    cluster_id = cluster.conf.get("bootstrap.servers")
    return [
        commit.GroupWrite(
            change.group,
            {(t.topic, t.partition): t.new_offset for t in change.targets},
            plans.ledger_rows([change], cluster_id, True),
            is_delete=change.is_delete,
            is_forward_only=change.action == "copy",
            allow_rewind=allow_rewind,
            already_status=GroupStatus.ALREADY_COPIED,
        )
        for change in changes
        if change.error is None and change.skip is None
    ]


def record_outcomes(
    changes: Sequence[GroupChange], outcomes: Mapping[str, commit.WriteOutcome]
) -> None:
    """Carry what ferry.write.commit did back onto the changes (errors stay with their group)."""
    for change in changes:
        outcome = outcomes.get(change.group)
        if outcome is None or change.error is not None:
            continue
        change.outcome = outcome.status
        change.committed = outcome.is_committed
        if outcome.status == GroupStatus.ALREADY_COPIED:
            change.skip = outcome.message
        elif not outcome.is_committed:
            change.error = outcome.message


def delete_source_change(
    cluster: Cluster, source: str, changes: Sequence[GroupChange]
) -> GroupChange | None:
    """`--delete-source`: the source group's delete, once every copy is done."""
    if not changes or not all(c.committed or (c.skip and not c.error) for c in changes):
        return None
    committed = kafka.committed_offsets(cluster, [source])[source]
    return GroupChange(
        source,
        "delete",
        [Target(source, t, p, o, o) for (t, p), o in sorted(committed.items())],
        is_delete=True,
    )


def report(
    planned: Sequence[GroupChange],
    action: str,
    execute: bool,
    fmt: str,
    export: bool,
    run_ledger: Ledger | None,
) -> int:
    """The rows (or, with `export`, the kafka-consumer-groups CSV), warnings, the groups not
    done, the summary; exit 0 when every group was done, 1 otherwise."""
    for change in planned:
        for warning in change.warnings:
            print(f"warning: {warning}", file=sys.stderr)
    if export:
        with_group = len({c.group for c in planned}) > 1
        sys.stdout.write(
            reset.format_offsets_csv([t for c in planned for t in c.targets], with_group)
        )
    else:
        emit(plans.change_rows(planned, execute), CHANGE_COLUMNS, fmt)
    failed = [c for c in planned if c.error is not None]
    for change in failed:
        print(f"not done: {change.group}: {change.error}", file=sys.stderr)
    done, verb = len(planned) - len(failed), _DONE[action]
    if execute:
        suffix = ""
        if run_ledger is not None:
            suffix = f"; run {run_ledger.run_id}; ledger {run_ledger.path} via {run_ledger.writer}"
        summary = f"{done} of {len(planned)} groups {verb}{suffix}"
    else:
        summary = f"{done} of {len(planned)} groups would be {verb}"
        summary += " (dry run; re-run with --execute)"
    print_summary(summary, "csv" if export else fmt)
    return EXIT_OK if not failed else EXIT_INCOMPLETE
