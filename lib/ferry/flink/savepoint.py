"""`migrate --flink-savepoint PATH [--execute]`: a Flink savepoint's (or retained checkpoint's)
KafkaSource positions translated by `migrate`'s engine, and (`--execute`) a NEW savepoint
written beside it with those positions: `PATH-ferry`.

Read: Ferry's savepoint tool (`ferry.flink.tool`, Flink's own classes) lists every KafkaSource
operator's reader splits and enumerator state; `ferry.flink.positions` makes them position
sets, planned by `ferry.checkpoint.positions.translate` (matching, renames, statuses, exit
codes). A reader position below the source's log start is DATA_LOSS, as for checkpoints
(`ferry.checkpoint.translate.check_source_range`), unless `--allow-data-loss`.

Written, only when every set is READY, never over the old savepoint: the old savepoint's
files are copied into `.NAME-ferry.tmp` beside it, the tool writes the new `_metadata` and the
sources' reader state there, the copy is read back and compared with the plan, a `ferry-run`
marker is added, and the folder is renamed to `PATH-ferry` in one rename. A kill leaves the
old savepoint untouched and `PATH-ferry` absent (the temporary folder is cleared by the next
run, which plans and writes again); a `PATH-ferry` with Ferry's marker is ALREADY_MIGRATED.
The ledger gets the intent before the copy and the outcome after the rename.
"""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

from ferry import kafka
from ferry.checkpoint import positions as engine
from ferry.checkpoint.sets import check_source_range
from ferry.config import FerryConfig
from ferry.errors import FerryError, UsageError
from ferry.flink import into_group as into_group_module
from ferry.flink import positions, tool
from ferry.migrate.decision import GroupDecision, exit_code
from ferry.migrate.load import OUTPUT_COLUMNS, ledger_rows, output_rows
from ferry.output import emit_rows, print_summary
from ferry.status import GroupStatus
from ferry.write.kill_points import kill_point
from ferry.write.ledger import PHASE_INTENT, PHASE_OUTCOME, PHASE_PLAN, Ledger, new_run_id

ACTION = "migrate-flink-savepoint"
DONE = (GroupStatus.COMMITTED, GroupStatus.ALREADY_MIGRATED)
SUFFIX = "-ferry"  # the new savepoint: PATH-ferry, beside the old one
MARKER = "ferry-run.json"  # in the new savepoint: written by Ferry, for which run


def savepoint_dir(path: str) -> Path:
    """The savepoint's folder (PATH may name its `_metadata`); local or mounted paths."""
    text = path.removeprefix("file://").removeprefix("file:")
    if "://" in text:
        raise UsageError(
            f"{path}: --flink-savepoint reads local or mounted paths (copy the savepoint "
            "from its object store or HDFS first)"
        )
    folder = Path(text)
    folder = folder.parent if folder.name == "_metadata" else folder
    if not (folder / "_metadata").is_file():
        raise UsageError(f"{path}: not a Flink savepoint or checkpoint (no _metadata in it)")
    return folder.resolve()


def new_path(folder: Path) -> Path:
    return folder.with_name(folder.name + SUFFIX)


def temp_path(folder: Path) -> Path:
    return folder.with_name(f".{folder.name}{SUFFIX}.tmp")


