"""Guarded writes of group offsets: the one path by which Ferry changes a cluster's groups.

Every executing run (`migrate`, `groups copy/reset/delete`) hands its writes here:

1. The intent rows (each partition's offset now and the one it will get) and the run's
   decisions about every other group are appended to the ledger (in commits of at most
   `ledger.BATCH_ROWS` rows, built as they are appended), before any cluster is touched. If
   that fails nothing is written.
2. Groups that another run's open intent claimed first are left to that run (`CLAIMED`).
3. The rest are written in batches of `BATCH_GROUPS`, each batch in a handful of round trips
   whatever its size: one stable OffsetFetch per coordinator the batch reaches (a probe: the
   coordinator has caught up with every commit it acknowledged, and answers fetches, before
   anything is read or written; `kafka.settle_coordinators`), one group listing for the
   batch's states (every group must be Empty or Dead; `kafka.by_state`), one round of
   OffsetFetch requests (the offsets each group the listing shows has now; a group it does
   not show has none), then per group the forward rule (migrate,
   copy; `ferry.write.rules`), then every group's write — one request per group, all in
   flight together, each retried only after reading what landed — and one round of
   read-backs (`ferry.kafka.commits`). The window between a group's state check and its
   write is one batch's offset fetch; a consumer that joins in it gets the write refused by
   the broker (it takes a commit without a member id only while the group is Empty), reported
   as REFUSED. Offsets another client commits without joining after the listing are not seen
   before the write, as they would not be after the fetch.
   A rollback (`ferry.write.rollback`) brings its own check for step 3 (`write`: a group is
   restored only while it still has the offsets the run being undone wrote) and shares the
   rest: intent, claims, batches, outcomes.
4. The batch's outcomes are appended to the ledger in one commit before the next batch is
   written. If that append fails the run stops: `OutcomeNotRecorded` carries the offsets the
   batch's committed groups had before, so the caller can print the rollback the ledger could
   not keep.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from ferry import kafka
from ferry.kafka.cluster import Cluster
from ferry.keys import TopicPartitionKey
from ferry.status import GroupStatus
from ferry.write.ledger import PHASE_INTENT, PHASE_OUTCOME, PHASE_PLAN, Ledger, LedgerError
from ferry.write.rules import DECISION_ALREADY, DECISION_FORWARD, DECISION_MIXED, forward_decision

# Groups per batch: each batch costs one group listing (every group of the cluster), one fetch
# round, one write round, one read-back round and one ledger commit. As many requests in
# flight as an offset fetch wave (`kafka.groups.FETCH_WAVE`): 10,000 groups' writes in 10
# batches took 15.5 s where 50 of 200 took 20.3 s. A longer check-to-write window is no risk:
# the broker refuses a commit without a member id to a group that is not Empty (REFUSED).
BATCH_GROUPS = 1000


@dataclass
class GroupWrite:
    """One group's planned write, with the ledger rows (one per partition) that describe it."""

    group: str
    offsets: dict[TopicPartitionKey, int]  # targets; for a delete, the offsets it has
    # the rows, or how to build them when they are appended (10,000 groups' rows are never
    # all in memory at once)
    rows: list[dict] | Callable[[], list[dict]]
    is_delete: bool = False
    is_forward_only: bool = True
    allow_rewind: bool = False
    already_status: str = GroupStatus.ALREADY_MIGRATED  # how "at or past the targets" is reported

    @property
    def partition_count(self) -> int:
        """The partitions the write changes (its progress line names the count)."""
        return len(self.offsets)


def _rows(w: GroupWrite) -> list[dict]:
    return w.rows() if callable(w.rows) else w.rows


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
        if self.committed:
            self.preface = (
                "written, but not in the ledger; the offsets these groups had before "
                "(restore with: groups reset --from-file FILE --execute):\n"
                + restore_block(self.committed)
            )


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


@dataclass
class LedgerTables:
    """A run's ledger rows built column-wise (`ferry.migrate.ledger_table`), for runs too
    large for a dict per row: `build(groups)` gives the rows of those groups as Arrow tables
    of the ledger's columns (each write's `rows` are not used); `decided` names the groups
    decided not to write, whose rows go in as `plan` rows."""

    build: Callable[[Sequence[str]], Iterable]
    decided: Sequence[str]


def with_phase(table, phase: str):  # noqa: ANN001, ANN201 - a pyarrow.Table
    import pyarrow as pa

    i = table.schema.get_field_index("phase")
    return table.set_column(i, table.schema.field(i), pa.array([phase] * table.num_rows))


