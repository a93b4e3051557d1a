"""`migrate --checkpoint PATH`: a Structured Streaming checkpoint's Kafka positions translated
by `migrate`'s engine, and (`--execute`) its offsets files rewritten in place.

Read: every offsets file Spark reads when the query restarts (`offsets_log.choose_batches`:
the newest batch, the one before it, and the newest committed one), each Kafka source line a
position set (`ferry.checkpoint.positions`) named `offsets/N source I`. What earlier runs
left decides first (`ferry.checkpoint.runs`): a translation in place, or one the query has
run on since, is ALREADY_MIGRATED (exit 0); one a killed run left half written is finished;
one the query wrote past on the source is refused (exit 1). Then refused before anything is
planned: a checkpoint whose newest batch or commit is younger than `--idle` (its query may be
running), one whose Kafka lines already name destination topics Ferry did not write, or whose
positions lie past the source's end (they are not the source's). A position below the
source's log start (records deleted before the query read them) is DATA_LOSS unless
`--allow-data-loss`, as Spark's `failOnDataLoss` would have stopped the query there.

Written, all files or none, only when every set is READY: `ferry.checkpoint.rewrite`.
`ferry.checkpoint.restore` (`--rollback RUN_ID`) puts the originals back.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field

from ferry import kafka
from ferry.checkpoint import offsets_log, positions, restart, rewrite, runs, sources
from ferry.checkpoint.modes import RealTimeSign, real_time_sign
from ferry.checkpoint.offsets_log import CheckpointFormatError, OffsetsFile
from ferry.checkpoint.restart import restart_hint
from ferry.checkpoint.rewrite import LogsSeen
from ferry.checkpoint.runs import FERRY_DIR, RunState, offsets_name
from ferry.checkpoint.sets import (  # noqa: F401 - set_name and batch_of: named here before
    batch_of,
    check_source_range,
    new_files,
    plan_topics,
    reads_records,
    set_name,
    sources_plan,
    stand_in,
)
from ferry.checkpoint.start_offsets import Read, StartOffsets, start_reads
from ferry.checkpoint.stores import open_store
from ferry.config import FerryConfig
from ferry.errors import FerryError
from ferry.migrate.decision import GroupDecision, exit_code
from ferry.migrate.load import OUTPUT_COLUMNS, ledger_rows, output_rows
from ferry.migrate.model import Plan
from ferry.output import emit_rows, print_summary
from ferry.status import GroupStatus
from ferry.write.ledger import PHASE_PLAN, Ledger, new_run_id

ACTION = "migrate-checkpoint"
RUN_PREFIX = f"{ACTION}-"  # run ids of checkpoint runs start so (`--rollback` tells them apart)
QUERY_STOPPED = "--query-stopped"  # the operator's word that a real-time query is stopped


@dataclass
class Checkpoint:
    """What was read of one checkpoint: the batches chosen, their files' bytes and parses; the
    sources whose start offsets Spark reads on restart, their files' bytes (in `data` by path,
    None when not there) and, for the sources translated, their parses."""

    store: object  # a checkpoint store (`ferry.checkpoint.store.open_store`)
    seen: LogsSeen
    choice: offsets_log.BatchChoice
    data: dict[int | str, bytes | None]
    parsed: dict[int, OffsetsFile]
    reads: dict[int | str, Read] = field(default_factory=dict)
    starts: dict[int | str, StartOffsets] = field(default_factory=dict)
    # A set standing in for one Spark only checks (`offsets/N-1`'s, or start offsets, when
    # batch N is committed) that cannot be translated: the newest batch's set it copies.
    stand_ins: dict[str, str] = field(default_factory=dict)

    def current(self, batch: int) -> bytes | None:
        """offsets/BATCH's bytes now (None when it is not there)."""
        return self.data[batch] if batch in self.data else rewrite.read_if_there(self.store, batch)


