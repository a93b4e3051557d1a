"""A rollback's two pure checks (`ferry.write.rules`): whether a later run may have written a
group since the run being rolled back announced its write, and what to do with the offsets the
group has now."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from ferry.write.rules import (
    ROLLBACK_ALREADY,
    ROLLBACK_ALTER,
    ROLLBACK_DELETE,
    ROLLBACK_MOVED,
    GroupWriteRecord,
    rollback_check,
    superseding_runs,
)

T0 = datetime(2026, 11, 26, 6, 0, tzinfo=timezone.utc)
A0, A1, B0 = ("a", 0), ("a", 1), ("b", 0)


def at(minutes: int) -> datetime:
    return T0 + timedelta(minutes=minutes)


def test_at_the_runs_offsets_is_restored_at_the_previous_ones_is_already():
    assert rollback_check({A0: 9, A1: 7}, {A0: 3, A1: 7}, [], {A0: 9, A1: 7}).decision == (
        ROLLBACK_ALTER
    )
    assert rollback_check({A0: 3, A1: 7}, {A0: 3, A1: 7}, [], {A0: 9, A1: 7}).decision == (
        ROLLBACK_ALREADY
    )
    # the run wrote what the group had: nothing to undo
    assert rollback_check({A0: 3}, {A0: 3}, [], {A0: 3}).decision == ROLLBACK_ALREADY


def test_anything_else_moved_on_and_is_never_touched():
    assert rollback_check({A0: 12}, {A0: 3}, [], {A0: 9}).decision == ROLLBACK_MOVED
    # half way: one partition moved by a consumer since
    assert rollback_check({A0: 9, A1: 8}, {A0: 3, A1: 7}, [], {A0: 9, A1: 7}).decision == (
        ROLLBACK_MOVED
    )
    # partitions the run did not write do not matter to an alter
    assert rollback_check({A0: 9, B0: 1}, {A0: 3}, [], {A0: 9}).decision == ROLLBACK_ALTER


def test_a_group_created_by_the_run_is_deleted_unless_it_has_other_offsets_now():
    assert rollback_check({A0: 9}, {}, [A0], {A0: 9}).decision == ROLLBACK_DELETE
    assert rollback_check({}, {}, [A0], {A0: 9}).decision == ROLLBACK_ALREADY  # already gone
    # a consumer committed another topic since: deleting would lose that offset, and a[0]
    # cannot be un-committed alone: as far as it can go, saying what is left
    check = rollback_check({A0: 9, B0: 1}, {}, [A0], {A0: 9})
    assert (check.decision, check.stuck) == (ROLLBACK_ALREADY, (A0,))


def test_partitions_without_an_offset_before_cannot_be_uncommitted_alone():
    check = rollback_check({A0: 9, A1: 4}, {A0: 3}, [A1], {A0: 9, A1: 4})
    assert (check.decision, check.stuck) == (ROLLBACK_ALTER, (A1,))
    # the rerun after that restore: as far as it can go, and still says what is left
    check = rollback_check({A0: 3, A1: 4}, {A0: 3}, [A1], {A0: 9, A1: 4})
    assert (check.decision, check.stuck) == (ROLLBACK_ALREADY, (A1,))
    assert rollback_check({A0: 3, A1: 5}, {A0: 3}, [A1], {A0: 9, A1: 4}).decision == (
        ROLLBACK_MOVED
    )


def test_a_delete_run_is_undone_only_while_the_group_is_still_gone():
    wrote = {A0: None, A1: None}  # the run deleted the group
    assert rollback_check({}, {A0: 3, A1: 7}, [], wrote).decision == ROLLBACK_ALTER
    assert rollback_check({B0: 2}, {A0: 3, A1: 7}, [], wrote).decision == ROLLBACK_MOVED
    assert rollback_check({A0: 3, A1: 7}, {A0: 3, A1: 7}, [], wrote).decision == ROLLBACK_ALREADY


def test_a_later_run_that_may_have_written_the_group_supersedes_the_run():
    # A announced at 0 and never recorded an outcome; B announced the same write at 5 and was
    # killed too: the offsets the group has may be B's, whatever A meant
    b = GroupWriteRecord("B", at(5), may_have_written=True, is_committed=False)
    assert superseding_runs("A", at(0), [b]) == ["B"]
    # earlier runs, and later ones that recorded they did not write it, do not count
    earlier = GroupWriteRecord("Z", at(-5), may_have_written=True, is_committed=True)
    claimed = GroupWriteRecord("C", at(6), may_have_written=False, is_committed=False)
    assert superseding_runs("A", at(0), [earlier, claimed]) == []


def test_reruns_of_the_rollback_and_undone_runs_do_not_supersede():
    killed_try = GroupWriteRecord("R1", at(9), True, False, rollback_of="A")
    assert superseding_runs("A", at(0), [killed_try]) == []
    # B wrote it later, and a rollback of B undid that: A's write is the group's again
    b = GroupWriteRecord("B", at(5), True, True)
    undo_b = GroupWriteRecord("RB", at(7), True, True, rollback_of="B")
    assert superseding_runs("A", at(0), [b, undo_b]) == []
    # a rollback of B that was killed (no outcome) undid nothing for certain
    killed_undo_b = GroupWriteRecord("RB", at(7), True, False, rollback_of="B")
    assert superseding_runs("A", at(0), [b, killed_undo_b]) == ["B", "RB"]
    # a rollback of an earlier run that wrote the group after A is a later write like any
    undo_z = GroupWriteRecord("RZ", at(8), True, True, rollback_of="Z")
    assert superseding_runs("A", at(0), [undo_z]) == ["RZ"]
