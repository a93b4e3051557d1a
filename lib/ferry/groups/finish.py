"""A relative reset (`--shift-by`, `--by-duration`) run again after it was killed finishes the
killed run's plan instead of shifting again (docs/jobs/groups.md, "A rerun after a kill").

kafka-consumer-groups is relative each time it runs, and so is Ferry when a run finished: a
deliberate second run shifts again. But a scheduler retries a killed task, and a shift
applied again to the groups the killed run had already written moves them twice. So each
commit of a relative reset names its command (`command_key`) and the plan it carries out
(`ferry.write.reruns`); the same command, while the newest run of it has an intent without
an outcome, plans nothing new:

- a group that a run of the plan wrote (outcome committed) is left alone;
- a group the plan announced (intent) and did not record as written gets the planned target
  when it is still at the offsets it had before (or already at the target on some
  partitions), is left alone when at the target everywhere, and is named and left alone
  (MOVED, exit 1) when it is at neither: something else moved it since;
- any other selected group (the plan never announced it, or another run wrote it after the
  plan did, e.g. a rollback) is planned afresh from the value the plan resolved once (a
  `--by-duration`'s timestamp, not a new now()).

`--new-run` plans afresh instead, and says so. Pure but for `lookup` (the ledger reads).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pyspark.sql import SparkSession

from ferry import delta
from ferry.errors import UsageError
from ferry.groups.plans import GroupChange, refusal
from ferry.groups.reset import ResetSpec, Target, parse_duration
from ferry.groups.selection import ResetSelection
from ferry.keys import TopicPartitionKey
from ferry.status import GroupStatus
from ferry.write import reruns, rules
from ferry.write.ledger import PHASE_INTENT, PHASE_OUTCOME

if TYPE_CHECKING:
    from ferry.groups.describe import GroupsSnapshot

RELATIVE = frozenset({ResetSpec.SHIFT_BY, ResetSpec.BY_DURATION})


def command_key(
    cluster_id: str | None, spec: ResetSpec, options: Mapping[str, object], chosen: ResetSelection
) -> str:
    """What makes two relative resets the same command, as one canonical string: the cluster
    (bootstrap servers), `--group` as given, the scope (`--all-topics`, or each `--topic`'s
    partitions), the spec and its value (`--shift-by` N; `--by-duration` as milliseconds,
    so PT1H and PT60M are the same)."""
    if spec is ResetSpec.SHIFT_BY:
        value = int(options["shift_by"])  # type: ignore[call-overload]
    else:
        value = int(parse_duration(str(options["by_duration"])).total_seconds() * 1000)
    scope = None
    if chosen.scope is not None:
        scope = {t: None if p is None else list(p) for t, p in sorted(chosen.scope.items())}
    key = {
        "action": "reset",
        "cluster": cluster_id,
        "group": options.get("group"),
        "scope": scope,
        "spec": spec.value,
        "value": value,
    }
    return json.dumps(key, sort_keys=True, separators=(",", ":"))


def check_new_run(spec: ResetSpec, new_run: bool) -> None:
    if new_run and spec not in RELATIVE:
        raise UsageError(
            "--new-run is for --shift-by and --by-duration (other resets are absolute)"
        )


@dataclass
class Pending:
    """A group the plan announced and did not record as written."""

    run_id: str  # the run whose intent is the newest
    targets: dict[TopicPartitionKey, int]
    previous: dict[TopicPartitionKey, set[int | None]]  # what it had before (each intent's)


@dataclass
class Unfinished:
    """What the ledger says of a killed run's plan, for the selected groups."""

    runs: reruns.PlanRuns
    done: dict[str, str] = field(default_factory=dict)  # group → the run that wrote it
    written: dict[str, dict[TopicPartitionKey, int]] = field(default_factory=dict)
    pending: dict[str, Pending] = field(default_factory=dict)

    @property
    def run_id(self) -> str:
        """The run killed before its outcome (the plan's newest)."""
        return self.runs.latest

    @property
    def value(self) -> int:
        """The value the plan resolved its command to (N, or a timestamp in epoch ms)."""
        return int(self.runs.resolved)


def has_open_intent(rows: Sequence[Mapping]) -> bool:
    """Whether some (run, group) of the rows has an intent and no outcome."""
    intents = {(r["run_id"], r["group"]) for r in rows if r["phase"] == PHASE_INTENT}
    outcomes = {(r["run_id"], r["group"]) for r in rows if r["phase"] == PHASE_OUTCOME}
    return bool(intents - outcomes)


