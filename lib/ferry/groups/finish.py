"""A relative reset (`--shift-by`, `--by-duration`) run again after it was killed, or after it
ended with groups not done, finishes that run's plan instead of shifting again
(docs/jobs/groups.md, "A rerun after a kill").

kafka-consumer-groups is relative each time it runs, and so is Ferry when a run did all it
was asked (exit 0): a deliberate second run shifts again. But a scheduler retries a killed
task, and a failed one (exit 1: a group refused while active, moved, failed, unknown,
claimed), and a shift applied again to the groups the earlier run had already written moves
them twice. So each commit of a relative reset names its command (`command_key`) and the
plan it carries out (`ferry.write.reruns`); the same command, while the newest run of it has
an intent without an outcome or recorded a group as not done (`Ending`), plans nothing new:

- a group that a run of the plan wrote (outcome committed) is left alone;
- a group the plan announced (intent) and did not record as written, nor as never sent
  (REFUSED or CLAIMED at write time), gets the planned target when it is still at the
  offsets it had before (or already at the target on some partitions), is left alone when
  at the target everywhere, and is named and left alone (MOVED, exit 1) when it is at
  neither: something else moved it since;
- any other selected group (the plan never announced it or never sent its write, e.g. one
  refused while active, or another run wrote it after the plan did, e.g. a rollback) is
  planned afresh from where it is, with the value the plan resolved once (a
  `--by-duration`'s timestamp, not a new now()).

`--new-run` plans afresh instead, and says so. Pure but for `lookup` (the ledger reads).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Collection, Iterable, Mapping, Sequence
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
from ferry.write.ledger import PHASE_INTENT, PHASE_OUTCOME, PHASE_PLAN

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
    targets: dict[TopicPartitionKey, int] = field(default_factory=dict)
    # what it had before, as each intent that counts says
    previous: dict[TopicPartitionKey, set[int | None]] = field(default_factory=dict)
    runs: set[str] = field(default_factory=set)  # the runs whose intents count


@dataclass(frozen=True)
class Ending:
    """How the newest run of a plan ended, as its ledger rows say: killed (an intent without
    an outcome) and how many groups it recorded as not done. Neither: it did all it was
    asked (exit 0), and the same command shifts again."""

    killed: bool = False
    not_done: int = 0

    @property
    def is_unfinished(self) -> bool:
        return self.killed or self.not_done > 0

    @property
    def reason(self) -> str:
        """Why its plan is finished rather than a new shift made, for the stderr line."""
        if self.killed:
            return "killed before its outcome"
        return f"which ended with {self.not_done} group{'s' * (self.not_done != 1)} not done"


@dataclass
class Unfinished:
    """What the ledger says of an unfinished run's plan (killed, or ended with groups not
    done), for the selected groups."""

    runs: reruns.PlanRuns
    done: dict[str, str] = field(default_factory=dict)  # group → the run that wrote it
    pending: dict[str, Pending] = field(default_factory=dict)
    ending: Ending = Ending(killed=True)

    @property
    def run_id(self) -> str:
        """The unfinished run (the plan's newest)."""
        return self.runs.latest

    @property
    def value(self) -> int:
        """The value the plan resolved its command to (N, or a timestamp in epoch ms)."""
        return int(self.runs.resolved)


def has_open_intent(summaries: Sequence[Mapping]) -> bool:
    """Whether some (run, group) of the summaries (`reruns.summarize`) has an intent and no
    outcome."""
    intents = {(s["run_id"], s["group"]) for s in summaries if s["phase"] == PHASE_INTENT}
    outcomes = {(s["run_id"], s["group"]) for s in summaries if s["phase"] == PHASE_OUTCOME}
    return bool(intents - outcomes)


def ending(summaries: Sequence[Mapping], unrecorded: int = 0) -> Ending:
    """How a run ended from its own rows' summaries (`reruns.summarize`, plan rows too): an
    open intent, and the groups whose plan or outcome rows name a status not done, with
    `unrecorded` more (not done, no ledger row: `reruns.UNRECORDED`)."""
    not_done = {
        s["group"] for s in summaries if s["phase"] in (PHASE_PLAN, PHASE_OUTCOME) and s["not_done"]
    }
    return Ending(has_open_intent(summaries), len(not_done) + unrecorded)


def _records(summaries: Sequence[Mapping]) -> list[rules.GroupWriteRecord]:
    """One group's summaries of runs outside the plan, as `rules.superseding_runs` takes them
    (as a rollback reads them: may have written = no outcome, committed, or UNKNOWN)."""
    by_run: dict[str, dict[str, Mapping]] = {}
    for s in summaries:
        by_run.setdefault(s["run_id"], {})[s["phase"]] = s
    out = []
    for run, phases in sorted(by_run.items()):
        intent, outcome = phases.get(PHASE_INTENT), phases.get(PHASE_OUTCOME)
        if intent is None or intent["first"] is None:
            continue
        committed = bool(outcome and outcome["is_committed"])
        may = outcome is None or committed or bool(outcome["unknown"])
        rollback_of = next((p["rollback_of"] for p in phases.values() if p["rollback_of"]), None)
        out.append(rules.GroupWriteRecord(run, intent["first"], may, committed, rollback_of))
    return out


def unfinished(runs: reruns.PlanRuns, summaries: Sequence[Mapping]) -> Unfinished:
    """The plan's state per group from the write rows on its cluster since it began (its
    runs' and others', `reruns.summarize`d): written, pending (targets not filled in yet:
    `fill_pending`), or neither (planned afresh). A group another run may have written after
    the plan's last word on it is that run's: planned afresh."""
    plan = set(runs.runs)
    out = Unfinished(runs)
    by_group: dict[str, list[Mapping]] = {}
    for s in summaries:
        by_group.setdefault(s["group"], []).append(s)
    for group, own in sorted(by_group.items()):
        mine = [s for s in own if s["run_id"] in plan]
        others = _records([s for s in own if s["run_id"] not in plan])
        last = max((s["last"] for s in mine if s["phase"] == PHASE_INTENT), default=None)
        if last is None or rules.superseding_runs("", last, others):
            continue
        # Only the plan's rows after the last other run that may have written the group
        # before the plan's last word on it (one after it was undone since: not superseding).
        cut = max((o.time for o in others if o.may_have_written and o.time < last), default=None)
        mine = [s for s in mine if cut is None or s["first"] > cut]
        wrote = [s for s in mine if s["phase"] == PHASE_OUTCOME and s["is_committed"]]
        if wrote:
            out.done[group] = max(wrote, key=lambda s: s["last"])["run_id"]
            continue
        # An intent whose outcome says its write was never sent (refused while active,
        # claimed) is no word on the group: the plan did not write it.
        unsent = {s["run_id"] for s in mine if s["phase"] == PHASE_OUTCOME and s.get("declined")}
        intents = [s for s in mine if s["phase"] == PHASE_INTENT and s["run_id"] not in unsent]
        if intents:
            newest = max(intents, key=lambda s: s["last"])["run_id"]
            out.pending[group] = Pending(newest, runs={s["run_id"] for s in intents})
    return out


def fill_pending(open_: Unfinished, intents: Iterable[tuple]) -> None:
    """Each pending group's targets (its newest intent's) and offsets before (every intent
    that counts), from intent rows (run, group, topic, partition, previous, new)."""
    for run, group, topic, partition, previous, new in intents:
        pending = open_.pending.get(group)
        if pending is None or run not in pending.runs:
            continue
        pending.previous.setdefault((topic, partition), set()).add(previous)
        if run == pending.run_id:
            pending.targets[(topic, partition)] = new


def lookup(
    spark: SparkSession, path: str, command: str, cluster_id: str | None, groups: Collection[str]
) -> tuple[reruns.PlanRuns | None, Unfinished | None]:
    """The newest plan of `command` (None: no run of it) and, when its newest run did not do
    all it was asked (killed, or groups not done: `Ending`), what is left of it for
    `groups`."""
    runs = reruns.find_plan(spark, path, command)
    if runs is None:
        return None, None
    since = runs.started[runs.latest]
    latest = reruns.read_writes(spark, path, cluster_id, since, run_id=runs.latest, with_plan=True)
    end = ending(reruns.summarize(latest), runs.unrecorded)
    if not end.is_unfinished:
        return runs, None
    table = reruns.read_writes(spark, path, cluster_id, runs.since, groups)
    open_ = unfinished(runs, reruns.summarize(table))
    open_.ending = end
    pairs = {(run, g) for g, pending in open_.pending.items() for run in pending.runs}
    fill_pending(open_, reruns.partition_rows(table, PHASE_INTENT, pairs))
    return runs, open_


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
        change.skip = f"at run {pending.run_id}'s target already (an earlier write landed)"
    return change


def plan_finish(
    open_: Unfinished, state: GroupsSnapshot, fresh: Sequence[GroupChange]
) -> list[GroupChange]:
    """The finishing run's changes: `fresh` (planned from the plan's resolved value) for the
    groups the plan has no word on, the plan's own for the others."""
    out = []
    for change in fresh:
        group = change.group
        if group in open_.done:  # shown where it is now: nothing to write
            current = state.committed.get(group, {})
            targets = [
                Target(group, t.topic, t.partition, t.previous_offset, o)
                for t in change.targets
                if (o := current.get((t.topic, t.partition))) is not None
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
    """A relative reset's `Rerun`, saying on stderr when it finishes an unfinished run (killed,
    or ended with groups not done) or, with `new_run`, ignores one (no session or no ledger:
    nothing to finish)."""
    runs, found = None, None
    if spark is not None and ledger_path and delta.exists(ledger_path):
        runs, found = lookup(spark, ledger_path, command, cluster_id, groups)
    if found is None:
        return Rerun(command, value, None, runs)
    plan = f" (the plan of run {found.runs.plan})" if found.runs.plan != found.run_id else ""
    if new_run:
        print(
            f"--new-run: ignoring run {found.run_id}{plan}, {found.ending.reason}; "
            "planning from where the groups are now",
            file=sys.stderr,
        )
        return Rerun(command, value, None, runs)
    print(
        f"finishing run {found.run_id}, {found.ending.reason}{plan}: its targets, "
        f"not a new shift (--new-run to shift from where the groups are now)",
        file=sys.stderr,
    )
    return Rerun(command, found.value, found, runs)
