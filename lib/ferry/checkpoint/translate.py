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
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from ferry import kafka
from ferry.checkpoint import earlier, offsets_log, positions, rewrite, runs
from ferry.checkpoint.offsets_log import CheckpointFormatError, OffsetsFile
from ferry.checkpoint.restart import restart_hint
from ferry.checkpoint.rewrite import LogsSeen
from ferry.checkpoint.runs import FERRY_DIR, RunState, offsets_name
from ferry.checkpoint.stores import open_store
from ferry.config import FerryConfig
from ferry.errors import FerryError
from ferry.migrate.decision import GroupDecision, exit_code
from ferry.migrate.load import OUTPUT_COLUMNS, ledger_rows, output_rows
from ferry.migrate.model import Plan
from ferry.output import emit_rows, print_summary
from ferry.status import GroupStatus
from ferry.write.ledger import PHASE_PLAN, Ledger, new_run_id

ACTION = earlier.ACTION
RUN_PREFIX = f"{ACTION}-"  # run ids of checkpoint runs start so (`--rollback` tells them apart)


@dataclass
class Checkpoint:
    """What was read of one checkpoint: the batches chosen, their files' bytes and parses."""

    store: object  # a checkpoint store (`ferry.checkpoint.store.open_store`)
    seen: LogsSeen
    choice: offsets_log.BatchChoice
    data: dict[int, bytes]
    parsed: dict[int, OffsetsFile]

    def current(self, batch: int) -> bytes | None:
        """offsets/BATCH's bytes now (None when it is not there)."""
        return self.data[batch] if batch in self.data else rewrite.read_if_there(self.store, batch)


def set_name(batch: int, index: int | str) -> str:
    return f"offsets/{batch} source {index}"


def batch_of(name: str) -> int:
    """The batch of a set named by `set_name`."""
    return int(name.split(" ", 1)[0].removeprefix("offsets/"))


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
        data = {b: store.read(offsets_name(b)) for b in choice.batches}
        parsed = {
            b: offsets_log.parse_offsets_file(store.name(offsets_name(b)), b, data[b])
            for b in choice.batches
        }
    except CheckpointFormatError:
        newest = seen.offsets[-1] if seen.offsets else -1
        check_idle(store.root, newest, seen.age_s, idle_s)
        raise
    return Checkpoint(store, seen, choice, data, parsed)


def check_idle(root: str, batch: int, age_s: float, idle_s: float) -> None:
    if age_s < idle_s:
        raise FerryError(
            f"{root}: batch {batch} was written or committed {age_s:.0f}s ago (--idle "
            f"{idle_s:g}s): its query may still be running; stop it (its StreamingQuery.stop() "
            "returned, or its application ended), or wait"
        )


def position_sets(
    cp: Checkpoint, cfg: FerryConfig, src_topics: Mapping[str, int]
) -> tuple[dict[str, dict], list[str]]:
    """One position set per Kafka source line of the chosen batches, and warnings for lines
    left as they are (no topic the config selects). Refused: no Kafka source at all, a line
    mixing selected and other topics (exit 2), a line naming destination topics (exit 1)."""
    destination_names = {
        d
        for s in src_topics
        if cfg.topics.matches(s) and (d := cfg.topics.destination_topic(s)) != s
    }
    sets: dict[str, dict] = {}
    warnings = []
    kafka_lines = 0
    for batch, parsed in cp.parsed.items():
        file = cp.store.name(offsets_name(batch))
        for line in parsed.kafka_sources:
            kafka_lines += 1
            topics = set(line.kafka or {})
            on_destination = sorted(topics & destination_names - set(src_topics))
            if on_destination:
                raise FerryError(
                    f"{file}: source {line.key} names destination topic(s) "
                    f"{', '.join(on_destination)}: the query already ran against the "
                    "destination on this checkpoint (or it was edited by hand); restore the "
                    "checkpoint as it was on the source before translating it"
                )
            selected = {t for t in topics if cfg.topics.matches(t)}
            if not selected:
                warnings.append(
                    f"{file}: source {line.key} ({', '.join(sorted(topics))}) "
                    "is not selected by the config's topics: left as it is"
                )
                continue
            if selected != topics:
                raise CheckpointFormatError(
                    f"{file}: source {line.key} reads topics the config selects and others "
                    f"({', '.join(sorted(topics - selected))}): select all of them or none"
                )
            sets[set_name(batch, line.key)] = {
                (t, p): o for t, parts in (line.kafka or {}).items() for p, o in parts.items()
            }
    if not kafka_lines:
        raise CheckpointFormatError(
            f"{cp.store.name(offsets_name(cp.choice.newest))}: no Kafka source in the query"
        )
    return sets, warnings


