"""`migrate --checkpoint PATH`: a Structured Streaming checkpoint's Kafka positions translated
by `migrate`'s engine, and (`--execute`) its offsets files rewritten in place.

Read: the newest batch's `offsets/N` (and `offsets/N-1` when `commits/N` is missing: Spark
re-runs batch N from there), each Kafka source line a position set (`ferry.checkpoint.positions`)
named `offsets/N source I`. Refused before anything is planned: a checkpoint whose newest
batch is younger than `--idle` (its query may be running), one whose Kafka lines already name
destination topics without Ferry having translated them (a plain restart against the
destination touched it), and one Ferry already translated (ALREADY_MIGRATED, exit 0).

Written, all files or none, only when every set is READY: the originals and the new texts are
copied under `PATH/ferry/RUN_ID/` first (`original/offsets/N`, `translated/offsets/N`: Spark
reads only its own directories), the ledger's intent is appended, the offset log is listed
again (a batch that appeared since means the query runs: nothing is written), each file is
rewritten (a failure puts back those already rewritten) and read back, then the outcome is
appended. `ferry.checkpoint.restore` (`--rollback RUN_ID`) puts the originals back.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from ferry import kafka
from ferry.checkpoint import offsets_log, positions
from ferry.checkpoint.offsets_log import CheckpointFormatError, OffsetsFile
from ferry.checkpoint.store import HadoopStore
from ferry.config import FerryConfig
from ferry.errors import FerryError
from ferry.migrate.decision import GroupDecision, exit_code
from ferry.migrate.load import OUTPUT_COLUMNS, ledger_rows, output_rows
from ferry.migrate.model import Plan
from ferry.output import emit_rows, print_summary
from ferry.status import GroupStatus
from ferry.write.ledger import PHASE_INTENT, PHASE_OUTCOME, PHASE_PLAN, Ledger, new_run_id

ACTION = "migrate-checkpoint"
RUN_PREFIX = f"{ACTION}-"  # run ids of checkpoint runs start so (`--rollback` tells them apart)
FERRY_DIR = "ferry"  # under the checkpoint: one folder per run that rewrote it
ROLLED_BACK = "rolled-back"  # in a run's folder once its originals were put back


@dataclass
class Checkpoint:
    """What was read of one checkpoint: the batches chosen, their files' bytes and parses."""

    store: HadoopStore
    choice: offsets_log.BatchChoice
    data: dict[int, bytes]
    parsed: dict[int, OffsetsFile]
    age_s: float  # since the newest batch's offsets (or commit) file was written


def offsets_name(batch: int) -> str:
    return f"offsets/{batch}"


def set_name(batch: int, index: int) -> str:
    return f"offsets/{batch} source {index}"


def read_checkpoint(spark, path: str, idle_s: float) -> Checkpoint:  # noqa: ANN001
    """The batches to translate and their offsets files; refused (exit 2) when PATH is not a
    checkpoint or its files cannot be translated, (exit 1) instead when its newest batch is
    also younger than `idle_s` (a running query is what to say first)."""
    store = HadoopStore(spark, path)
    if not store.exists("offsets"):
        raise CheckpointFormatError(
            f"{store.root}: not a Structured Streaming checkpoint (no offsets/ directory)"
        )
    offsets = {f.name: f for f in store.list("offsets")}
    commits = {f.name: f for f in store.list("commits")}
    offsets_ids = offsets_log.batch_ids(offsets)
    age_s = float("inf")
    if offsets_ids:
        newest = str(offsets_ids[-1])
        written = [f.modified_ms for f in (offsets[newest], commits.get(newest)) if f]
        age_s = time.time() - max(written) / 1000
    try:
        choice = offsets_log.choose_batches(store.root, offsets_ids, offsets_log.batch_ids(commits))
        data = {b: store.read(offsets_name(b)) for b in choice.batches}
        parsed = {
            b: offsets_log.parse_offsets_file(store.name(offsets_name(b)), b, data[b])
            for b in choice.batches
        }
    except CheckpointFormatError:
        check_idle(store, offsets_ids[-1] if offsets_ids else -1, age_s, idle_s)
        raise
    return Checkpoint(store, choice, data, parsed, age_s)


