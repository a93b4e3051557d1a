"""Changes to groups on one cluster, as plans: copy/split, reset and delete, their output rows
and ledger rows. Pure: plain values in (what `ferry.groups.describe.fetch_groups` found), plain
values out; no Spark, no Kafka client. `ferry.groups.apply` hands the plans to the write path.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ferry.groups.reset import ResetError, Target, resolve_targets, scoped_partitions
from ferry.groups.selection import is_selected
from ferry.keys import TopicPartitionKey
from ferry.status import GroupStatus
from ferry.write import rules

if TYPE_CHECKING:
    from ferry.groups.describe import GroupsSnapshot
    from ferry.kafka.groups import GroupInfo


def refusal(info: GroupInfo | None) -> str | None:
    """kafka-consumer-groups' own wording for a group that cannot be changed now."""
    if info is None or info.state.is_inactive:
        return None
    return (
        f"Assignments can only be reset if the group '{info.group}' is inactive, "
        f"but the current state is {info.state.title}."
    )


@dataclass
class GroupChange:
    """One group's planned change: targets to commit (or a delete), or why not."""

    group: str
    action: str  # copy, reset, delete
    targets: list[Target]
    source_group: str | None = None
    error: str | None = None
    is_delete: bool = False
    committed: bool = False
    warnings: list[str] = field(default_factory=list)
    outcome: str | None = None  # the status ferry.write.commit reported, once executed
    skip: str | None = None  # nothing to write, and why (not an error)


def plan_copy(
    source: str,
    new_groups: Sequence[str],
    state: GroupsSnapshot,
    topic_pattern: str | None,
    allow_active_source: bool,
    allow_rewind: bool = False,
) -> list[GroupChange]:
    """Copy the source group's committed offsets (optionally only matching topics) into each
    new group, which must be Empty or absent. Forward only, as `migrate`: a new group already
    at or past the source everywhere is left alone, one ahead on some partitions and behind on
    others is refused unless `allow_rewind`."""
    offsets = {
        tp: o
        for tp, o in sorted(state.committed.get(source, {}).items())
        if is_selected(tp[0], topic_pattern)
    }
    source_info = state.infos.get(source)
    source_error = None
    warnings = []
    if not offsets:
        what = f" on topics matching {topic_pattern}" if topic_pattern else ""
        source_error = f"group {source} has no committed offsets{what}"
    elif source_info is not None and not source_info.state.is_inactive:
        if allow_active_source:
            warnings.append(
                f"source group {source} is {source_info.state}: its position is still moving; "
                "the copy is a snapshot of this moment"
            )
        else:
            source_error = (
                f"source group {source} is {source_info.state}, not Empty; its offsets are still "
                "moving (use --allow-active-source to copy a snapshot anyway)"
            )
    changes = []
    for new in new_groups:
        previous = state.committed.get(new, {})
        targets = [Target(new, t, p, previous.get((t, p)), o) for (t, p), o in offsets.items()]
        error = source_error
        info = state.infos.get(new)
        if error is None and new == source:
            error = f"group {new} is the source group"
        if error is None and info is not None and not info.state.is_inactive:
            error = f"group {new} is {info.state}, not Empty; refused"
        change = GroupChange(new, "copy", targets, source, error, warnings=list(warnings))
        if error is None and previous:
            decision, reason = rules.forward_decision(offsets, previous, allow_rewind)
            if decision == rules.DECISION_MIXED:
                change.error = reason
            elif decision == rules.DECISION_ALREADY:
                change.skip = f"group {new} is at or past {source} on every partition"
        changes.append(change)
    return changes


def reset_partitions(
    groups: Sequence[str],
    state: GroupsSnapshot,
    scope: Mapping[str, tuple[int, ...] | None] | None,
    file_offsets: Mapping[str, Mapping[TopicPartitionKey, int]] | None,
) -> dict[str, list[TopicPartitionKey] | ResetError]:
    """Each group's partitions to reset, or the error that keeps it from being reset.
    With --from-file the file decides, narrowed by --topic when given."""
    out: dict[str, list[TopicPartitionKey] | ResetError] = {}
    for group in groups:
        committed = state.committed.get(group, {})
        try:
            if file_offsets is not None:
                keys = sorted(file_offsets.get(group, {}))
                if scope is not None:
                    allowed = set(scoped_partitions(scope, committed, state.topic_partitions))
                    keys = [k for k in keys if k in allowed]
                for topic, partition in keys:
                    count = state.topic_partitions.get(topic)
                    if count is None or partition >= count:
                        raise ResetError(
                            f"group {group}: {topic}[{partition}] does not exist on the cluster"
                        )
            else:
                keys = scoped_partitions(scope, committed, state.topic_partitions)
            if not keys:
                raise ResetError(f"group {group}: no partitions to reset in the chosen scope")
            out[group] = keys
        except ResetError as exc:
            out[group] = exc
    return out