def check_source_range(
    sets: Mapping[str, Mapping[tuple[str, int], int]],
    bounds: Mapping[tuple[str, int], tuple[int, int]],
    root: str,
) -> dict[str, str]:
    """Each set whose positions lie below the source's log start: what was lost (records
    deleted before the query read them), by set name. A position past the source's log end
    is not the source's (exit 1): the query ran on a cluster with more records (with the
    same topic names, the destination)."""
    lost: dict[str, str] = {}
    for name, offsets in sorted(sets.items()):
        gaps = []
        for (topic, partition), offset in sorted(offsets.items()):
            start, end = bounds[(topic, partition)]
            if offset > end:
                raise FerryError(
                    f"{root}/{name}: {topic}[{partition}] is at {offset}, past the source's "
                    f"log end {end}: these are not the source's positions (the query ran "
                    "against another cluster, the destination?); nothing written"
                )
            if offset < start:
                gaps.append(f"{topic}[{partition}] {offset}..{start - 1} ({start - offset})")
        if gaps:
            lost[name] = (
                "records deleted from the source before the query read them: "
                + ", ".join(gaps)
                + " (Spark's failOnDataLoss would stop the query; --allow-data-loss "
                "translates it anyway)"
            )
    return lost


def new_files(
    cp: Checkpoint, plan: Plan, decisions: Mapping[str, GroupDecision], cfg: FerryConfig
) -> dict[int, bytes]:
    """Each chosen batch's file with its translated Kafka lines (every set READY)."""
    out = {}
    for batch, parsed in cp.parsed.items():
        lines = {}
        for line in parsed.kafka_sources:
            name = set_name(batch, line.key)
            if name not in decisions:
                continue
            rename = {t: cfg.topics.destination_topic(t) for t in line.kafka or {}}
            lines[line.key] = offsets_log.translated_line(line, rename, decisions[name].offsets)
        out[batch] = offsets_log.render_offsets_file(parsed, lines)
    return out


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
    if last is not None:
        # The killed run rewrote the newest offsets files itself, which dates them now: a
        # query still running would show as a commit, or a newer batch (RAN_ON_SOURCE).
        check_idle(cp.store.root, cp.choice.newest, cp.seen.commit_age_s, idle_s)
        return earlier.finish_run(spark, cp, last, cfg, is_execute, fmt, progress)
    check_idle(cp.store.root, cp.choice.newest, age_s, idle_s)
    kafka.check_reachable(src)
    src_topics = kafka.list_topics(src)
    sets, warnings = position_sets(cp, cfg, src_topics)
    for warning in warnings:
        print(f"warning: {warning}", file=sys.stderr)
    if not sets:
        raise CheckpointFormatError(f"{cp.store.root}: no Kafka source the config selects")
    earlier.check_ledger(spark, cfg, cp)
    topics = {t for s in sets.values() for t, _ in s}
    if (note := earlier.unchecked_note(cfg, topics)) is not None:
        progress(note)
    bounds = kafka.watermarks(src, {tp for s in sets.values() for tp in s})
    read = {n: s for n, s in sets.items() if batch_of(n) in cp.choice.read_from}
    lost = check_source_range(read, bounds, cp.store.root)
    plan, decisions = positions.translate(
        spark, src, dst, cfg, sets, progress, allow_reconcile=True, known_src_topics=src_topics
    )
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
    for line in restart_hint(decisions, dst.conf.get("bootstrap.servers"), dst_only, pattern):
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