def check_idle(store: HadoopStore, batch: int, age_s: float, idle_s: float) -> None:
    if age_s < idle_s:
        raise FerryError(
            f"{store.root}: batch {batch} was written {age_s:.0f}s ago (--idle {idle_s:g}s): "
            "its query may still be running; stop it, or wait"
        )


def newest_batch(store: HadoopStore) -> int | None:
    ids = offsets_log.batch_ids(f.name for f in store.list("offsets"))
    return ids[-1] if ids else None


def previous_runs(store: HadoopStore) -> list[str]:
    """The run ids that rewrote this checkpoint, oldest first (their folders under ferry/)."""
    return sorted(store.list_dirs(FERRY_DIR))


def translated_by(cp: Checkpoint) -> str | None:
    """The Ferry run whose translated files the checkpoint holds now (or whose translation a
    query has since run on: a newer batch than the run wrote), else None."""
    for run in reversed(previous_runs(cp.store)):
        if cp.store.exists(f"{FERRY_DIR}/{run}/{ROLLED_BACK}"):
            continue
        wrote = offsets_log.batch_ids(
            f.name for f in cp.store.list(f"{FERRY_DIR}/{run}/translated/offsets")
        )
        if not wrote:
            continue
        if cp.choice.newest > max(wrote) or all(
            cp.data.get(b) == cp.store.read(f"{FERRY_DIR}/{run}/translated/offsets/{b}")
            for b in wrote
            if b in cp.data
        ):
            return run
    return None


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
                    f"{file}: source {line.index} names destination topic(s) "
                    f"{', '.join(on_destination)}: the query already ran against the "
                    "destination on this checkpoint (or it was edited by hand); restore the "
                    "checkpoint as it was on the source before translating it"
                )
            selected = {t for t in topics if cfg.topics.matches(t)}
            if not selected:
                warnings.append(
                    f"{file}: source {line.index} ({', '.join(sorted(topics))}) "
                    "is not selected by the config's topics: left as it is"
                )
                continue
            if selected != topics:
                raise CheckpointFormatError(
                    f"{file}: source {line.index} reads topics the config selects and others "
                    f"({', '.join(sorted(topics - selected))}): select all of them or none"
                )
            sets[set_name(batch, line.index)] = {
                (t, p): o for t, parts in (line.kafka or {}).items() for p, o in parts.items()
            }
    if not kafka_lines:
        raise CheckpointFormatError(
            f"{cp.store.name(offsets_name(cp.choice.newest))}: no Kafka source in the query"
        )
    return sets, warnings


def new_files(
    cp: Checkpoint, plan: Plan, decisions: Mapping[str, GroupDecision], cfg: FerryConfig
) -> dict[int, bytes]:
    """Each chosen batch's file with its translated Kafka lines (every set READY)."""
    out = {}
    for batch, parsed in cp.parsed.items():
        lines = {}
        for line in parsed.kafka_sources:
            name = set_name(batch, line.index)
            if name not in decisions:
                continue
            rename = {t: cfg.topics.destination_topic(t) for t in line.kafka or {}}
            lines[line.index] = offsets_log.translated_line(line, rename, decisions[name].offsets)
        out[batch] = offsets_log.render_offsets_file(parsed, lines)
    return out


def restart_hint(decisions: Mapping[str, GroupDecision], dst_bootstrap: str) -> list[str]:
    """What the restarted query needs: the destination's bootstrap and its topics' names."""
    partitions: dict[str, set[int]] = {}
    for d in decisions.values():
        for topic, partition in d.offsets:
            partitions.setdefault(topic, set()).add(partition)
    if not partitions:
        return []
    assign = ",".join(
        f'"{t}":[{",".join(str(p) for p in sorted(ps))}]' for t, ps in sorted(partitions.items())
    )
    if len(assign) > 200:  # hundreds of partitions: the option's shape, not every number
        assign = ",".join(f'"{t}":[0..{max(ps)}]' for t, ps in sorted(partitions.items()))
    return [
        f"restart the query with kafka.bootstrap.servers={dst_bootstrap} and "
        f"subscribe={','.join(sorted(partitions))} (or assign={{{assign}}}; a subscribePattern "
        "must match these names)"
    ]


