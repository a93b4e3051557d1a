"""Every status Ferry reports, and the group states it reads, as enums in one place.

Members are strings (`str` enums), so they compare equal to, print as, and serialize to their
names in tables, JSON, CSV, the ledger and DataFrame columns: those names are a contract that
schedulers and notebooks parse.
"""

from __future__ import annotations

from enum import Enum


class _Named(str, Enum):
    """A str enum that prints and formats as its bare value on every Python version."""

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


class GroupState(_Named):
    """A consumer group's state as the broker reports it (DescribeGroups), upper-cased.

    The inactive rule, with `kafka-consumer-groups --reset-offsets` as the reference: a group
    may have its offsets changed only when it is EMPTY (no members; committed offsets kept) or
    DEAD (no members and no metadata: the group does not exist, or is being removed). Every
    other state — members consuming (STABLE), or a rebalance under way (PREPARING_REBALANCE,
    COMPLETING_REBALANCE, and the KIP-848 ASSIGNING/RECONCILING) — means a consumer may commit
    over what Ferry writes, and UNKNOWN (a state this client cannot name) is not proof of
    absence: both are refused.

    What confluent-kafka (librdkafka 2.16) reports on Apache Kafka 4: a consumer-protocol
    (KIP-848) group is EMPTY, STABLE or DEAD like a classic one, but its Assigning and
    Reconciling states come back as UNKNOWN (the client's state enum has only the classic
    names) — refused all the same. ASSIGNING and RECONCILING are read when a client names them
    (tests/integration/test_group_protocols.py)."""

    EMPTY = "EMPTY"
    DEAD = "DEAD"
    STABLE = "STABLE"
    PREPARING_REBALANCE = "PREPARING_REBALANCE"
    COMPLETING_REBALANCE = "COMPLETING_REBALANCE"
    ASSIGNING = "ASSIGNING"
    RECONCILING = "RECONCILING"
    UNKNOWN = "UNKNOWN"

    @classmethod
    def parse(cls, name: str | None) -> GroupState:
        """The state for a client's state name (any case); UNKNOWN for one it does not know."""
        key = (name or "").upper()
        # confluent-kafka names two states its own way (PREPARING_REBALANCING, ...)
        key = key.replace("REBALANCING", "REBALANCE")
        # _member_map_, not __members__: that builds a new proxy each call (17 us; 1.3 million
        # calls in a 10,000-group audit)
        return cls._member_map_.get(key, cls.UNKNOWN)  # type: ignore[return-value]

    @classmethod
    def unlisted(cls) -> GroupState:
        """The state of a group a cluster's group listing does not name: it does not exist
        there, which DescribeGroups answers as DEAD."""
        return cls.DEAD

    @property
    def is_inactive(self) -> bool:
        return self in (GroupState.EMPTY, GroupState.DEAD)

    @property
    def is_active(self) -> bool:
        """Members are consuming or rebalancing (UNKNOWN is neither active nor inactive)."""
        return self not in (GroupState.EMPTY, GroupState.DEAD, GroupState.UNKNOWN)

    @property
    def title(self) -> str:
        """Kafka's own spelling: Empty, Stable, PreparingRebalance, ..."""
        return "".join(part.title() for part in self.value.split("_"))


ACTIVE_STATES = frozenset(s for s in GroupState if s.is_active)
INACTIVE_STATES = frozenset(s for s in GroupState if s.is_inactive)


class PartitionStatus(_Named):
    """One plan row's outcome (`status` column): a group partition (exact mode) or a group ×
    destination partition (reconcile mode)."""

    MATCHED = "MATCHED"  # the anchor's copy found: commit the record after it
    MATCHED_NEXT = "MATCHED_NEXT"  # nothing consumed before the anchor: commit the copy itself
    EMPTY = "EMPTY"  # nothing on the source after the committed offset: the destination's end
    RECONCILED = "RECONCILED"  # reconcile mode: the first unconsumed record on this partition
    AMBIGUOUS = "AMBIGUOUS"
    PENDING = "PENDING"
    NOT_FOUND = "NOT_FOUND"
    INCONSISTENT = "INCONSISTENT"
    NO_DESTINATION = "NO_DESTINATION"
    NO_POSITION = "NO_POSITION"
    BAND_TOO_WIDE = "BAND_TOO_WIDE"
    REFUSED = "REFUSED"

    @property
    def is_resolved(self) -> bool:
        return self in RESOLVED_PARTITION_STATUSES


RESOLVED_PARTITION_STATUSES = frozenset(
    {
        PartitionStatus.MATCHED,
        PartitionStatus.MATCHED_NEXT,
        PartitionStatus.EMPTY,
        PartitionStatus.RECONCILED,
    }
)


