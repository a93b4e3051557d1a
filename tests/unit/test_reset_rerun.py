"""A relative reset run again after a kill (issue #68): which command is "the same", which plan
the ledger's log names, and what the finishing run does with each group (pure parts of
`ferry.groups.finish` and `ferry.write.reruns`)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pyarrow as pa
import pytest

from ferry.errors import UsageError
from ferry.groups import finish
from ferry.groups.describe import GroupsSnapshot
from ferry.groups.plans import GroupChange, change_status
from ferry.groups.reset import ResetSpec, Target
from ferry.groups.selection import ResetSelection
from ferry.kafka.groups import GroupInfo
from ferry.status import GroupState, GroupStatus
from ferry.write import reruns

T0 = datetime(2026, 12, 6, 3, 0, tzinfo=timezone.utc)
P0, P1 = ("t", 0), ("t", 1)


def key(spec=ResetSpec.SHIFT_BY, scope=None, **options):
    options = {"group": "g-.*", "shift_by": -50, "by_duration": "PT1H", **options}
    return finish.command_key("b:9092", spec, options, ResetSelection(["g-1"], scope, None))


def test_the_same_command_is_the_same_cluster_selection_scope_spec_and_value():
    assert key() == key()
    assert key(ResetSpec.BY_DURATION) == key(ResetSpec.BY_DURATION, by_duration="PT60M")
    assert key(ResetSpec.BY_DURATION) != key(ResetSpec.BY_DURATION, by_duration="PT61M")
    assert key() != key(shift_by=-49)
    assert key() != key(group="g-1")
    assert key() != key(scope={"t": None})
    assert key(scope={"t": (0, 1), "u": None}) == key(scope={"u": None, "t": (0, 1)})
    assert key() != finish.command_key(
        "other:9092", ResetSpec.SHIFT_BY, {"group": "g-.*", "shift_by": -50},
        ResetSelection(["g-1"], None, None),
    )  # fmt: skip


def test_new_run_is_for_relative_resets_only():
    finish.check_new_run(ResetSpec.BY_DURATION, True)
    finish.check_new_run(ResetSpec.TO_OFFSET, False)
    with pytest.raises(UsageError, match="--new-run is for --shift-by and --by-duration"):
        finish.check_new_run(ResetSpec.TO_DATETIME, True)


def commit(run, plan, command="K", minutes=0, phase="intent", resolved="-50"):
    return {
        "ferry.run_id": run,
        "ferry.phase": phase,
        reruns.COMMAND: command,
        reruns.PLAN: plan,
        reruns.RESOLVED: resolved,
        reruns.RUN_TIME: (T0 + timedelta(minutes=minutes)).isoformat(),
    }


def test_the_newest_plan_of_the_command_and_its_runs():
    history = [  # newest first
        commit("C", "B", minutes=9, phase="outcome"),
        commit("X", "X", command="other", minutes=8),
        commit("C", "B", minutes=9),
        commit("B", "B", minutes=5, phase="outcome"),
        commit("B", "B", minutes=5, resolved="123"),
        commit("A", "A", minutes=1),  # an older plan of the same command
        {"ferry.run_id": "M", "ferry.phase": "intent"},  # a migrate run: no command
    ]
    found = reruns.plan_of(list(enumerate(reversed(history)))[::-1], "K")
    assert (found.plan, found.runs, found.latest) == ("B", ("B", "C"), "C")
    assert found.resolved == "123" and found.since == T0 + timedelta(minutes=5)
    assert reruns.plan_of([(0, commit("A", "A"))], "other") is None


def row(run, group, phase, tp=P0, previous=100, new=50, minutes=0, **extra):
    return {
        "run_id": run,
        "group": group,
        "topic": tp[0],
        "partition": tp[1],
        "previous_offset": previous,
        "new_offset": new,
        "phase": phase,
        "is_committed": extra.pop("is_committed", phase == "outcome"),
        "status": extra.pop("status", "COMMITTED"),
        "rollback_of": extra.pop("rollback_of", None),
        "row_time": T0 + timedelta(minutes=minutes),
    }


SCHEMA = pa.schema(
    [
        ("run_id", pa.string()),
        ("group", pa.string()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("previous_offset", pa.int64()),
        ("new_offset", pa.int64()),
        ("phase", pa.string()),
        ("is_committed", pa.bool_()),
        ("status", pa.string()),
        ("rollback_of", pa.string()),
        ("row_time", pa.timestamp("us", tz="UTC")),
    ]
)


def summaries(rows):
    return reruns.summarize(pa.Table.from_pylist(rows, SCHEMA))


def test_an_intent_without_outcome_is_open():
    assert finish.has_open_intent(summaries([row("A", "g1", "intent"), row("A", "g2", "intent"),
                                             row("A", "g1", "outcome")]))  # fmt: skip
    assert not finish.has_open_intent(
        summaries(
            [
                row("A", "g1", "intent", tp=P0),
                row("A", "g1", "intent", tp=P1),
                row("A", "g1", "outcome"),
            ]
        )  # fmt: skip
    )


def plan_runs(*runs):
    started = {r: T0 for r in runs}
    return reruns.PlanRuns(runs[0], runs, runs[-1], "-50", T0, started)


def test_the_plan_per_group_written_pending_or_afresh():
    rows = [
        # g1: written by A; g2: announced by A, never recorded; g3: A's write rolled back since
        *(row("A", g, "intent", minutes=1) for g in ("g1", "g2", "g3")),
        row("A", "g1", "outcome", minutes=2),
        row("A", "g3", "outcome", minutes=2),
        row("R", "g3", "intent", previous=50, new=100, minutes=3, rollback_of="A"),
        row("R", "g3", "outcome", previous=50, new=100, minutes=3, rollback_of="A"),
        # g4: A's intent, then B (finishing A) announced it again from where it was, killed
        row("A", "g4", "intent", previous=100, new=50, minutes=1),
        row("B", "g4", "intent", previous=70, new=50, minutes=4),
        # g5: a different command's run wrote it after A announced it
        row("A", "g5", "intent", minutes=1),
        row("D", "g5", "intent", previous=100, new=0, minutes=5),
        row("D", "g5", "outcome", previous=100, new=0, minutes=5),
        # g6: a different command's run was refused on it after A: it wrote nothing
        row("A", "g6", "intent", minutes=1),
        row("D", "g6", "intent", minutes=5),
        row("D", "g6", "outcome", minutes=5, is_committed=False, status="REFUSED"),
        # g7: written by A; another run wrote it since and was rolled back: A's still
        row("A", "g7", "intent", minutes=1),
        row("A", "g7", "outcome", minutes=2),
        row("E", "g7", "intent", previous=50, new=0, minutes=5),
        row("E", "g7", "outcome", previous=50, new=0, minutes=5),
        row("F", "g7", "intent", previous=0, new=50, minutes=6, rollback_of="E"),
        row("F", "g7", "outcome", previous=0, new=50, minutes=6, rollback_of="E"),
    ]
    got = finish.unfinished(plan_runs("A", "B"), summaries(rows))
    assert got.done == {"g1": "A", "g7": "A"}
    assert set(got.pending) == {"g2", "g4", "g6"}
    table = pa.Table.from_pylist(rows, SCHEMA)
    pairs = {(run, g) for g, pending in got.pending.items() for run in pending.runs}
    finish.fill_pending(got, reruns.partition_rows(table, "intent", pairs))
    assert got.pending["g4"] == finish.Pending("B", {P0: 50}, {P0: {100, 70}}, {"A", "B"})
    assert got.pending["g2"] == finish.Pending("A", {P0: 50}, {P0: {100}}, {"A"})


def snapshot(committed, state=GroupState.EMPTY):
    return GroupsSnapshot({"g": GroupInfo("g", state)}, {"g": committed})


def test_a_pending_group_is_written_left_alone_or_named():
    pending = finish.Pending("A", {P0: 50, P1: 60}, {P0: {100}, P1: {110}})

    def status(committed, state=GroupState.EMPTY) -> tuple[GroupStatus, GroupChange]:
        change = finish.finish_change("g", pending, snapshot(committed, state))
        return change_status(change, True), change

    assert status({P0: 100, P1: 110})[0] == GroupStatus.COMMITTED
    written, change = status({P0: 50, P1: 110})  # half at the target: written all the same
    assert written == GroupStatus.COMMITTED
    assert [(t.previous_offset, t.new_offset) for t in change.targets] == [(50, 50), (110, 60)]
    assert status({P0: 50, P1: 60})[0] == GroupStatus.ALREADY_COPIED
    moved, change = status({P0: 50, P1: 61})
    assert moved == GroupStatus.MOVED and "moved since run A planned it (t[1]" in change.error
    assert status({P0: 100, P1: 110}, GroupState.STABLE)[0] == GroupStatus.REFUSED


def test_the_finishing_plan_keeps_fresh_changes_for_groups_it_has_no_word_on():
    open_ = finish.Unfinished(plan_runs("A"), done={"g": "A"})
    fresh = [
        GroupChange("g", "reset", [Target("g", "t", 0, 50, 40)]),
        GroupChange("h", "reset", []),
    ]
    state = GroupsSnapshot({}, {"g": {P0: 50}})
    done, new = finish.plan_finish(open_, state, fresh)
    assert done.skip == "written by run A already" and new is fresh[1]
    assert [(t.previous_offset, t.new_offset) for t in done.targets] == [(50, 50)]  # stays


def test_a_run_that_ended_with_groups_not_done_is_unfinished():
    """A run's own rows (plan rows too): a group refused or moved in its plan, or whose write
    failed, was unknown or claimed, was not done (exit 1); one written, or already at its
    target, was."""
    done = [
        row("A", "g1", "intent"),
        row("A", "g1", "outcome"),
        row("A", "g2", "plan", status="ALREADY_COPIED", is_committed=False),
    ]
    assert finish.ending(summaries(done)) == finish.Ending(False, 0)
    assert not finish.ending(summaries(done)).is_unfinished
    not_done = [
        *done,
        row("A", "g3", "plan", status="REFUSED", is_committed=False),
        row("A", "g4", "plan", tp=P0, status="MOVED", is_committed=False),
        row("A", "g4", "plan", tp=P1, status="MOVED", is_committed=False),
        *(row("A", g, "intent") for g in ("g5", "g6", "g7")),
        row("A", "g5", "outcome", status="FAILED", is_committed=False),
        row("A", "g6", "outcome", status="UNKNOWN", is_committed=False),
        row("A", "g7", "outcome", status="CLAIMED", is_committed=False),
    ]
    ended = finish.ending(summaries(not_done))
    assert ended == finish.Ending(False, 5) and ended.is_unfinished
    assert ended.reason == "which ended with 5 groups not done"
    # a group not done with nothing to reset has no row: its commits count it
    assert finish.ending(summaries(done), unrecorded=1).reason == (
        "which ended with 1 group not done"
    )
    killed = finish.ending(summaries([*not_done, row("A", "g8", "intent")]))
    assert killed.killed and killed.reason == "killed before its outcome"


def test_the_newest_runs_unrecorded_groups_come_from_its_commits():
    history = [  # newest first
        {**commit("B", "A", minutes=5, phase="outcome"), reruns.UNRECORDED: "2"},
        {**commit("B", "A", minutes=5), reruns.UNRECORDED: "2"},
        {**commit("A", "A", minutes=1), reruns.UNRECORDED: "7"},
    ]
    found = reruns.plan_of(list(enumerate(reversed(history)))[::-1], "K")
    assert (found.latest, found.unrecorded) == ("B", 2)
    assert reruns.plan_of([(0, commit("A", "A"))], "K").unrecorded == 0  # an older Ferry's


def test_a_group_whose_write_was_never_sent_is_planned_afresh():
    """A's intent announced g1..g4; g1 was refused at write time (it had become active) and
    g2 claimed: never sent, so planned afresh from where they are (a consumer may have moved
    them since); g3's write failed and g4's was unknown: they may have landed, so pending
    (the plan's target, or left alone at it)."""
    rows = [
        *(row("A", g, "intent", minutes=1) for g in ("g1", "g2", "g3", "g4")),
        row("A", "g1", "outcome", minutes=2, status="REFUSED", is_committed=False),
        row("A", "g2", "outcome", minutes=2, status="CLAIMED", is_committed=False),
        row("A", "g3", "outcome", minutes=2, status="FAILED", is_committed=False),
        row("A", "g4", "outcome", minutes=2, status="UNKNOWN", is_committed=False),
        # g5: refused in A's plan (no intent); B, finishing A, refused it at write time
        row("A", "g5", "plan", minutes=1, status="REFUSED", is_committed=False),
        row("B", "g5", "intent", minutes=4),
        row("B", "g5", "outcome", minutes=4, status="REFUSED", is_committed=False),
    ]
    got = finish.unfinished(plan_runs("A", "B"), summaries(rows))
    assert got.done == {} and set(got.pending) == {"g3", "g4"}
