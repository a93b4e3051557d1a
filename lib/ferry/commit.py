"""Guarded writes of group offsets: the one path by which Ferry changes a cluster's groups.

Every executing run (`migrate`, `groups copy/reset/delete`) hands its writes here:

1. The intent rows (each partition's offset now and the one it will get) and the run's
   decisions about every other group are appended to the ledger in one commit, before any
   cluster is touched. If that fails nothing is written.
2. Groups that another run's open intent claimed first are left to that run (`CLAIMED`).
3. Per group, right before its write: the group must be Empty or Dead, and (migrate, copy)
   the write must move it forward — see `forward_decision`. The write is one request,
   retried only after reading what landed (`kafka_admin.alter_offsets`), then read back.
4. The group's outcome is appended to the ledger before the next group is written. If that
   append fails the run stops: `OutcomeNotRecorded` carries the offsets the committed groups
   had before, so the caller can print the rollback the ledger could not keep.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from ferry import kafka_admin
from ferry.kafka_admin import Cluster, TopicPartitionKey
from ferry.ledger import PHASE_INTENT, PHASE_OUTCOME, PHASE_PLAN, Ledger, LedgerError

STATUS_COMMITTED = "COMMITTED"
STATUS_DELETED = "DELETED"
STATUS_ALREADY_MIGRATED = "ALREADY_MIGRATED"
STATUS_REFUSED = "REFUSED"
STATUS_CLAIMED = "CLAIMED"  # another run is writing this group; try again later
STATUS_FAILED = "FAILED"
STATUS_UNKNOWN = "UNKNOWN"  # sent, but whether it landed could not be learned

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


@dataclass
class GroupWrite:
    """One group's planned write, with the ledger rows (one per partition) that describe it."""

    group: str
    offsets: dict[TopicPartitionKey, int]  # targets; for a delete, the offsets it has
    rows: list[dict]
    is_delete: bool = False
    is_forward_only: bool = True
    allow_rewind: bool = False
    already_status: str = STATUS_ALREADY_MIGRATED  # how "at or past the targets" is reported


@dataclass
class WriteOutcome:
    group: str
    status: str
    is_committed: bool
    message: str | None = None
    previous: dict[TopicPartitionKey, int] = field(default_factory=dict)


class OutcomeNotRecorded(LedgerError):
    """A group was written but its outcome could not be appended; the run stopped there."""

    def __init__(self, message: str, committed: Sequence[WriteOutcome]) -> None:
        super().__init__(message)
        self.committed = list(committed)


def restore_block(outcomes: Sequence[WriteOutcome]) -> str:
    """The offsets committed groups had before this run, as `groups reset --from-file` CSV."""
    lines = ["group,topic,partition,offset"]
    unset = []
    for o in outcomes:
        for (topic, partition), offset in sorted(o.previous.items()):
            lines.append(f"{o.group},{topic},{partition},{offset}")
    for o in outcomes:
        if not o.previous:
            unset.append(o.group)
    note = f"\n(no offsets before this run: {', '.join(unset)}: delete to undo)" if unset else ""
    return "\n".join(lines) + note


def execute_writes(
    cluster: Cluster,
    writes: Sequence[GroupWrite],
    decision_rows: Sequence[dict],
    ledger: Ledger,
    lease_ms: int,
    progress: Callable[[str], None],
) -> dict[str, WriteOutcome]:
    """Write each group as the module docstring says; returns group → outcome."""
    intent_rows = [{**r, "phase": PHASE_INTENT} for w in writes for r in w.rows]
    decided = [{**r, "phase": PHASE_PLAN} for r in decision_rows]
    # The commit is tagged `intent` only when it holds intents (claims are looked up by it).
    ledger.append(intent_rows + decided, PHASE_INTENT if intent_rows else PHASE_PLAN)
    if not writes:
        return {}
    cluster_id = cluster.conf.get("bootstrap.servers")
    claims = ledger.open_claims(cluster_id, [w.group for w in writes], lease_ms)
    outcomes: dict[str, WriteOutcome] = {}
    for w in writes:
        if w.group in claims:
            outcome = WriteOutcome(
                w.group, STATUS_CLAIMED, False, f"run {claims[w.group]} is writing this group"
            )
        else:
            outcome = _write_group(cluster, w)
        outcomes[w.group] = outcome
        try:
            ledger.append(_outcome_rows(w, outcome), PHASE_OUTCOME)
        except LedgerError as exc:
            done = [o for o in outcomes.values() if o.is_committed]
            raise OutcomeNotRecorded(
                f"{exc}; stopped after writing {len(done)} group(s), "
                f"{len(writes) - len(outcomes)} not attempted; run {ledger.run_id} "
                "(its intent rows allow --rollback)",
                done,
            ) from exc
        if outcome.is_committed:
            progress(f"{outcome.status.lower()} {w.group} ({len(w.offsets)} partitions)")
    return outcomes


def _write_group(cluster: Cluster, w: GroupWrite) -> WriteOutcome:
    previous: dict[TopicPartitionKey, int] = {}
    try:
        kafka_admin.check_inactive(cluster, w.group)
        previous = kafka_admin.committed_offsets(cluster, [w.group])[w.group]
        if w.is_delete:
            error = kafka_admin.delete_groups(cluster, [w.group])[w.group]
            if error:
                raise kafka_admin.ClusterError(f"deleting group {w.group}: {error}")
            if kafka_admin.committed_offsets(cluster, [w.group])[w.group]:
                raise kafka_admin.ClusterError(f"group {w.group} still has offsets")
            return WriteOutcome(w.group, STATUS_DELETED, True, None, previous)
        if w.is_forward_only:
            decision, reason = forward_decision(w.offsets, previous, w.allow_rewind)
            if decision == DECISION_ALREADY:
                return WriteOutcome(
                    w.group, w.already_status, False, "at or past the plan now", previous
                )
            if decision == DECISION_MIXED:
                return WriteOutcome(w.group, STATUS_REFUSED, False, reason, previous)
        kafka_admin.alter_offsets(cluster, w.group, w.offsets)
        return WriteOutcome(w.group, STATUS_COMMITTED, True, None, previous)
    except kafka_admin.CommitUnknownError as exc:
        return WriteOutcome(w.group, STATUS_UNKNOWN, False, str(exc), previous)
    except kafka_admin.GroupActiveError as exc:
        return WriteOutcome(w.group, STATUS_REFUSED, False, str(exc), previous)
    except kafka_admin.ClusterError as exc:
        return WriteOutcome(w.group, STATUS_FAILED, False, str(exc), previous)


def _outcome_rows(w: GroupWrite, outcome: WriteOutcome) -> list[dict]:
    return [
        {
            **r,
            "previous_offset": outcome.previous.get((r["topic"], r["partition"])),
            "status": outcome.status,
            "is_committed": outcome.is_committed,
            "message": outcome.message,
        }
        for r in w.rows
    ]
