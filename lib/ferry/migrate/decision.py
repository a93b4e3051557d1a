"""Decide: per group, from the plan alone, whether it would be written and why not.

A group is written only when every one of its partitions resolved (a reconciled topic: with no
more duplicates than `--max-duplicates` allows) and the write moves the destination group
forward (`ferry.write.rules.forward_decision` over the offsets it has now): a
group already at or past the plan everywhere is `ALREADY_MIGRATED` and left alone, one ahead
on some partitions and behind on others is `REFUSED` unless `--allow-rewind`. The same rule is
applied again right before each write, with the offsets the group has at that moment.

Group statuses and what a scheduler should do (see `exit_code`): READY (dry run: would be
written), COMMITTED, ALREADY_MIGRATED and NOTHING_TO_MIGRATE are done; PENDING (the replica
has not caught up) and CLAIMED (another run is writing it) are worth another run later;
REFUSED, UNRESOLVED, FAILED and UNKNOWN need a person.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ferry.errors import EXIT_INCOMPLETE, EXIT_OK, EXIT_TRY_AGAIN
from ferry.keys import TopicPartitionKey
from ferry.migrate.model import Plan
from ferry.status import DONE_STATUSES, RETRY_STATUSES, GroupStatus, PartitionStatus
from ferry.write import rules


@dataclass
class GroupDecision:
    group: str
    status: GroupStatus
    message: str | None
    offsets: dict[TopicPartitionKey, int]  # what would be written (READY only)

    @property
    def is_write(self) -> bool:
        return self.status == GroupStatus.READY


def decide(plan: Plan, allow_rewind: bool, max_duplicates: int = 0) -> dict[str, GroupDecision]:
    """One decision per planned group (pure: plan rows carry the destination's offsets). A
    group on a reconciled topic whose consumers would or might receive more than
    `max_duplicates` records a second time (duplicates + unplaced records) is REFUSED."""
    out: dict[str, GroupDecision] = {}
    for group in plan.groups():
        if group in plan.group_notes:
            status, note = plan.group_notes[group]
            out[group] = GroupDecision(group, status, note, {})
            continue
        # Rows made outside matching (reconciled topics) are the only ones with duplicates.
        extra = plan.extra.get(group, [])
        # Each position's target is worked out once, column-wise: a group's are looked up by
        # index (10,000 groups' rows read as dicts cost 6.5 s at load 15).
        pairs = plan.targets_of(group)
        if None in pairs or not all(r["is_resolved"] for r in extra):
            rows = plan.shared_rows_of(group)
            unresolved = [r for r in rows if not r["is_resolved"]]
            bad = sorted({r["status"] for r in unresolved})
            status = (
                GroupStatus.PENDING if bad == [PartitionStatus.PENDING] else GroupStatus.UNRESOLVED
            )
            message = f"{len(unresolved)} of {len(rows)} partitions unresolved ({', '.join(bad)})"
            if notes := sorted({r["note"] for r in unresolved if r.get("note")}):
                message += f": {notes[0]}"
            out[group] = GroupDecision(group, status, message, {})
            continue
        targets = dict(pairs)
        targets.update(
            {(r["dst_topic"], r["dst_partition"]): r["destination_offset"] for r in extra}
        )
        now = plan.previous.get(group, {})
        previous = {tp: now[tp] for tp in targets if tp in now} if now else {}
        for r in extra:  # rows made with their own previous offset
            if r.get("previous_offset") is not None:
                previous[(r["dst_topic"], r["dst_partition"])] = r["previous_offset"]
        decision, reason = rules.forward_decision(targets, previous, allow_rewind)
        if decision == rules.DECISION_ALREADY:
            out[group] = GroupDecision(
                group,
                GroupStatus.ALREADY_MIGRATED,
                "destination at or past the plan on every partition",
                {},
            )
        elif decision == rules.DECISION_MIXED:
            out[group] = GroupDecision(group, GroupStatus.REFUSED, reason, {})
        elif (again := _delivered_again(extra)) > max_duplicates:
            out[group] = GroupDecision(
                group, GroupStatus.REFUSED, _duplicates_message(extra, again), {}
            )
        else:
            out[group] = GroupDecision(group, GroupStatus.READY, None, targets)
    return out


def _delivered_again(rows: list[dict]) -> int:
    return sum((r.get("duplicates") or 0) + (r.get("unplaced") or 0) for r in rows)


def _duplicates_message(rows: list[dict], again: int) -> str:
    where = sorted(
        f"{r['dst_topic']}[{r['dst_partition']}]"
        for r in rows
        if r.get("duplicates") or r.get("unplaced")
    )
    unplaced = sum(r.get("unplaced") or 0 for r in rows)
    maybe = f" ({unplaced} of them identical records that cannot be told apart)" if unplaced else ""
    return (
        f"{again} duplicates{maybe}: records its consumers already read would be delivered again "
        f"on {', '.join(where)}; pass --max-duplicates {again} to accept"
    )


def exit_code(statuses: Mapping[str, str]) -> int:
    """0 when every group is done, 75 when the rest only needs time, 1 otherwise."""
    left = {GroupStatus(s) for s in statuses.values()} - DONE_STATUSES
    if not left:
        return EXIT_OK
    return EXIT_TRY_AGAIN if left <= RETRY_STATUSES else EXIT_INCOMPLETE