def _records(rows: Sequence[Mapping]) -> list[rules.GroupWriteRecord]:
    """One group's write rows of runs outside the plan, as `rules.superseding_runs` takes them
    (as a rollback reads them: may have written = no outcome, committed, or UNKNOWN)."""
    by_run: dict[str, list[Mapping]] = {}
    for r in rows:
        by_run.setdefault(r["run_id"], []).append(r)
    out = []
    for run, own in sorted(by_run.items()):
        times = [r["row_time"] for r in own if r["phase"] == PHASE_INTENT and r["row_time"]]
        if not times:
            continue
        outcomes = [r for r in own if r["phase"] == PHASE_OUTCOME]
        committed = any(r["is_committed"] for r in outcomes)
        unknown = any(r["status"] == GroupStatus.UNKNOWN.value for r in outcomes)
        rollback_of = next((r["rollback_of"] for r in own if r["rollback_of"]), None)
        may = not outcomes or committed or unknown
        out.append(rules.GroupWriteRecord(run, min(times), may, committed, rollback_of))
    return out


def unfinished(runs: reruns.PlanRuns, rows: Sequence[Mapping]) -> Unfinished:
    """The plan's state per group from the write rows on its cluster since it began (its
    runs' and others'): written, pending, or neither (planned afresh). A group another run
    may have written after the plan's last word on it is the other run's: planned afresh."""
    plan = set(runs.runs)
    out = Unfinished(runs)
    by_group: dict[str, list[Mapping]] = {}
    for r in rows:
        if r["topic"] is not None:
            by_group.setdefault(r["group"], []).append(r)
    for group, own in sorted(by_group.items()):
        mine = [r for r in own if r["run_id"] in plan]
        others = _records([r for r in own if r["run_id"] not in plan])
        times = [r["row_time"] for r in mine if r["phase"] == PHASE_INTENT and r["row_time"]]
        last = max(times, default=None)
        if last is None or rules.superseding_runs("", last, others):
            continue
        # Only the plan's rows after the last other run that may have written the group
        # before the plan's last word on it (one after it was undone since: not superseding).
        cut = max((o.time for o in others if o.may_have_written and o.time < last), default=None)
        mine = [r for r in mine if cut is None or (r["row_time"] and r["row_time"] > cut)]
        wrote = [r for r in mine if r["phase"] == PHASE_OUTCOME and r["is_committed"]]
        if wrote:
            run = max(wrote, key=lambda r: r["row_time"])["run_id"]
            out.done[group] = run
            out.written[group] = {
                (r["topic"], r["partition"]): r["new_offset"] for r in wrote if r["run_id"] == run
            }
            continue
        intents = [r for r in mine if r["phase"] == PHASE_INTENT]
        if not intents:
            continue
        newest = max(intents, key=lambda r: r["row_time"])["run_id"]
        pending = Pending(newest, {}, {})
        for r in intents:
            tp = (r["topic"], r["partition"])
            pending.previous.setdefault(tp, set()).add(r["previous_offset"])
            if r["run_id"] == newest:
                pending.targets[tp] = r["new_offset"]
        out.pending[group] = pending
    return out


def lookup(
    spark: SparkSession, path: str, command: str, cluster_id: str | None, groups: Collection[str]
) -> tuple[reruns.PlanRuns | None, Unfinished | None]:
    """The newest plan of `command` (None: no run of it) and, when its newest run has an
    intent without outcome (killed), what is left of it for `groups`."""
    runs = reruns.find_plan(spark, path, command)
    if runs is None:
        return None, None
    latest = reruns.read_writes(
        spark, path, cluster_id, runs.started[runs.latest], run_id=runs.latest
    )
    if not has_open_intent(latest):
        return runs, None
    return runs, unfinished(runs, reruns.read_writes(spark, path, cluster_id, runs.since, groups))


def _names(keys: Sequence[TopicPartitionKey], limit: int = 4) -> str:
    shown = ", ".join(f"{t}[{p}]" for t, p in keys[:limit])
    return shown + (f" and {len(keys) - limit} more" if len(keys) > limit else "")