def plan_reset(
    partitions: Mapping[str, list[TopicPartitionKey] | ResetError],
    state: GroupsSnapshot,
    spec: str,
    value: object,
    file_offsets: Mapping[str, Mapping[TopicPartitionKey, int]] | None,
    bounds: Mapping[TopicPartitionKey, tuple[int, int]],
    offsets_at_time: Mapping[TopicPartitionKey, int | None] | None,
) -> list[GroupChange]:
    changes = []
    for group, keys in partitions.items():
        error = refusal(state.infos.get(group))
        targets: list[Target] = []
        if isinstance(keys, ResetError):
            error = error or str(keys)
        else:
            try:
                arg = file_offsets[group] if file_offsets is not None else value
                targets = resolve_targets(
                    group, spec, arg, keys, state.committed.get(group, {}), bounds,
                    offsets_at_time,
                )  # fmt: skip
            except ResetError as exc:
                error = error or str(exc)
        changes.append(GroupChange(group, "reset", targets, None, error))
    return changes


def plan_delete(groups: Sequence[str], state: GroupsSnapshot) -> list[GroupChange]:
    """Delete Empty groups; their offsets go to the ledger so a rollback can restore them."""
    changes = []
    for group in groups:
        info = state.infos.get(group)
        committed = state.committed.get(group, {})
        targets = [Target(group, t, p, o, o) for (t, p), o in sorted(committed.items())]
        error = None
        if info is not None and not info.state.is_inactive:
            error = f"group {group} is {info.state.title}; only Empty or Dead groups are deleted"
        changes.append(GroupChange(group, "delete", targets, None, error, is_delete=True))
    return changes


def change_status(change: GroupChange, execute: bool) -> GroupStatus:
    """A group's status in the plan and outcome rows, named as `migrate` names it: READY in a
    dry run (would be written), then COMMITTED or DELETED."""
    if change.error is not None:
        return GroupStatus(change.outcome or GroupStatus.REFUSED)
    if change.skip is not None:
        return GroupStatus.ALREADY_COPIED
    if not execute:
        return GroupStatus.READY
    return GroupStatus.DELETED if change.is_delete else GroupStatus.COMMITTED


def change_rows(changes: Iterable[GroupChange], execute: bool) -> list[dict]:
    """Output rows, one per group × partition (a group with nothing to write: one row)."""
    rows = []
    for change in changes:
        status = change_status(change, execute)
        for t in change.targets or [None]:
            rows.append(
                {
                    "group": change.group,
                    "source_group": change.source_group,
                    "topic": t.topic if t else None,
                    "partition": t.partition if t else None,
                    "previous_offset": t.previous_offset if t else None,
                    "new_offset": None if (t is None or change.is_delete) else t.new_offset,
                    "status": status,
                    "note": change.error or change.skip or (t.note if t else None),
                }
            )
    return rows


def ledger_rows(
    changes: Iterable[GroupChange], cluster_id: str | None, execute: bool
) -> list[dict]:
    """Ledger rows for the shared audit table of the cluster whose bootstrap servers are
    `cluster_id` (rollback restores `previous_offset`)."""
    out = []
    for row, change in (
        (r, c) for c in changes for r in change_rows([c], execute) if r["topic"] is not None
    ):
        out.append(
            {
                "cluster": cluster_id,
                "group": row["group"],
                "source_group": row["source_group"],
                "topic": row["topic"],
                "partition": row["partition"],
                "previous_offset": row["previous_offset"],
                "new_offset": row["new_offset"],
                "status": row["status"],
                "is_committed": change.committed,
                "message": row["note"],
            }
        )
    return out