def outcome_table(table, done: Mapping[str, WriteOutcome]):  # noqa: ANN001, ANN201
    """`_outcome_rows` column-wise: a table of ledger rows with each group's outcome."""
    import pyarrow as pa

    groups = table.column("group").to_pylist()
    topics, partitions = table.column("topic").to_pylist(), table.column("partition").to_pylist()
    where = zip(groups, topics, partitions, strict=True)
    values = {
        "previous_offset": [done[g].previous.get((t, p)) for g, t, p in where],
        "status": [str(done[g].status) for g in groups],
        "is_committed": [done[g].is_committed for g in groups],
        "message": [done[g].message for g in groups],
    }
    for name, column in values.items():
        i = table.schema.get_field_index(name)
        field = table.schema.field(i)
        table = table.set_column(i, field, pa.array(column, field.type))
    return table


# Step 3 for one batch: the groups in, group → outcome out.
BatchWriter = Callable[[Cluster, Sequence[GroupWrite]], dict[str, WriteOutcome]]


def execute_writes(
    cluster: Cluster,
    writes: Sequence[GroupWrite],
    decision_rows: Iterable[dict] | LedgerTables,
    ledger: Ledger,
    lease_ms: int,
    progress: Callable[[str], None],
    batch_groups: int | None = None,
    write: BatchWriter | None = None,
    ignore_claims: Collection[str] = (),
) -> dict[str, WriteOutcome]:
    """Write the groups as the module docstring says, `batch_groups` (default
    `BATCH_GROUPS`) at a time; returns group → outcome. `decision_rows`: the rows of the
    groups not written, or `LedgerTables` for every ledger row of the run. `write`: step 3
    for one batch (default `write_batch`); `ignore_claims`: runs whose open intents do not
    hold a group back (a rollback's: the run it undoes, and earlier tries of itself)."""
    write = write or write_batch
    # Commits are tagged `intent` only when the run has intents (claims are looked up by it).
    tag = PHASE_INTENT if writes else PHASE_PLAN
    if isinstance(decision_rows, LedgerTables):
        build = decision_rows.build
        ledger.append_tables(
            itertools.chain(
                (with_phase(t, PHASE_INTENT) for t in build([w.group for w in writes])),
                (with_phase(t, PHASE_PLAN) for t in build(decision_rows.decided)),
            ),
            tag,
        )
    else:
        build = None
        intent_rows = ({**r, "phase": PHASE_INTENT} for w in writes for r in _rows(w))
        decided = ({**r, "phase": PHASE_PLAN} for r in decision_rows)
        ledger.append(itertools.chain(intent_rows, decided), tag)
    if not writes:
        return {}
    cluster_id = cluster.conf.get("bootstrap.servers")
    claims = ledger.open_claims(cluster_id, [w.group for w in writes], lease_ms, ignore_claims)
    outcomes: dict[str, WriteOutcome] = {}
    say = getattr(progress, "detail", progress)  # a group's line: not a stage of Spark jobs
    for batch in _batches(writes, batch_groups or BATCH_GROUPS):
        done = write(cluster, [w for w in batch if w.group not in claims])
        for w in batch:
            if w.group in claims:
                done[w.group] = WriteOutcome(
                    w.group,
                    GroupStatus.CLAIMED,
                    False,
                    f"run {claims[w.group]} is writing this group",
                )
        outcomes.update(done)
        try:
            if build is not None:
                names = [w.group for w in batch]
                ledger.append_tables((outcome_table(t, done) for t in build(names)), PHASE_OUTCOME)
            else:
                ledger.append(
                    [row for w in batch for row in _outcome_rows(w, done[w.group])], PHASE_OUTCOME
                )
        except LedgerError as exc:
            written = sum(1 for o in outcomes.values() if o.is_committed)
            raise OutcomeNotRecorded(
                f"{exc}; stopped after writing {written} group(s), "
                f"{len(writes) - len(outcomes)} not attempted; run {ledger.run_id} "
                "(its intent rows allow --rollback)",
                [done[w.group] for w in batch if done[w.group].is_committed],
            ) from exc
        for w in batch:
            if done[w.group].is_committed:
                status = str(done[w.group].status).lower().replace("_", " ")
                say(f"{status} {w.group} ({w.partition_count} partitions)")
    return outcomes


def _batches(writes: Sequence[GroupWrite], size: int) -> list[list[GroupWrite]]:
    """Consecutive batches of at most `size` writes; a group named twice starts a new batch
    (its two writes must not be in flight together)."""
    out: list[list[GroupWrite]] = [[]]
    names: set[str] = set()  # the last batch's groups
    for w in writes:
        if len(out[-1]) >= max(1, size) or w.group in names:
            out.append([])
            names = set()
        out[-1].append(w)
        names.add(w.group)
    return [b for b in out if b]


