"""A command's runs in the ledger, for commands whose rerun must finish a killed run instead
of acting again (a relative `groups reset`: `--shift-by`, `--by-duration`).

Each commit of such a run (`CommandLedger`) names in its `userMetadata`, beside the run and
phase every commit names: the command (a canonical string its caller makes), the plan it
carries out (the run that made the plan: itself, or the killed run it finishes), the value the
command resolved to once (a `--by-duration`'s timestamp) and when the run began. `find_plan`
reads the newest plan of a command back from the Delta log (`DESCRIBE HISTORY`, newest first,
only as far back as that plan's first run), and `read_writes` the intent and outcome rows
appended on a cluster since it began: its runs' rows and any other run's.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pyspark.sql import SparkSession

from ferry import delta
from ferry.write.ledger import PHASE_INTENT, PHASE_OUTCOME, PHASE_PLAN, Ledger, LedgerError

COMMAND = "ferry.rerun_command"
PLAN = "ferry.plan"
RESOLVED = "ferry.resolved"
RUN_TIME = "ferry.run_time"
RUN_ID = "ferry.run_id"
SUPERSEDES = "ferry.supersedes"
# Groups the run did not do and has no ledger row for (no partition to reset in the scope).
UNRECORDED = "ferry.unrecorded"

# The columns `read_writes` returns: what a finishing run needs of each write row.
WRITE_COLUMNS = [
    "run_id", "group", "topic", "partition", "previous_offset", "new_offset", "phase",
    "is_committed", "status", "rollback_of", "row_time",
]  # fmt: skip


class CommandLedger(Ledger):
    """An executing run's ledger whose every commit also names its command, its plan (`plan`:
    the run that made it; None: this run), the command's resolved value, and the runs of
    earlier plans this one sets aside (`supersedes`: their open intents are no claim)."""

    def __init__(
        self,
        spark: SparkSession,
        path: str,
        run_id: str,
        action: str,
        command: str,
        resolved: str,
        plan: str | None = None,
        supersedes: Collection[str] = (),
    ) -> None:
        super().__init__(spark, path, run_id, action, True)
        self.command = command
        self.resolved = resolved
        self.plan = plan or run_id
        self.supersedes = sorted(set(supersedes))
        self.unrecorded = 0  # set by the caller before the first commit

    def commit_metadata(self, phase: str) -> dict[str, str]:
        meta = super().commit_metadata(phase)
        meta.update(
            {
                COMMAND: self.command,
                PLAN: self.plan,
                RESOLVED: self.resolved,
                RUN_TIME: self.run_time.isoformat(),
                SUPERSEDES: ",".join(self.supersedes),
                UNRECORDED: str(self.unrecorded),
            }
        )
        return meta


@dataclass(frozen=True)
class PlanRuns:
    """The newest plan of a command: the run that made it and every run that carried it out
    since (finishing runs), as far as the log says."""

    plan: str  # the run that made the plan
    runs: tuple[str, ...]  # its runs, oldest first
    latest: str  # the newest of them
    resolved: str  # the value the plan's first run resolved the command to
    since: datetime  # when the oldest of its runs found began
    started: dict[str, datetime]  # run → when it began
    superseded: frozenset[str] = frozenset()  # runs of earlier plans its runs set aside
    unrecorded: int = 0  # the newest run's groups not done and without a ledger row


def find_plan(spark: SparkSession, path: str, command: str) -> PlanRuns | None:
    """The newest plan of `command` in the ledger's log (None: no run of it there, or no
    ledger yet). The log is read newest first, 256 commits, then 8 times as many, until the
    plan's first run is found or the log ends."""
    if not delta.exists(path):
        return None
    limit = 256
    while True:
        try:
            history = delta.commit_metadata(spark, path, limit)
        except Exception as exc:  # noqa: BLE001 - any storage failure is the same to the user
            reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
            raise LedgerError(f"cannot read ledger {path}'s history: {reason}") from exc
        found = plan_of(history, command)
        if (found is not None and found.plan in found.runs) or len(history) < limit:
            return found
        limit *= 8


def plan_of(history: list[tuple[int, dict]], command: str) -> PlanRuns | None:
    """`find_plan` on commits given newest first as (version, userMetadata)."""
    latest: dict | None = None
    oldest: dict[str, dict] = {}  # run → its oldest commit seen
    for _version, meta in history:
        if meta.get(COMMAND) != command or not meta.get(RUN_ID) or not meta.get(RUN_TIME):
            continue
        latest = latest or meta
        if meta.get(PLAN) == latest.get(PLAN):
            oldest[meta[RUN_ID]] = meta
    if latest is None:
        return None
    started = {run: datetime.fromisoformat(meta[RUN_TIME]) for run, meta in oldest.items()}
    runs = tuple(sorted(started, key=lambda run: (started[run], run)))
    first = oldest[runs[0]]
    superseded = {
        run for meta in oldest.values() for run in str(meta.get(SUPERSEDES) or "").split(",") if run
    }
    unrecorded = max(
        (int(meta.get(UNRECORDED) or 0) for _version, meta in history
         if meta.get(COMMAND) == command and meta.get(RUN_ID) == latest[RUN_ID]),
        default=0,
    )  # fmt: skip
    return PlanRuns(
        plan=str(latest.get(PLAN) or latest[RUN_ID]),
        runs=runs,
        latest=latest[RUN_ID],
        resolved=str(first.get(RESOLVED, "")),
        since=min(started.values()),
        started=started,
        superseded=frozenset(superseded - set(runs)),
        unrecorded=unrecorded,
    )


