"""What earlier runs of `migrate --checkpoint` left, acted on before anything is planned: a
translation in place is ALREADY_MIGRATED, but only for the same move (clusters and rename);
a checkpoint the last run moved to the config's source is translated afresh; one it moved
elsewhere is refused; a run killed between its files is finished; an abort a kill left half
done is ended; and where the run's folder is gone, the ledger still tells a translation in
place (`check_ledger`).
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from ferry import kafka
from ferry.checkpoint import rewrite, runs
from ferry.checkpoint.runs import Move, MoveVerdict, RunFiles, RunState, offsets_name
from ferry.config import FerryConfig
from ferry.errors import FerryError
from ferry.migrate.load import OUTPUT_COLUMNS
from ferry.output import emit_rows, print_summary
from ferry.status import GroupStatus
from ferry.write.ledger import PHASE_INTENT, PHASE_OUTCOME, PHASE_PLAN, Ledger, new_run_id

ACTION = "migrate-checkpoint"  # `ferry.checkpoint.translate.ACTION`
ROLLBACK_ACTION = "rollback-checkpoint"  # `ferry.checkpoint.restore`'s


def config_move(cfg: FerryConfig, src, dst, recorded: Move) -> Move:  # noqa: ANN001 - Clusters
    """The config's move, its rename restricted to the topics `recorded` renamed."""
    rename = {
        t: cfg.topics.destination_topic(t) if cfg.topics.matches(t) else ""
        for t, _ in recorded.rename
    }
    return Move.of(kafka.cluster_id(src), kafka.cluster_id(dst), rename)


def against_config(
    cp,  # noqa: ANN001 - a reading.Checkpoint
    run: RunFiles,
    cfg: FerryConfig,
    src,  # noqa: ANN001 - kafka.Cluster
    dst,  # noqa: ANN001
    progress: Callable[[str], None],
) -> RunFiles | None:
    """The run, when it decides what this run does (the same move, or an older run without a
    record, or a state refused whatever the move); None when it moved the checkpoint to the
    config's source (translate afresh). Refused (exit 1): a config whose source is not where
    the run moved the checkpoint, or a run killed between its files of another move."""
    if run.record is None or run.state in (
        RunState.RAN_ON_SOURCE,
        RunState.CHANGED,
        RunState.UNCONFIRMED,
    ):
        return run
    recorded = run.record.move
    now = config_move(cfg, src, dst, recorded)
    verdict = runs.judge_move(recorded, now)
    root = cp.store.root
    if verdict == MoveVerdict.SAME:
        return run
    if verdict == MoveVerdict.ELSEWHERE:
        raise FerryError(
            f"{root}: run {run.run_id} moved this checkpoint from {recorded}; the config's "
            f"source is cluster {now.source}, not where the checkpoint is; nothing written"
        )
    if run.state == RunState.PARTIAL:
        raise FerryError(
            f"{root}: run {run.run_id} ({recorded}) was killed between its files: finish it "
            "with its own config (the same command), or roll it back; nothing written"
        )
    progress(
        f"run {run.run_id} moved this checkpoint to cluster {recorded.destination}, the "
        "config's source: translating the positions the query reached there"
    )
    return None


def earlier_run(cp, run: RunFiles, fmt: str) -> int:  # noqa: ANN001 - a reading.Checkpoint
    """A checkpoint an earlier run of the same move translated: done (exit 0), or refused
    (exit 1) when the query wrote past the translation on the source, or a file changed
    since, or a query ran on a write the run never confirmed."""
    root = cp.store.root
    if run.state == RunState.RAN_ON_SOURCE:
        raise FerryError(
            f"{root}: batch {cp.choice.newest} was written after run {run.run_id} translated "
            f"the checkpoint, and it does not go on from the translation ({run.why}): the "
            "query ran on the source after Ferry translated, so it was not stopped; nothing "
            f"written. Stop it, put the originals back (--rollback {run.run_id} --execute) "
            "and run again"
        )
    if run.state == RunState.CHANGED:
        raise FerryError(
            f"{root}: {run.why} of run {run.run_id}: the checkpoint changed since (a hand edit, "
            "or a query on it); nothing written"
        )
    if run.state == RunState.UNCONFIRMED:
        raise FerryError(
            f"{root}: run {run.run_id} was killed before it confirmed its write, and {run.why}: "
            "a query ran on it (on the source or the destination: the files cannot tell); "
            f"nothing written. Roll it back (--rollback {run.run_id}) if the query ran on the "
            "source"
        )
    emit_rows(lambda: [], OUTPUT_COLUMNS, fmt)
    print_summary(
        f"{root}: ALREADY_MIGRATED by run {run.run_id} (its translated offsets are in place, "
        "or the query ran on them since); nothing written",
        fmt,
    )
    return 0


def finish_run(
    spark,  # noqa: ANN001
    cp,  # noqa: ANN001 - a reading.Checkpoint
    run: RunFiles,
    cfg: FerryConfig,
    is_execute: bool,
    fmt: str,
    progress: Callable[[str], None],
) -> int:
    """A run killed between its files (or after them, before it confirmed its write): its
    remaining translations written (`--execute`), or said (a dry run). Its translations still
    hold: the files it had not reached are the very originals it translated."""
    files = ", ".join(offsets_name(b) for b in run.remaining) or "every file"
    ledger = Ledger(spark, cfg.ledger.path, new_run_id(ACTION), ACTION, is_execute)
    if is_execute:
        rewrite.finish(cp.store, cp.seen, run, ledger, progress)
        verb = f"rewritten: run {run.run_id}, killed before its outcome, finished"
    else:
        rows = rewrite.file_rows(cp.store, run.remaining, "READY", f"finishing run {run.run_id}")
        ledger.append(rows, PHASE_PLAN)
        verb = (
            f"still the originals: run {run.run_id} was killed before its outcome; --execute "
            "writes its translations"
        )
    emit_rows(lambda: [], OUTPUT_COLUMNS, fmt)
    print_summary(f"{cp.store.root}: {files} {verb}; run {ledger.run_id}", fmt)
    return 0