def write_batch(cluster: Cluster, batch: Sequence[GroupWrite]) -> dict[str, WriteOutcome]:
    """Check and write one batch of groups (module docstring, step 3); group → outcome."""
    out: dict[str, WriteOutcome] = {}
    may_write, failed, active, listed = kafka.by_state(cluster, [w.group for w in batch])
    for group, error in failed.items():
        out[group] = WriteOutcome(group, GroupStatus.FAILED, False, str(error))
    for group, error in active.items():
        out[group] = WriteOutcome(group, GroupStatus.REFUSED, False, str(error))
    inactive = [w for w in batch if w.group in may_write]
    errors: dict[str, kafka.ClusterError] = {}
    # Only the groups the batch's listing shows have offsets to fetch (a fresh destination's
    # batch: none, 1,000 requests saved; `by_state` probed their coordinators first).
    fetched = kafka.committed_offsets(cluster, [w.group for w in inactive], errors, listed)
    previous = {w.group: fetched.get(w.group, {}) for w in inactive if w.group not in errors}
    deletes, alters = [], []
    for w in inactive:
        before = previous.get(w.group, {})
        if w.group in errors:
            out[w.group] = WriteOutcome(w.group, GroupStatus.FAILED, False, str(errors[w.group]))
            continue
        decision, reason = (
            forward_decision(w.offsets, before, w.allow_rewind)
            if w.is_forward_only and not w.is_delete
            else (DECISION_FORWARD, None)
        )
        if decision == DECISION_ALREADY:
            message = "at or past the plan now"
            out[w.group] = WriteOutcome(w.group, w.already_status, False, message, before)
        elif decision == DECISION_MIXED:
            out[w.group] = WriteOutcome(w.group, GroupStatus.REFUSED, False, reason, before)
        else:
            (deletes if w.is_delete else alters).append(w)
    if deletes:
        out.update(delete(cluster, deletes, previous))
    if alters:
        results = kafka.alter_offsets_each(cluster, {w.group: w.offsets for w in alters})
        for w in alters:
            out[w.group] = outcome(w.group, results[w.group], previous[w.group])
    return out


def outcome(
    group: str,
    error: kafka.ClusterError | None,
    previous: dict[TopicPartitionKey, int],
    success: str = GroupStatus.COMMITTED,
) -> WriteOutcome:
    """A group's outcome from its write's result (`error` None: written and read back)."""
    if error is None:
        return WriteOutcome(group, success, True, None, previous)
    if isinstance(error, kafka.CommitUnknownError):
        status = GroupStatus.UNKNOWN
    elif isinstance(error, kafka.GroupActiveError):
        status = GroupStatus.REFUSED
    else:
        status = GroupStatus.FAILED
    return WriteOutcome(group, status, False, str(error), previous)


# The broker's answer for a group that is not there (GROUP_ID_NOT_FOUND), as librdkafka words it.
_NO_SUCH_GROUP = re.compile(r"group id does not exist|GROUP_ID_NOT_FOUND", re.IGNORECASE)


def delete(
    cluster: Cluster,
    deletes: Sequence[GroupWrite],
    previous: Mapping[str, dict[TopicPartitionKey, int]],
) -> dict[str, WriteOutcome]:
    """Delete the groups in one request, then check that none has offsets left. A group the
    broker says does not exist is what a delete wants (a delete that landed before a run was
    killed, or another client's): DELETED once the read-back finds no offsets."""
    out: dict[str, WriteOutcome] = {}
    failed = kafka.delete_groups(cluster, [w.group for w in deletes])
    for w in deletes:
        if failed[w.group] and _NO_SUCH_GROUP.search(failed[w.group]):
            failed[w.group] = None
    gone = [w.group for w in deletes if not failed[w.group]]
    errors: dict[str, kafka.ClusterError] = {}
    left = kafka.committed_offsets(cluster, gone, errors)
    for w in deletes:
        g = w.group
        if failed[g]:
            message = f"deleting group {g}: {failed[g]}"
        elif g in errors:
            message = str(errors[g])
        elif left[g]:
            message = f"group {g} still has offsets"
        else:
            out[g] = WriteOutcome(g, GroupStatus.DELETED, True, None, previous[g])
            continue
        out[g] = WriteOutcome(g, GroupStatus.FAILED, False, message, previous[g])
    return out


def _outcome_rows(w: GroupWrite, outcome: WriteOutcome) -> list[dict]:
    return [
        {
            **r,
            "previous_offset": outcome.previous.get((r["topic"], r["partition"])),
            "status": outcome.status,
            "is_committed": outcome.is_committed,
            "message": outcome.message,
        }
        for r in _rows(w)
    ]