def read_checkpoint(spark, path: str, idle_s: float) -> Checkpoint:  # noqa: ANN001
    """The batches Spark reads on restart and their offsets files; refused (exit 2) when PATH
    is not a checkpoint or its files cannot be translated, (exit 1) instead when its newest
    batch is also younger than `idle_s` (a running query is what to say first)."""
    store = open_store(spark, path)
    if not store.exists("offsets"):
        raise CheckpointFormatError(
            f"{store.root}: not a Structured Streaming checkpoint (no offsets/ directory)"
        )
    seen = LogsSeen.list(store)
    try:
        choice = offsets_log.choose_batches(store.root, seen.offsets, seen.commits)
        data: dict[int | str, bytes | None] = {
            b: store.read(offsets_name(b)) for b in choice.batches
        }
        parsed = {
            b: offsets_log.parse_offsets_file(store.name(offsets_name(b)), b, data[b])  # type: ignore[arg-type]
            for b in choice.batches
        }
    except CheckpointFormatError:
        newest = seen.offsets[-1] if seen.offsets else -1
        check_idle(store.root, newest, seen.age_s, idle_s)
        raise
    reads = start_reads(choice, parsed)
    for key in reads:  # parsed later, for the sources translated only
        path = sources.start_path(key)
        data[path] = store.read(path) if store.exists(path) else None
    return Checkpoint(store, seen, choice, data, parsed, reads)


def check_idle(
    root: str, batch: int, age_s: float, idle_s: float, real_time: RealTimeSign | None = None
) -> None:
    """Refuse (exit 1) a checkpoint whose query may still run: its newest batch or commit is
    younger than `idle_s`, or its query runs in real-time mode (`real_time`: the sign, None
    when not seen or the operator said it stopped), whose files cannot show it stopped."""
    if age_s < idle_s:
        raise FerryError(
            f"{root}: batch {batch} was written or committed {age_s:.0f}s ago (--idle "
            f"{idle_s:g}s): its query may still be running; stop it (its StreamingQuery.stop() "
            "returned, or its application ended), or wait"
        )
    if real_time is not None:
        raise FerryError(
            f"{root}: {real_time.describe()}; such a query writes a batch's files only at its "
            "end, so their age cannot show it stopped: stop it (its StreamingQuery.stop() "
            f"returned, or its application ended) and say so with {QUERY_STOPPED}"
        )