def flink_savepoint_job(
    spark,  # noqa: ANN001 - a SparkSession
    cfg: FerryConfig,
    path: str,
    is_execute: bool,
    fmt: str,
    progress: Callable[[str], None],
    *,
    allow_data_loss: bool = False,
    into_group: str | None = None,
) -> int:
    folder = savepoint_dir(path)
    target = new_path(folder)
    if folder.name.endswith(SUFFIX) and (folder / MARKER).is_file():
        raise UsageError(f"{folder}: a savepoint Ferry wrote (its positions are the destination's)")
    if target.exists() and into_group is None:
        return already_written(folder, target, fmt)
    src = kafka.Cluster.from_config(cfg, "source")
    dst = kafka.Cluster.from_config(cfg, "destination")
    progress(f"reading savepoint {folder}")
    described = tool.read_savepoint(str(folder))
    sources = positions.sources_of(described)
    if not sources:
        raise UsageError(f"{folder}: no KafkaSource in the savepoint")
    chosen = positions.selected(sources, cfg, str(folder))
    for source in sources:
        if source not in chosen:
            topics = ", ".join(sorted(source.topics))
            print(
                f"warning: {folder}: KafkaSource {source.label} ({topics}) is not selected by "
                "the config's topics: left as it is",
                file=sys.stderr,
            )
    if not chosen:
        raise UsageError(f"{folder}: no KafkaSource reads a topic the config selects")
    kafka.check_reachable(src)
    src_topics = kafka.list_topics(src)
    for topic in sorted({t for s in chosen for t in s.topics} - set(src_topics)):
        raise UsageError(f"{folder}: topic {topic} is not on the source cluster")
    bounds = kafka.watermarks(src, positions.partitions_of(chosen))
    sets = positions.position_sets(chosen, bounds, str(folder))
    if into_group is not None:
        label = into_group_module.check_one_source(chosen, sets, str(folder))
        if f"{label} {positions.ENUMERATOR}" in sets:
            print(f"warning: {folder}: {label}'s enumerator has unassigned splits; a group "
                  "holds only the readers' positions", file=sys.stderr)  # fmt: skip
        sets = {label: sets[label]}
    readers = {n: s for n, s in sets.items() if n in {c.label for c in chosen}}
    lost = check_source_range(readers, bounds, str(folder))
    plan, decisions = engine.translate(
        spark, src, dst, cfg, sets, progress, allow_reconcile=False, known_src_topics=src_topics
    )
    for name, why in lost.items():
        if allow_data_loss:
            print(f"warning: {folder} {name}: {why}", file=sys.stderr)
        else:
            decisions[name] = GroupDecision(name, GroupStatus.DATA_LOSS, why, {})
    run_id = new_run_id(ACTION)
    ledger = Ledger(spark, cfg.ledger.path, run_id, ACTION, is_execute)
    is_ready = all(d.is_write for d in decisions.values())

    def rows(**values) -> list[dict]:  # noqa: ANN003
        return savepoint_ledger_rows(folder, plan, decisions, dst, **values)

    if is_execute and is_ready and into_group is not None:
        into_group_module.commit_into_group(
            dst, cfg, into_group, decisions[label], rows, ledger, progress
        )
    elif is_execute and is_ready:
        rename = {t: cfg.topics.destination_topic(t) for s in chosen for t in s.topics}
        offsets = {n: d.offsets for n, d in decisions.items()}
        write_plan = positions.write_plan(sources, chosen, offsets, rename)
        ledger.append(rows(), PHASE_INTENT)
        write_new(folder, target, write_plan, run_id, progress)
        ledger.append(rows(status="COMMITTED", is_committed=True), PHASE_OUTCOME)
        for d in decisions.values():
            d.status = GroupStatus.COMMITTED
    else:
        ledger.append(rows(), PHASE_PLAN)
    emit_rows(lambda: output_rows(plan, decisions, None), OUTPUT_COLUMNS, fmt)
    for name, d in sorted(decisions.items()):
        if not d.is_write and d.status not in DONE:
            print(f"not translated: {folder} {name}: {d.message} ({d.status})", file=sys.stderr)
    if is_execute and is_ready and into_group is not None:
        verb = (
            f"written to group {into_group} on the destination "
            f"({decisions[label].status}); restart the job with a new source uid, "
            f"--allowNonRestoredState and OffsetsInitializer.committedOffsets() over it"
        )
    elif is_execute and is_ready:
        verb = f"written to {target}; restart the job with `flink run -s {target}`"
        hint = restart_hint(chosen, cfg, dst.conf.get("bootstrap.servers"))
        print(hint, file=sys.stderr)
    elif is_ready:
        writes = f"commits group {into_group}" if into_group else f"writes {target}"
        verb = f"resolved (dry run; --execute {writes})"
    else:
        verb = "not all resolved: nothing written"
    print_summary(
        f"{folder}: {len(chosen)} KafkaSource(s), {len(sets)} position sets {verb}; "
        f"run {run_id}; ledger {ledger.path}",
        fmt,
    )
    return exit_code({n: d.status for n, d in decisions.items()})


