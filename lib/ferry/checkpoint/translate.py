"""`migrate --checkpoint PATH`: a Structured Streaming checkpoint's Kafka positions translated
by `migrate`'s engine, and (`--execute`) its offsets files rewritten in place.

Read: every offsets file Spark reads when the query restarts (`offsets_log.choose_batches`:
the newest batch, the one before it, and the newest committed one), each Kafka source line a
position set (`ferry.checkpoint.positions`) named `offsets/N source I`. What earlier runs
left decides first (`ferry.checkpoint.runs`, acted on by `ferry.checkpoint.earlier`): a
translation of the same move in place, or one the query has run on since, is
ALREADY_MIGRATED (exit 0); one that moved the checkpoint to the config's source is planned
afresh; one a killed run left half written is finished, a half-ended abort ended; one the
query wrote past on the source is refused (exit 1). Then refused before anything is
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

from ferry import kafka
from ferry.checkpoint import earlier, positions, restart, rewrite, runs
from ferry.checkpoint.modes import real_time_sign
from ferry.checkpoint.reading import Checkpoint, check_idle, read_checkpoint
from ferry.checkpoint.restart import restart_hint
from ferry.checkpoint.runs import FERRY_DIR, RunState
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
from ferry.config import FerryConfig
from ferry.migrate.decision import GroupDecision, exit_code
from ferry.migrate.load import OUTPUT_COLUMNS, ledger_rows, output_rows
from ferry.migrate.model import Plan
from ferry.output import emit_rows, print_summary
from ferry.status import GroupStatus
from ferry.write.ledger import PHASE_PLAN, Ledger, new_run_id

ACTION = earlier.ACTION
RUN_PREFIX = f"{ACTION}-"  # run ids of checkpoint runs start so (`--rollback` tells them apart)


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
    last, age_s = last_run(cp), cp.seen.age_s
    if last is not None and last.state == RunState.ABORTING:
        # Its query ran during its write: the originals go back before anything else.
        earlier.end_abort(spark, cp, last, cfg, is_execute, progress)
        aborted, cp = last, read_checkpoint(spark, path, idle_s)
        last = last_run(cp)
        # Putting the originals back dated the newest offsets files: the commits tell then.
        is_dated = cp.choice.newest in aborted.originals
        age_s = cp.seen.commit_age_s if is_dated else cp.seen.age_s
    if last is not None:
        last = earlier.against_config(cp, last, cfg, src, dst, progress)
    if last is not None and last.state != RunState.PARTIAL:
        return earlier.earlier_run(cp, last, fmt)
    # A real-time query's files cannot show it stopped: the operator's word is asked for.
    real_time = None if query_stopped else real_time_sign(cp.store, cp.seen.offsets)
    if last is not None:
        # The killed run rewrote the newest offsets files itself, which dates them now: a
        # query still running would show as a commit, or a newer batch (RAN_ON_SOURCE).
        check_idle(cp.store.root, cp.choice.newest, cp.seen.commit_age_s, idle_s, real_time)
        return earlier.finish_run(spark, cp, last, cfg, is_execute, fmt, progress)
    check_idle(cp.store.root, cp.choice.newest, age_s, idle_s, real_time)
    if pattern is not None:
        restart.check_pattern(spark, pattern)
    kafka.check_reachable(src)
    src_topics = kafka.list_topics(src)
    sets, bounds = sources_plan(cp, cfg, src, src_topics, chosen, progress)
    earlier.check_ledger(spark, cfg, cp)
    topics = {t for s in sets.values() for t, _ in s}
    if (note := earlier.unchecked_note(cfg, topics)) is not None:
        progress(note)
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
            run_record(cp, cfg, src, dst, topics),
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
    named = [*dst_only, *sorted({t for t, _ in plan_topics(decisions)})]
    finds = restart.java_finder(spark, pattern, named)
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


def last_run(cp: Checkpoint) -> runs.RunFiles | None:
    """The newest earlier run with its state (`ferry.checkpoint.runs`)."""
    listing = (cp.seen.offsets, cp.seen.commits)
    return runs.last_run(cp.store, cp.choice.newest, cp.current, listing)


def run_record(cp: Checkpoint, cfg: FerryConfig, src, dst, topics: set[str]) -> runs.RunRecord:  # noqa: ANN001
    """What this run's `ready` records: the clusters' ids, the rename, the logs' listing."""
    rename = {t: cfg.topics.destination_topic(t) for t in topics}
    move = runs.Move.of(kafka.cluster_id(src), kafka.cluster_id(dst), rename)
    return runs.RunRecord(move, cp.seen.offsets, cp.seen.commits)


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
