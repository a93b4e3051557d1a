"""What earlier checkpoint runs mean to the next one, judged from their records (pure):
a run's clusters and rename (`runs.RunRecord` in its `ready`), whether it confirmed its write
(`written`) or found its query running (`aborting`), the move a config makes against the
recorded one (`runs.judge_move`), and the ledger's memory of a run whose folder is gone
(`ferry.checkpoint.earlier`)."""

from __future__ import annotations

from ferry.checkpoint import earlier, runs
from ferry.checkpoint.runs import Move, MoveVerdict, RunRecord, RunState
from ferry.status import GroupStatus

from .test_checkpoint import ORIGINAL, TRANSLATED, offsets_file

A, B, C = "clusterA", "clusterB", "clusterC"
SAME_NAMES = {"t": "t"}
LISTED = RunRecord(Move.of(A, B, SAME_NAMES), (3, 4, 5), (3, 4))  # batch 5 not committed


def judged(
    files: dict[int, bytes | None],
    newest: int = 5,
    marks: frozenset[str] = frozenset(),
    listing: runs.Listing = ((3, 4, 5), (3, 4)),
    record: RunRecord | None = LISTED,
) -> runs.RunFiles:
    run = runs.RunFiles(
        "migrate-checkpoint-x", dict(ORIGINAL), dict(TRANSLATED), record=record, marks=marks
    )
    runs.judge(run, newest, files.get, listing)
    return run


def test_the_record_in_ready_round_trips_and_an_older_ready_has_none():
    record = RunRecord(Move.of(A, B, {"t": "source.t"}), (0, 1), (0,))
    assert RunRecord.parse(record.to_bytes()) == record
    # an older Ferry wrote the run id alone
    assert RunRecord.parse(b"migrate-checkpoint-20261126T070000Z-1a2b3c") is None
    assert RunRecord.parse(b'{"offsets": []}') is None


def test_the_same_move_another_one_onward_and_a_config_elsewhere():
    moved = Move.of(A, B, SAME_NAMES)
    assert runs.judge_move(moved, Move.of(A, B, SAME_NAMES)) == MoveVerdict.SAME
    # failback B→A (the config's clusters swapped) and an onward move B→C
    assert runs.judge_move(moved, Move.of(B, A, SAME_NAMES)) == MoveVerdict.ONWARD
    assert runs.judge_move(moved, Move.of(B, C, SAME_NAMES)) == MoveVerdict.ONWARD
    # the checkpoint is on B: a config from A (to C, or to B under another rename) is not
    assert runs.judge_move(moved, Move.of(A, C, SAME_NAMES)) == MoveVerdict.ELSEWHERE
    assert runs.judge_move(moved, Move.of(A, B, {"t": "copy.t"})) == MoveVerdict.ELSEWHERE
    assert runs.judge_move(moved, Move.of(C, A, SAME_NAMES)) == MoveVerdict.ELSEWHERE
    # a run from before the record: judged by its files alone
    assert runs.judge_move(None, Move.of(B, A, SAME_NAMES)) == MoveVerdict.UNRECORDED


def test_a_rename_within_one_cluster_run_again_is_the_same_move():
    moved = Move.of(A, A, {"t": "t2"})
    assert runs.judge_move(moved, Move.of(A, A, {"t": "t2"})) == MoveVerdict.SAME


def test_a_run_that_confirmed_its_write_is_judged_by_its_files():
    written = frozenset({runs.WRITTEN})
    assert judged(dict(TRANSLATED), marks=written).state == RunState.COMPLETE
    newer = offsets_file('{"t":{"0":44,"1":41}}')
    run = judged({**TRANSLATED, 6: newer}, 6, written, ((3, 4, 5, 6), (3, 4, 5, 6)))
    assert run.state == RunState.RAN_ON_TRANSLATION


def test_a_run_killed_before_it_confirmed_with_nothing_since_is_finished():
    # after its files, before `written`: every file translated, the logs as it listed them
    run = judged(dict(TRANSLATED))
    assert run.state == RunState.PARTIAL and run.remaining == []
    run = judged({4: ORIGINAL[4], 5: TRANSLATED[5]})
    assert run.state == RunState.PARTIAL and run.remaining == [4]


