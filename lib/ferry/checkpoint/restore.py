"""`migrate --checkpoint PATH --rollback RUN_ID [--execute]`: the offsets files a checkpoint run
rewrote put back as they were, from the originals it copied under `PATH/ferry/RUN_ID/original/`.

Only while the checkpoint still holds what the run wrote (or, for a run killed between its
files, the original of those it had not rewritten yet): a file that is neither is refused
(exit 1, nothing written), and so is a batch newer than the run's that goes on from the
translation (the query has run on the destination since: source offsets under batches the
destination produced would make it read the wrong records). A newer batch that does *not* go on
from it was written by the query on the source, still running when Ferry translated: putting
the originals back is what makes its log whole again, so that is allowed. All files or none,
each replaced whole (`ferry.checkpoint.rewrite.replace`); intent and outcome in the ledger;
killed at any point, the same command again finishes it. A run that a later run (not rolled
back, not aborted) followed is refused: roll the later one back first.
"""

from __future__ import annotations

from collections.abc import Callable

from ferry.checkpoint import runs
from ferry.checkpoint.rewrite import LogsSeen, file_rows, read_if_there, replace
from ferry.checkpoint.runs import FERRY_DIR, ROLLED_BACK, offsets_name
from ferry.checkpoint.stores import open_store
from ferry.config import FerryConfig
from ferry.errors import FerryError, UsageError
from ferry.output import emit_rows, print_summary
from ferry.write.kill_points import kill_point
from ferry.write.ledger import PHASE_INTENT, PHASE_OUTCOME, PHASE_PLAN, Ledger, new_run_id

ROLLBACK_COLUMNS = ["file", "status", "note"]


def rollback_job(
    spark,  # noqa: ANN001 - a SparkSession
    cfg: FerryConfig,
    path: str | None,
    run_id: str,
    is_execute: bool,
    fmt: str,
    progress: Callable[[str], None],
) -> int:
    if not path:
        raise UsageError(f"run {run_id} rewrote a checkpoint: give it with --checkpoint PATH")
    store = open_store(spark, path)
    folder = f"{FERRY_DIR}/{run_id}"
    originals = runs.batch_files(store, f"{folder}/original/offsets")
    originals |= runs.start_files(store, f"{folder}/original")  # sources/KEY/0
    if not originals:
        raise UsageError(f"{store.name(folder)}: no originals of run {run_id} in this checkpoint")
    translations = runs.batch_files(store, f"{folder}/translated/offsets")
    translations |= runs.start_files(store, f"{folder}/translated")
    progress(f"run {run_id} rewrote {', '.join(offsets_name(b) for b in originals)}")
    later = [r for r in runs.run_ids(store) if r > run_id and runs.read_run(store, r)]
    if later:
        # Its files hold what the later run wrote (or the query's batches on them): putting
        # this run's originals back under them would mix two moves.
        raise FerryError(
            f"{store.root}: not rolled back: run {later[-1]} rewrote the checkpoint after run "
            f"{run_id}; roll it back first"
        )
    seen = LogsSeen.list(store)
    newest = seen.offsets[-1] if seen.offsets else None
    wrote = max(b for b in originals if isinstance(b, int))
    if newest is not None and newest > wrote:
        why = runs.goes_on_from(
            runs.parse("translated", wrote, translations[wrote]),
            runs.parse("original", wrote, originals[wrote]),
            runs.parse(offsets_name(newest), newest, store.read(offsets_name(newest))),
        )
        if why is None:
            raise FerryError(
                f"{store.root}: not rolled back: batch {newest} was written after the run and "
                "goes on from its translation: the query ran on the destination; rolling back "
                "would rewind it"
            )
        progress(f"batch {newest} was written on the source after the run ({why})")
    current = {b: read_if_there(store, b) for b in originals}
    restore = {}
    for batch, original in originals.items():
        if current[batch] == original:
            continue  # a run killed between its files never rewrote this one (or put back)
        if current[batch] not in (translations.get(batch), None):
            raise FerryError(
                f"{store.root}: not rolled back: {store.name(offsets_name(batch))} is not what "
                f"run {run_id} wrote"
            )
        restore[batch] = original
    ledger = Ledger(
        spark, cfg.ledger.path, new_run_id("rollback-checkpoint"), "rollback-checkpoint", is_execute
    )
    message = f"rollback of {run_id}"
    if is_execute:
        ledger.append(file_rows(store, restore, "INTENT", message), PHASE_INTENT)
        kill_point("checkpoint.intent")
        replace(store, seen, {b: current[b] for b in restore}, restore)
        # Marked, so that a later run does not take the checkpoint for one this run translated.
        store.write(f"{folder}/{ROLLED_BACK}", ledger.run_id.encode())
        ledger.append(file_rows(store, restore, "RESTORED", message, True), PHASE_OUTCOME)
    else:
        ledger.append(file_rows(store, restore, "WOULD_RESTORE", message), PHASE_PLAN)
    status = "RESTORED" if is_execute else "WOULD_RESTORE"
    emit_rows(
        lambda: [
            {"file": store.name(offsets_name(b)), "status": status, "note": f"from {folder}"}
            for b in restore
        ],
        ROLLBACK_COLUMNS,
        fmt,
    )
    verb = "restored" if is_execute else "would be restored (dry run; --execute to restore)"
    print_summary(f"{len(restore)} offsets files {verb}; ledger run {ledger.run_id}", fmt)
    return 0