def end_abort(
    spark,  # noqa: ANN001
    cp,  # noqa: ANN001 - a reading.Checkpoint
    run: RunFiles,
    cfg: FerryConfig,
    is_execute: bool,
    progress: Callable[[str], None],
) -> None:
    """A run whose query was found running during its write (`ABORTING`): its originals put
    back, its outcome rows `ABORTED` under its own run id, `aborted` in its folder (the same
    steps as the run's own abort, `rewrite.abort`). A dry run refuses (exit 1): the plan
    would be of files that are about to change."""
    root = cp.store.root
    if not is_execute:
        raise FerryError(
            f"{root}: run {run.run_id} found its query running ({run.why}) and did not end "
            "its abort: --execute puts its originals back first, then translates; nothing "
            "written"
        )
    for batch, original in run.originals.items():
        now = cp.current(batch)
        if now not in (original, run.translations.get(batch), None):
            raise FerryError(
                f"{root}: {offsets_name(batch)} is neither the original nor the translation "
                f"of run {run.run_id}, which was aborting: nothing written"
            )
    progress(f"run {run.run_id} found its query running ({run.why}): putting its originals back")
    ledger = Ledger(spark, cfg.ledger.path, run.run_id, ACTION, True)
    rows = rewrite.aborted_rows(cp.store, run.originals, run.run_id, run.why)
    rewrite.abort(
        cp.store,
        rewrite.Abort(run.folder, run.originals, lambda: ledger.append(rows, PHASE_OUTCOME)),
    )
    print(
        f"warning: {root}: run {run.run_id} was aborted (its query ran during its write); "
        "the originals are back",
        file=sys.stderr,
    )


def file_positions(parsed) -> dict[tuple[str, int], int]:  # noqa: ANN001 - an OffsetsFile
    """Every Kafka position of an offsets file."""
    return {
        (topic, int(partition)): offset
        for line in parsed.kafka_sources
        for topic, parts in (line.kafka or {}).items()
        for partition, offset in parts.items()
    }


def ledger_translations(rows: list[dict]) -> dict[str, dict[str, dict[tuple[str, int], int]]]:
    """From a checkpoint's executed ledger rows: each translation's positions (run id → file
    → (topic, partition) → offset), without the runs aborted or rolled back (pure)."""
    undone = set()
    out: dict[str, dict[str, dict[tuple[str, int], int]]] = {}
    for r in rows:
        message = r.get("message") or ""
        if r.get("status") == GroupStatus.ABORTED:
            undone.add(r["run_id"])
        elif r.get("action") == ROLLBACK_ACTION and message.startswith("rollback of "):
            undone.add(message.removeprefix("rollback of ").strip())
        elif r.get("action") == ACTION and r.get("topic") and r.get("new_offset") is not None:
            positions = out.setdefault(r["run_id"], {}).setdefault(r["group"], {})
            positions[(r["topic"], int(r["partition"]))] = int(r["new_offset"])
    return {run: files for run, files in out.items() if run not in undone}


def translation_in_place(
    translations: dict[str, dict[str, dict[tuple[str, int], int]]],
    now: dict[str, dict[tuple[str, int], int]],
    folders: set[str],
) -> tuple[str, str] | None:
    """(run id, file) of a run whose folder is gone (not in `folders`) and whose every
    translated file still among `now` (file → positions) holds its positions, or None."""
    for run_id, files in sorted(translations.items()):
        if run_id in folders:
            continue  # its folder tells (`runs.last_run`)
        shared = [f for f in sorted(files) if f in now]
        if shared and all(all(now[f].get(k) == v for k, v in files[f].items()) for f in shared):
            return run_id, shared[0]
    return None


def check_ledger(spark, cfg: FerryConfig, cp) -> None:  # noqa: ANN001
    """Refused (exit 1) when the ledger holds a translation of this checkpoint that is still
    in place although its run's folder is gone (`ferry/` deleted, or the checkpoint copied
    without it): a second translation would be of destination positions."""
    from ferry import delta

    path = cfg.ledger.path
    if not path or not delta.exists(path):
        return
    where = delta.Where(
        equal={"cluster": cp.store.root, "is_executed": True},
        any_of={"phase": [PHASE_INTENT, PHASE_OUTCOME]},
    )
    columns = ["run_id", "action", "group", "topic", "partition", "new_offset", "status"]
    df = delta.read(spark, path, where, [*columns, "message"])
    rows = [r.asDict() for r in df.collect()]
    now = {cp.store.name(offsets_name(b)): file_positions(p) for b, p in cp.parsed.items()}
    found = translation_in_place(ledger_translations(rows), now, set(runs.run_ids(cp.store)))
    if found is not None:
        run_id, file = found
        raise FerryError(
            f"{file}: holds the positions run {run_id} wrote (ledger {path}), and its folder "
            f"ferry/{run_id} is gone: the checkpoint is already translated; nothing written"
        )


def unchecked_note(cfg: FerryConfig, topics: set[str]) -> str | None:
    """What the files cannot tell, said in the plan: with the same topic names on both
    clusters, a query already run on the destination by hand (not by Ferry)."""
    same = sorted(t for t in topics if cfg.topics.destination_topic(t) == t)
    if not same:
        return None
    return (
        f"not checked: whether a query already ran on the destination by hand ({same[0]} "
        "keeps its name): told only by a position past the source's log end; Ferry's own "
        "runs are told by ferry/ and the ledger"
    )