def test_a_run_marked_aborting_is_aborting_whatever_its_files():
    for files in (dict(ORIGINAL), dict(TRANSLATED), {4: TRANSLATED[4], 5: ORIGINAL[5]}):
        run = judged(files, marks=frozenset({runs.ABORTING}))
        assert run.state == RunState.ABORTING


def test_a_batch_from_the_source_during_an_unconfirmed_write_makes_it_aborting():
    """Killed after the query's batch 6 appeared, before the run wrote `aborting`: batch 6
    went on from the source's own positions (behind the translation: the destination is
    ahead here), so the originals go back under it."""
    behind = offsets_file('{"t":{"0":35,"1":36}}')  # before the translated 40, 41
    run = judged({**TRANSLATED, 6: behind}, 6, listing=((3, 4, 5, 6), (3, 4)))
    assert run.state == RunState.ABORTING and "batch 6 appeared" in run.why
    # a commit alone (the query finished batch 5 while the files were rewritten)
    run = judged(dict(TRANSLATED), listing=((3, 4, 5), (3, 4, 5)))
    assert run.state == RunState.ABORTING and "batch 5 was committed" in run.why


def test_a_batch_going_on_from_an_unconfirmed_write_is_refused_not_taken_for_a_translation():
    """Today this read as RAN_ON_TRANSLATION (ALREADY_MIGRATED): with the same names and a
    destination behind the source, a source batch goes on from the translation too."""
    on = offsets_file('{"t":{"0":52,"1":53}}')
    run = judged({**TRANSLATED, 6: on}, 6, listing=((3, 4, 5, 6), (3, 4, 5, 6)))
    assert run.state == RunState.UNCONFIRMED and "goes on from its translation" in run.why


def test_a_run_without_a_record_keeps_the_files_rules():
    on = offsets_file('{"t":{"0":52,"1":53}}')
    run = judged({**TRANSLATED, 6: on}, 6, listing=((3, 4, 5, 6), (3, 4, 5, 6)), record=None)
    assert run.state == RunState.RAN_ON_TRANSLATION
    assert judged(dict(TRANSLATED), record=None).state == RunState.COMPLETE


ROOT = "file:/chk/q"


def row(run_id: str, group: str, topic: str | None, offset: int | None, **values) -> dict:  # noqa: ANN003
    return {
        "run_id": run_id,
        "action": "migrate-checkpoint",
        "group": f"{ROOT}/{group}",
        "topic": topic,
        "partition": 0 if topic else None,
        "new_offset": offset,
        "status": "COMMITTED",
        "message": "",
        **values,
    }


def test_the_ledger_tells_a_translation_in_place_whose_folder_is_gone():
    rows = [row("r1", "offsets/4", "t", 30), row("r1", "offsets/5", "t", 40)]
    translations = earlier.ledger_translations(rows)
    now = {f"{ROOT}/offsets/4": {("t", 0): 30}, f"{ROOT}/offsets/5": {("t", 0): 40}}
    assert earlier.translation_in_place(translations, now, set()) == ("r1", f"{ROOT}/offsets/4")
    # the folder is there: the folder tells (runs.last_run), not the ledger
    assert earlier.translation_in_place(translations, now, {"r1"}) is None
    # source positions (not what r1 wrote), or only some files as r1 wrote them
    moved = {**now, f"{ROOT}/offsets/5": {("t", 0): 50}}
    assert earlier.translation_in_place(translations, moved, set()) is None
    # the query went on since: offsets/6, /7 are not among the run's files
    later = {f"{ROOT}/offsets/6": {("t", 0): 45}, f"{ROOT}/offsets/7": {("t", 0): 47}}
    assert earlier.translation_in_place(translations, later, set()) is None


def test_runs_aborted_or_rolled_back_and_rows_without_positions_are_no_translation():
    rows = [
        row("r1", "offsets/5", "t", 40),
        row("r1", "offsets/5", None, None, status=GroupStatus.ABORTED),
        row("r2", "offsets/5", "t", 40),
        row("rb", "offsets/5", None, None, action="rollback-checkpoint", message="rollback of r2"),
        row("r3", "offsets/5", None, None, message="finishing run r0"),
    ]
    assert earlier.ledger_translations(rows) == {}