def read_writes(
    spark: SparkSession,
    path: str,
    cluster: str | None,
    since: datetime,
    groups: Collection[str] | None = None,
    run_id: str | None = None,
    with_plan: bool = False,
) -> Any:  # noqa: ANN401 - a pyarrow.Table
    """Executing runs' intent and outcome rows (and plan rows: the groups a run decided not
    to write, `with_plan`) on `cluster` appended since `since` (of `groups` only, and of
    `run_id` only, when given), `WRITE_COLUMNS` each, as an Arrow table: a killed
    10,000-group run's are 640,000 rows an intent, summed up column-wise (`summarize`)
    rather than turned into a dict each."""
    import pyarrow as pa
    import pyarrow.compute as pc

    equal: dict[str, object] = {"cluster": cluster, "is_executed": True}
    if run_id is not None:
        equal["run_id"] = run_id
    phases = [PHASE_INTENT, PHASE_OUTCOME, *([PHASE_PLAN] if with_plan else [])]
    where = delta.Where(equal=equal, any_of={"phase": phases})
    try:
        table = delta.read_since(spark, path, "row_time", since, WRITE_COLUMNS, where)
    except Exception as exc:  # noqa: BLE001
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
        raise LedgerError(f"cannot read ledger {path}: {reason}") from exc
    table = table.filter(pc.is_valid(table.column("topic")))
    if groups is not None:
        table = table.filter(pc.is_in(table.column("group"), pa.array(sorted(groups), pa.string())))
    return table


def summarize(table: Any) -> list[dict]:  # noqa: ANN401 - a pyarrow.Table of WRITE_COLUMNS
    """One dict per run, group and phase of write rows: `first` and `last` row time,
    `is_committed` (any row), `unknown` (any row UNKNOWN), `not_done` (any row's status not a
    done one: a plan row REFUSED or MOVED, an outcome row FAILED, UNKNOWN, ...), `declined`
    (every row REFUSED or CLAIMED: an outcome of a write never sent), `rollback_of`."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from ferry.status import DONE_STATUSES, GroupStatus

    status = table.column("status")

    def among(statuses) -> Any:  # noqa: ANN001, ANN401 - a boolean array, null status: False
        values = pa.array(sorted(s.value for s in statuses), pa.string())
        return pc.fill_null(pc.is_in(status, values), False)

    declined = among({GroupStatus.REFUSED, GroupStatus.CLAIMED})
    summary = (
        table.append_column("unknown", among({GroupStatus.UNKNOWN}))
        .append_column("not_done", pc.invert(among(DONE_STATUSES)))
        .append_column("declined", declined)
        .group_by(["run_id", "group", "phase"], use_threads=False)
        .aggregate(
            [
                ("row_time", "min"),
                ("row_time", "max"),
                ("is_committed", "any"),
                ("unknown", "any"),
                ("not_done", "any"),
                ("declined", "all"),
                ("rollback_of", "max"),
            ]
        )
    )
    names = {
        "row_time_min": "first",
        "row_time_max": "last",
        "is_committed_any": "is_committed",
        "unknown_any": "unknown",
        "not_done_any": "not_done",
        "declined_all": "declined",
        "rollback_of_max": "rollback_of",
    }
    return summary.rename_columns([names.get(n, n) for n in summary.column_names]).to_pylist()


def partition_rows(table: Any, phase: str, pairs: Collection[tuple[str, str]]) -> list[tuple]:  # noqa: ANN401
    """(run_id, group, topic, partition, previous_offset, new_offset) of the `phase` rows of
    each (run, group) of `pairs`, read column-wise."""
    import pyarrow as pa
    import pyarrow.compute as pc

    groups = pa.array(sorted({g for _, g in pairs}), pa.string())
    rows = table.filter(
        pc.and_(pc.equal(table.column("phase"), phase), pc.is_in(table.column("group"), groups))
    )
    columns = ["run_id", "group", "topic", "partition", "previous_offset", "new_offset"]
    wanted = set(pairs)
    return [
        row
        for row in zip(*(rows.column(c).to_pylist() for c in columns), strict=True)
        if (row[0], row[1]) in wanted
    ]