class GroupStatus(_Named):
    """One group's outcome in a run (`group_status`), what a scheduler acts on."""

    READY = "READY"  # dry run: would be written
    COMMITTED = "COMMITTED"
    DELETED = "DELETED"
    ALREADY_MIGRATED = "ALREADY_MIGRATED"
    ALREADY_COPIED = "ALREADY_COPIED"
    NOTHING_TO_MIGRATE = "NOTHING_TO_MIGRATE"
    PENDING = "PENDING"  # the replica has not caught up: run again later
    CLAIMED = "CLAIMED"  # another run is writing this group: run again later
    REFUSED = "REFUSED"
    UNRESOLVED = "UNRESOLVED"
    FAILED = "FAILED"
    UNKNOWN = "UNKNOWN"  # sent, but whether it landed could not be learned
    # a checkpoint position below the source's log start: records lost before it was read
    DATA_LOSS = "DATA_LOSS"
    # A checkpoint run that found its query running while it wrote: the originals are back.
    ABORTED = "ABORTED"
    # a rollback's (docs/jobs/migrate.md#rollback)
    RESTORED = "RESTORED"  # written back to the offsets it had before the run
    ALREADY_RESTORED = "ALREADY_RESTORED"  # found at them (an earlier try, or never written)
    MOVED = "MOVED"  # no longer at the offsets the run wrote: left alone
    WRITTEN_SINCE = "WRITTEN_SINCE"  # a later run (may have) written it: left alone

    @property
    def is_done(self) -> bool:
        return self in DONE_STATUSES

    @property
    def is_retry(self) -> bool:
        return self in RETRY_STATUSES


DONE_STATUSES = frozenset(
    {
        GroupStatus.READY,
        GroupStatus.COMMITTED,
        GroupStatus.DELETED,
        GroupStatus.ALREADY_MIGRATED,
        GroupStatus.ALREADY_COPIED,
        GroupStatus.NOTHING_TO_MIGRATE,
        GroupStatus.RESTORED,
        GroupStatus.ALREADY_RESTORED,
    }
)
RETRY_STATUSES = frozenset({GroupStatus.PENDING, GroupStatus.CLAIMED})


class AuditVerdict(_Named):
    """One `audit` row's verdict (`verdict`): the destination group's committed offset against
    Ferry's exact translation, or — when the plan could not resolve the exact offset — the
    plan's own unresolved status, carried through under its name."""

    EXACT = "EXACT"  # the same record, or only offsets holding no record (markers, gaps) between
    BEHIND = "BEHIND"  # |difference| records would be delivered again
    AHEAD = "AHEAD"  # difference records would be skipped (expected when the group is live)
    NO_COMMIT = "NO_COMMIT"  # no committed offset: consumers start at auto.offset.reset
    AMBIGUOUS = PartitionStatus.AMBIGUOUS.value
    PENDING = PartitionStatus.PENDING.value
    NOT_FOUND = PartitionStatus.NOT_FOUND.value
    INCONSISTENT = PartitionStatus.INCONSISTENT.value
    NO_DESTINATION = PartitionStatus.NO_DESTINATION.value
    NO_POSITION = PartitionStatus.NO_POSITION.value
    BAND_TOO_WIDE = PartitionStatus.BAND_TOO_WIDE.value
    REFUSED = PartitionStatus.REFUSED.value

    @classmethod
    def unresolved(cls, status: str) -> AuditVerdict:
        """The verdict of a plan row that did not resolve: its status, under the same name
        (ValueError for a resolved status: those rows are compared)."""
        return cls(PartitionStatus(status).value)

    @property
    def is_unresolved(self) -> bool:
        return self not in COMPARED_VERDICTS


# Verdicts of rows whose exact offset is known (the comparison ran).
COMPARED_VERDICTS = frozenset(
    {AuditVerdict.EXACT, AuditVerdict.BEHIND, AuditVerdict.AHEAD, AuditVerdict.NO_COMMIT}
)


class LagStatus(_Named):
    """A consumer's status after LinkedIn Burrow's rules (`ferry.lag.rules`), as Burrow's own
    StatusConstant names it: a partition is OK, WARN, STOP, STALL or REWIND; a group is OK, WARN
    or ERR, its worst partition with the three errors collapsed into ERR."""

    OK = "OK"
    WARN = "WARN"
    STOP = "STOP"
    STALL = "STALL"
    REWIND = "REWIND"
    ERR = "ERR"  # a group only

    @property
    def for_group(self) -> LagStatus:
        """What this partition status makes its group: OK, WARN or ERR."""
        return self if self in (LagStatus.OK, LagStatus.WARN) else LagStatus.ERR


PARTITION_LAG_STATUSES = (
    LagStatus.OK,
    LagStatus.WARN,
    LagStatus.STOP,
    LagStatus.STALL,
    LagStatus.REWIND,
)
GROUP_LAG_STATUSES = (LagStatus.OK, LagStatus.WARN, LagStatus.ERR)  # in order of severity