def finish_change(group: str, pending: Pending, state: GroupsSnapshot) -> GroupChange:
    """A pending group's change: the plan's target when every partition is at its offset
    from before the plan or at the target (not everywhere at the target), nothing when at
    the target everywhere, MOVED (left alone, named) when some partition is at neither."""
    current = state.committed.get(group, {})
    targets = [
        Target(group, t, p, current.get((t, p)), o) for (t, p), o in sorted(pending.targets.items())
    ]
    change = GroupChange(group, "reset", targets, error=refusal(state.infos.get(group)))
    if change.error is not None:
        return change
    moved = sorted(
        tp
        for tp, o in pending.targets.items()
        if current.get(tp) != o and current.get(tp) not in pending.previous.get(tp, set())
    )
    if moved:
        change.outcome = GroupStatus.MOVED
        change.error = (
            f"group {group}: moved since run {pending.run_id} planned it ({_names(moved)} at "
            "neither the offset it had before nor the target); left alone (--new-run shifts "
            "from where it is)"
        )
    elif all(current.get(tp) == o for tp, o in pending.targets.items()):
        change.skip = f"at run {pending.run_id}'s target already (written before it was killed)"
    return change


def plan_finish(
    open_: Unfinished, state: GroupsSnapshot, fresh: Sequence[GroupChange]
) -> list[GroupChange]:
    """The finishing run's changes: `fresh` (planned from the plan's resolved value) for the
    groups the plan has no word on, the plan's own for the others."""
    out = []
    for change in fresh:
        group = change.group
        if group in open_.done:
            current = state.committed.get(group, {})
            targets = [
                Target(group, t, p, current.get((t, p)), o)
                for (t, p), o in sorted(open_.written[group].items())
            ]
            skip = f"written by run {open_.done[group]} already"
            out.append(GroupChange(group, "reset", targets, skip=skip))
        elif group in open_.pending:
            out.append(finish_change(group, open_.pending[group], state))
        else:
            out.append(change)
    return out


@dataclass
class Rerun:
    """A relative reset's relation to its earlier runs: its command, the value to plan with,
    the killed run's plan it finishes (None: a new plan), and the newest plan of the command
    found (finished, ignored or finished now)."""

    command: str
    value: int
    unfinished: Unfinished | None = None
    previous: reruns.PlanRuns | None = None

    @property
    def ignore_claims(self) -> set[str]:
        """Runs whose open intents are no claim on this run's groups: those of the plan it
        finishes (its to finish), of a finished plan (its newest run decided every group the
        earlier, killed ones announced) or of the plan --new-run ignores, and the runs those
        plans had set aside (the plan before theirs)."""
        if self.previous is None:
            return set()
        return {*self.previous.runs, *self.previous.superseded}

    def ledger(self, spark: SparkSession, path: str, run_id: str) -> reruns.CommandLedger:
        """This run's ledger: its commits name the command, the plan and what it sets aside."""
        if self.unfinished is not None:
            plan, superseded = self.unfinished.runs.plan, self.unfinished.runs.superseded
        else:  # a new plan sets the newest one aside (not those before it: claims lapse)
            plan, superseded = None, frozenset(self.previous.runs if self.previous else ())
        return reruns.CommandLedger(
            spark, path, run_id, "reset", self.command, str(self.value), plan, superseded
        )


def prepare(
    spark: SparkSession | None,
    ledger_path: str | None,
    command: str,
    value: int,
    cluster_id: str | None,
    groups: Collection[str],
    new_run: bool,
) -> Rerun:
    """A relative reset's `Rerun`, saying on stderr when it finishes a killed run or, with
    `new_run`, ignores one (no session or no ledger: nothing to finish)."""
    runs, found = None, None
    if spark is not None and ledger_path and delta.exists(ledger_path):
        runs, found = lookup(spark, ledger_path, command, cluster_id, groups)
    if found is None:
        return Rerun(command, value, None, runs)
    plan = f" (the plan of run {found.runs.plan})" if found.runs.plan != found.run_id else ""
    if new_run:
        print(
            f"--new-run: ignoring run {found.run_id}{plan}, killed before its outcome; "
            "planning from where the groups are now",
            file=sys.stderr,
        )
        return Rerun(command, value, None, runs)
    print(
        f"finishing run {found.run_id}, killed before its outcome{plan}: its targets, "
        f"not a new shift (--new-run to shift from where the groups are now)",
        file=sys.stderr,
    )
    return Rerun(command, found.value, found, runs)
