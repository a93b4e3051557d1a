"""`migrate --checkpoint PATH --rollback RUN_ID [--execute]`: the offsets files a checkpoint run
rewrote put back as they were, from the originals it copied under `PATH/ferry/RUN_ID/original/`.

Only while the checkpoint still holds what the run wrote (or, for a run stopped between its
files, the original of those it had not rewritten yet): a file that differs, or a
batch newer than the run's (the query has run on the destination since), is refused (exit 1,
nothing written) — putting source offsets back under batches the destination produced would
make the query read the wrong records. All files or none; intent and outcome in the ledger.
"""

from __future__ import annotations

from collections.abc import Callable

from ferry.checkpoint import offsets_log
from ferry.checkpoint.store import HadoopStore
from ferry.checkpoint.translate import FERRY_DIR, ROLLED_BACK, newest_batch, offsets_name
from ferry.config import FerryConfig
from ferry.errors import FerryError, UsageError
from ferry.output import emit_rows, print_summary
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
    store = HadoopStore(spark, path)
    folder = f"{FERRY_DIR}/{run_id}"
    originals = offsets_log.batch_ids(f.name for f in store.list(f"{folder}/original/offsets"))
    if not originals:
        raise UsageError(f"{store.name(folder)}: no originals of run {run_id} in this checkpoint")
    progress(f"run {run_id} rewrote offsets/{', offsets/'.join(map(str, originals))}")
    newest = newest_batch(store)
    problems = []
    if newest is not None and newest > max(originals):
        problems.append(
            f"batch {newest} was written after the run: the query ran on the translated "
            "offsets; rolling back would rewind it"
        )
    restore: dict[int, bytes] = {}
    for batch in originals:
        now = store.read(offsets_name(batch)) if store.exists(offsets_name(batch)) else None
        original = store.read(f"{folder}/original/{offsets_name(batch)}")
        if now == original:
            continue  # a run stopped between its files never rewrote this one
        if now != store.read(f"{folder}/translated/{offsets_name(batch)}"):
            problems.append(f"{store.name(offsets_name(batch))} is not what run {run_id} wrote")
        restore[batch] = original
    if problems:
        raise FerryError(f"{store.root}: not rolled back: {problems[0]}")
    ledger = Ledger(
        spark, cfg.ledger.path, new_run_id("rollback-checkpoint"), "rollback-checkpoint", is_execute
    )

    def ledger_rows(status: str, is_committed: bool = False) -> list[dict]:
        return [
            {
                "cluster": store.root,
                "group": store.name(offsets_name(b)),
                "status": status,
                "is_committed": is_committed,
                "message": f"rollback of {run_id}",
            }
            for b in restore
        ]

    if is_execute:
        ledger.append(ledger_rows("INTENT"), PHASE_INTENT)
        if newest_batch(store) != newest:
            raise FerryError(f"{store.root}: a batch appeared during the rollback: nothing written")
        # all files or none: a failure puts back the translations this rollback replaced
        store.replace_all(
            {offsets_name(b): data for b, data in restore.items()},
            lambda relative: store.read(f"{folder}/translated/{relative}"),
        )
        # Marked, so that a later run does not take the checkpoint for one this run translated.
        store.write(f"{folder}/{ROLLED_BACK}", ledger.run_id.encode())
        ledger.append(ledger_rows("RESTORED", True), PHASE_OUTCOME)
    else:
        ledger.append(ledger_rows("WOULD_RESTORE"), PHASE_PLAN)
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
