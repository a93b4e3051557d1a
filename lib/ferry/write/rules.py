"""The rules of the write path, pure (plain values in, a decision out), so that plan-time
decisions (`ferry.migrate.decision`, `ferry.groups.plans`) and the checks right before each write
(`ferry.write.commit`, `ferry.write.rollback`) apply the same rules without importing it:

- the forward rule: whether writing a group's target offsets over the ones it has moves it
  forward (`forward_decision`);
- a rollback's two checks (docs/jobs/migrate.md#rollback): whether a later run may have
  written the group since (`superseding_runs`, from the ledger), and whether the group is still
  at the offsets the run wrote, already back, or moved on (`rollback_check`, from the cluster).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from ferry.keys import TopicPartitionKey

DECISION_ALREADY = "already"
DECISION_FORWARD = "forward"
DECISION_MIXED = "mixed"


def _names(keys: Sequence[TopicPartitionKey], limit: int = 4) -> str:
    shown = ", ".join(f"{t}[{p}]" for t, p in keys[:limit])
    return shown + (f" and {len(keys) - limit} more" if len(keys) > limit else "")


def forward_decision(
    targets: Mapping[TopicPartitionKey, int],
    current: Mapping[TopicPartitionKey, int],
    allow_rewind: bool = False,
) -> tuple[str, str | None]:
    """Whether writing `targets` over `current` moves a group forward.

    `already`: at or past the targets on every partition — nothing to write (with
    `allow_rewind`, only when equal everywhere). `forward`: nowhere ahead, so the write only
    moves offsets forward (or sets missing ones). `mixed`: ahead on some partitions and behind
    on others — refused, with the reason naming both, unless `allow_rewind`."""
    if not current:  # nothing committed yet (most groups of a cutover): no partition to sort
        return (DECISION_FORWARD if targets else DECISION_ALREADY), None
    ahead = sorted(k for k, o in targets.items() if current.get(k) is not None and current[k] > o)
    behind = sorted(k for k, o in targets.items() if current.get(k) is None or current[k] < o)
    if not behind and (not ahead or not allow_rewind):
        return DECISION_ALREADY, None
    if not ahead or allow_rewind:
        return DECISION_FORWARD, None
    return DECISION_MIXED, (
        f"destination group is ahead of the plan on {_names(ahead)} and behind on "
        f"{_names(behind)}; refused (--allow-rewind moves it back)"
    )


ROLLBACK_ALREADY = "already"  # at the offsets from before the run: nothing to write
ROLLBACK_ALTER = "alter"  # at the run's offsets: write back the previous ones
ROLLBACK_DELETE = "delete"  # at the run's offsets, and had none before it: delete the group
ROLLBACK_MOVED = "moved"  # anything else: moved on since, never touched


@dataclass(frozen=True)
class RollbackCheck:
    decision: str
    # partitions with no offset before the run that keep the run's: an offset cannot be
    # un-committed alone (only the whole group deleted)
    stuck: tuple[TopicPartitionKey, ...] = ()


def rollback_check(
    current: Mapping[TopicPartitionKey, int],
    restore: Mapping[TopicPartitionKey, int],
    unset: Collection[TopicPartitionKey],
    wrote: Mapping[TopicPartitionKey, int | None],
) -> RollbackCheck:
    """What a rollback does with a group that has `current` offsets now, had `restore` before
    the run (and nothing on `unset`), and was given `wrote` by it (None: no offset, the run
    deleted the group). Only the run's partitions are compared; a group with offsets on others
    is never deleted."""
    others = set(current) - set(restore) - set(unset)
    deletable = not restore and not others

    def at(tp: TopicPartitionKey, value: int | None) -> bool:
        return current.get(tp) == value

    if all(at(tp, o) for tp, o in restore.items()):
        stuck = tuple(sorted(tp for tp in unset if current.get(tp) is not None))
        if not stuck:
            return RollbackCheck(ROLLBACK_ALREADY)
        if not deletable and all(at(tp, wrote.get(tp)) for tp in stuck):
            return RollbackCheck(ROLLBACK_ALREADY, stuck)  # as far as it can go
    if wrote and all(at(tp, o) for tp, o in wrote.items()):
        if others and all(o is None for o in wrote.values()):
            return RollbackCheck(ROLLBACK_MOVED)  # the run deleted it; it has offsets again
        if deletable:
            return RollbackCheck(ROLLBACK_DELETE)
        return RollbackCheck(ROLLBACK_ALTER, tuple(sorted(unset)))
    return RollbackCheck(ROLLBACK_MOVED)


@dataclass(frozen=True)
class GroupWriteRecord:
    """What the ledger says of one executing run and one group: when the run announced its
    write, whether it may have landed (no outcome recorded, committed, or UNKNOWN), whether it
    was committed, and the run it rolled back (a rollback's rows; None otherwise)."""

    run_id: str
    time: datetime
    may_have_written: bool
    is_committed: bool
    rollback_of: str | None = None


def superseding_runs(
    run_id: str, since: datetime, records: Sequence[GroupWriteRecord]
) -> list[str]:
    """The runs that may have written a group after `run_id` announced its write (`since`):
    its offsets now may be theirs, even when they equal what `run_id` wrote. Not counted:
    `run_id` and rollbacks of it (earlier tries of this rollback), and a later run together
    with the rollback that undid it (a committed rollback of that run, also later)."""
    later = [
        r
        for r in records
        if r.time > since and r.may_have_written and r.run_id != run_id and r.rollback_of != run_id
    ]
    later_runs = {r.run_id for r in later}
    undone = {r.rollback_of for r in later if r.is_committed and r.rollback_of in later_runs}
    return sorted(
        {
            r.run_id
            for r in later
            if r.run_id not in undone and not (r.is_committed and r.rollback_of in undone)
        }
    )