def write_new(folder: Path, target: Path, plan: dict, run_id: str, progress) -> None:  # noqa: ANN001
    """The new savepoint, whole or not at all (module docstring)."""
    temp = temp_path(folder)
    if temp.exists():
        shutil.rmtree(temp)  # a killed run's: never renamed, never used
    progress(f"copying {folder} to {temp.name}")
    shutil.copytree(folder, temp, symlinks=True)
    kill_point("flink-savepoint-copied")
    progress("writing the new positions (Flink's classes)")
    tool.write_savepoint(str(folder), str(temp), plan)
    kill_point("flink-savepoint-written")
    check_written(temp, plan)
    (temp / MARKER).write_text(json.dumps({"run_id": run_id, "from": str(folder)}) + "\n")
    temp.rename(target)
    kill_point("flink-savepoint-renamed")


def check_written(temp: Path, plan: dict) -> None:
    """The copy read back: every Kafka split where the plan puts it."""
    back = tool.read_savepoint(str(temp))
    for source in back["sources"]:
        want = plan["sources"][source["operator_id"]]
        enumerator = (source["enumerator"] or {}).get("splits", [])
        for kind, splits in (("readers", source["readers"]), ("enumerator", enumerator)):
            expected = {
                f"{v['topic']}\0{k.split(chr(0))[1]}": (v["offset"], v["stopping_offset"])
                for k, v in want[kind].items()
            }
            for split in splits:
                got = (split["offset"], split["stopping_offset"])
                if expected.get(positions.key(split)) != got:
                    raise FerryError(
                        f"{temp}: {source['operator_id']} {kind} split {split['topic']}"
                        f"[{split['partition']}] read back at {got[0]}, not as planned; the "
                        "new savepoint was not put in place"
                    )


def already_written(folder: Path, target: Path, fmt: str) -> int:
    marker = target / MARKER
    if not marker.is_file():
        raise FerryError(
            f"{target} exists and is not a savepoint Ferry wrote: move it away and run again"
        )
    run = json.loads(marker.read_text()).get("run_id")
    emit_rows(lambda: [], OUTPUT_COLUMNS, fmt)
    print_summary(
        f"{folder}: ALREADY_MIGRATED by run {run}: {target} holds its translation; restart the "
        f"job with `flink run -s {target}`; nothing written",
        fmt,
    )
    return 0


def restart_hint(chosen, cfg: FerryConfig, bootstrap: str | None) -> str:  # noqa: ANN001
    renamed = sorted(
        f"{t} → {cfg.topics.destination_topic(t)}"
        for s in chosen
        for t in s.topics
        if cfg.topics.destination_topic(t) != t
    )
    topics = f"; its KafkaSource topics renamed: {', '.join(renamed)}" if renamed else ""
    return (
        f"restart: the same job (same uids), its KafkaSource's bootstrap servers "
        f"{bootstrap}{topics}"
    )


def savepoint_ledger_rows(folder: Path, plan, decisions, dst, **values) -> list[dict]:  # noqa: ANN001
    """`migrate`'s ledger rows, naming the savepoint as the thing written: `cluster` the old
    savepoint, `group` the position set (`uid U`, `uid U stop`, ...); `previous_offset` the
    source offset, `new_offset` the destination offset."""
    rows = []
    for row in ledger_rows(plan, decisions, dst):
        row.update(cluster=str(folder), source_group=None, previous_offset=row["source_offset"],
                   **values)  # fmt: skip
        rows.append(row)
    return rows