def checkpoint_job(
    spark,  # noqa: ANN001
    cfg: FerryConfig,
    path: str,
    is_execute: bool,
    idle_s: float,
    fmt: str,
    progress: Callable[[str], None],
    *,
    allow_data_loss: bool = False,
    pattern: str | None = None,
    query_stopped: bool = False,
    chosen: str | None = None,
) -> int:
    src, dst = (
        kafka.Cluster.from_config(cfg, "source"),
        kafka.Cluster.from_config(cfg, "destination"),
    )
    progress(f"reading checkpoint {path}")
    cp = read_checkpoint(spark, path, idle_s)
    progress(cp.choice.restart())
    # What earlier runs left decides first: on a schedule, the query runs on the destination
    # by now, and the idle check would call it busy.
    last = runs.last_run(cp.store, cp.choice.newest, cp.current)
    if last is not None and last.state != RunState.PARTIAL:
        return earlier_run(cp, last, fmt)
    # A real-time query's files cannot show it stopped: the operator's word is asked for.
    real_time = None if query_stopped else real_time_sign(cp.store, cp.seen.offsets)
    if last is not None:
        # The killed run rewrote the newest offsets files itself, which dates them now: a
        # query still running would show as a commit, or a newer batch (RAN_ON_SOURCE).
        check_idle(cp.store.root, cp.choice.newest, cp.seen.commit_age_s, idle_s, real_time)
        return finish_run(spark, cp, last, cfg, is_execute, fmt, progress)
    check_idle(cp.store.root, cp.choice.newest, cp.seen.age_s, idle_s, real_time)
    if pattern is not None:
        restart.check_pattern(spark, pattern)
    kafka.check_reachable(src)
    src_topics = kafka.list_topics(src)
    sets, bounds = sources_plan(cp, cfg, src, src_topics, chosen, progress)
    lost = check_source_range(sets, bounds, cp.store.root, lambda n: reads_records(cp, n))
    plan, decisions = positions.translate(
        spark, src, dst, cfg, sets, progress, allow_reconcile=True, known_src_topics=src_topics
    )
    for warning in stand_in(cp, decisions):
        print(f"warning: {warning}", file=sys.stderr)
    for name, why in lost.items():
        if allow_data_loss:
            print(f"warning: {cp.store.name(name)}: {why}", file=sys.stderr)
        elif name in decisions:
            decisions[name] = GroupDecision(name, GroupStatus.DATA_LOSS, why, {})
    run_id = new_run_id(ACTION)
    ledger = Ledger(spark, cfg.ledger.path, run_id, ACTION, is_execute)
    is_ready = all(d.is_write for d in decisions.values())
    if is_execute and is_ready:
        files = new_files(cp, plan, decisions, cfg)
        rewrite.rewrite(
            cp.store,
            cp.seen,
            cp.data,
            files,
            ledger,
            lambda: checkpoint_ledger_rows(cp, plan, decisions, dst),
            lambda: checkpoint_ledger_rows(
                cp, plan, decisions, dst, status="COMMITTED", is_committed=True
            ),
            progress,
        )
        for d in decisions.values():
            d.status = GroupStatus.COMMITTED
    else:
        ledger.append(checkpoint_ledger_rows(cp, plan, decisions, dst), PHASE_PLAN)
    emit_rows(lambda: output_rows(plan, decisions, None), OUTPUT_COLUMNS, fmt)
    for name, d in sorted(decisions.items()):
        if not d.is_write and d.status != GroupStatus.COMMITTED:
            print(
                f"not translated: {cp.store.name(name.split(' ')[0])} {name.split(' ', 1)[1]}:"
                f" {d.message} ({d.status})",
                file=sys.stderr,
            )
    dst_only = sorted(set(kafka.list_topics(dst)) - set(src_topics))
    topics = [*dst_only, *sorted({t for t, _ in plan_topics(decisions)})]
    finds = restart.java_finder(spark, pattern, topics)
    hint = restart_hint(decisions, dst.conf.get("bootstrap.servers"), dst_only, pattern, finds)
    for line in hint:
        print(line, file=sys.stderr)
    if is_execute and is_ready:
        verb = f"rewritten (originals in {cp.store.name(f'{FERRY_DIR}/{run_id}/original')})"
    elif is_ready:
        verb = "resolved (dry run; re-run with --execute to rewrite)"
    else:
        verb = "not all resolved: nothing written"
    print_summary(
        f"{cp.store.root}: {len(cp.choice.batches)} offsets files, {len(sets)} Kafka source "
        f"lines {verb}; run {run_id}; ledger {ledger.path}",
        fmt,
    )
    return exit_code({n: d.status for n, d in decisions.items()})


def earlier_run(cp: Checkpoint, run: runs.RunFiles, fmt: str) -> int:
    """A checkpoint an earlier run translated: done (exit 0), or refused (exit 1) when the
    query wrote past the translation on the source, or a file changed since."""
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
    emit_rows(lambda: [], OUTPUT_COLUMNS, fmt)
    print_summary(
        f"{root}: ALREADY_MIGRATED by run {run.run_id} (its translated offsets are in place, "
        "or the query ran on them since); nothing written",
        fmt,
    )
    return 0


def finish_run(
    spark,  # noqa: ANN001
    cp: Checkpoint,
    run: runs.RunFiles,
    cfg: FerryConfig,
    is_execute: bool,
    fmt: str,
    progress: Callable[[str], None],
) -> int:
    """A run killed between its files: its remaining translations written (`--execute`),
    or said (a dry run). Its translations still hold: the files it had not reached are the
    very originals it translated."""
    files = ", ".join(offsets_name(b) for b in run.remaining)
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


def checkpoint_ledger_rows(cp: Checkpoint, plan: Plan, decisions, dst, **values) -> list[dict]:  # noqa: ANN001
    """`migrate`'s ledger rows of the plan, naming the checkpoint's file as the thing written:
    `cluster` the checkpoint, `group` the offsets file; `previous_offset` the source offset
    the file holds, `new_offset` the destination offset it gets."""
    rows = []
    for row in ledger_rows(plan, decisions, dst):
        file, source = row["group"].split(" ", 1)
        row.update(
            cluster=cp.store.root,
            group=cp.store.name(file),
            source_group=None,
            previous_offset=row["source_offset"],
            message=f"{source}: {row['message']}",
            **values,
        )
        rows.append(row)
    return rows