def checkpoint_job(
    spark,  # noqa: ANN001
    cfg: FerryConfig,
    path: str,
    is_execute: bool,
    idle_s: float,
    fmt: str,
    progress: Callable[[str], None],
) -> int:
    src, dst = (
        kafka.Cluster.from_config(cfg, "source"),
        kafka.Cluster.from_config(cfg, "destination"),
    )
    progress(f"reading checkpoint {path}")
    cp = read_checkpoint(spark, path, idle_s)
    progress(
        f"batch {cp.choice.newest} {'committed' if cp.choice.is_committed else 'not committed'}:"
        f" translating offsets/{', offsets/'.join(str(b) for b in cp.choice.batches)}"
    )
    # Before the idle check: on a schedule, the query runs on the destination by now.
    done_by = translated_by(cp)
    if done_by is not None:
        emit_rows(lambda: [], OUTPUT_COLUMNS, fmt)
        print_summary(
            f"{cp.store.root}: ALREADY_MIGRATED by run {done_by} (its translated offsets are in "
            f"place, or the query ran on them since); nothing written",
            fmt,
        )
        return 0
    check_idle(cp.store, cp.choice.newest, cp.age_s, idle_s)
    kafka.check_reachable(src)
    src_topics = kafka.list_topics(src)
    sets, warnings = position_sets(cp, cfg, src_topics)
    for warning in warnings:
        print(f"warning: {warning}", file=sys.stderr)
    if not sets:
        raise CheckpointFormatError(f"{cp.store.root}: no Kafka source the config selects")
    plan, decisions = positions.translate(
        spark, src, dst, cfg, sets, progress, allow_reconcile=True, known_src_topics=src_topics
    )
    run_id = new_run_id(ACTION)
    ledger = Ledger(spark, cfg.ledger.path, run_id, ACTION, is_execute)
    is_ready = all(d.is_write for d in decisions.values())
    if is_execute and is_ready:
        files = new_files(cp, plan, decisions, cfg)
        rewrite(cp, files, plan, decisions, dst, ledger, progress)
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
    for line in restart_hint(decisions, dst.conf.get("bootstrap.servers")):
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


def rewrite(
    cp: Checkpoint,
    files: Mapping[int, bytes],
    plan: Plan,
    decisions,
    dst,
    ledger: Ledger,
    progress: Callable[[str], None],
) -> None:  # noqa: ANN001
    """Copy the originals aside, announce the intent, check the query has not moved, rewrite
    every file or none, read them back, record the outcome."""
    store, run = cp.store, ledger.run_id
    for batch in files:
        for kind, data in (("original", cp.data[batch]), ("translated", files[batch])):
            store.write_verified(f"{FERRY_DIR}/{run}/{kind}/{offsets_name(batch)}", data)
    progress(f"originals copied to {store.name(f'{FERRY_DIR}/{run}/original')}")
    ledger.append(checkpoint_ledger_rows(cp, plan, decisions, dst), PHASE_INTENT)
    check_unchanged(cp)
    originals = {offsets_name(b): cp.data[b] for b in files}
    store.replace_all({offsets_name(b): data for b, data in files.items()}, originals.__getitem__)
    progress(f"rewrote {', '.join(store.name(offsets_name(b)) for b in files)}")
    ledger.append(
        checkpoint_ledger_rows(cp, plan, decisions, dst, status="COMMITTED", is_committed=True),
        PHASE_OUTCOME,
    )


def check_unchanged(cp: Checkpoint) -> None:
    """Refuse (exit 1, nothing written) when the query wrote a batch since the checkpoint was
    read, or changed the files read: it is running."""
    newest = newest_batch(cp.store)
    changed = [b for b in cp.choice.batches if cp.store.read(offsets_name(b)) != cp.data[b]]
    if newest != cp.choice.newest or changed:
        what = f"batch {newest} appeared" if newest != cp.choice.newest else "offsets changed"
        raise FerryError(
            f"{cp.store.root}: {what} during this run: its query is running; stop it and run "
            "again (nothing written)"
        )
