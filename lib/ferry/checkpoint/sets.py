"""A checkpoint's position sets (`migrate --checkpoint`): one per Kafka source line of the
offsets files Spark reads on restart (`offsets/N source KEY`) and per start offsets file it
reads (`sources/KEY/0 source KEY`), of the sources the operator picks (`ferry.checkpoint
.sources`); checked against the source cluster; and, once every set is READY, the files they
become (`new_files`). A set Spark only checks on restart that cannot be translated takes the
newest batch's translation instead (`stand_in`).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from ferry import kafka
from ferry.checkpoint import offsets_log, sources
from ferry.checkpoint.offsets_log import CheckpointFormatError
from ferry.checkpoint.runs import offsets_name
from ferry.checkpoint.start_offsets import Read, render_start_offsets
from ferry.config import FerryConfig
from ferry.errors import FerryError
from ferry.migrate.decision import GroupDecision
from ferry.migrate.model import Plan
from ferry.status import GroupStatus

if TYPE_CHECKING:
    from ferry.checkpoint.reading import Checkpoint


def set_name(batch: int, index: int | str) -> str:
    return f"offsets/{batch} source {index}"


def batch_of(name: str) -> int:
    """The batch of a set named by `set_name`."""
    return int(name.split(" ", 1)[0].removeprefix("offsets/"))


def reads_records(cp: Checkpoint, name: str) -> bool:
    """Whether Spark reads records from a set's positions on restart (its losses count)."""
    if name.startswith("offsets/"):
        return batch_of(name) in cp.choice.read_from
    key = name.split(" source ", 1)[1]
    return any(str(k) == key and how == Read.RECORDS for k, how in cp.reads.items())


def position_sets(
    cp: Checkpoint,
    cfg: FerryConfig,
    src_topics: Mapping[str, int],
    picked: set[int | str] | None = None,
    is_chosen: bool = False,
) -> tuple[dict[str, dict], list[str]]:
    """One position set per Kafka source line of the chosen batches, and per start offsets
    file Spark reads (`sources.start_set_name`), of the sources `picked` (default all;
    `is_chosen`: named by `--sources`), and warnings for lines left as they are (no topic the
    config selects). Refused: no Kafka source at all, a line mixing selected and other topics,
    a chosen source the config does not select (exit 2), a line naming destination topics
    (exit 1)."""
    destination_names = {
        d
        for s in src_topics
        if cfg.topics.matches(s) and (d := cfg.topics.destination_topic(s)) != s
    }
    picked = cp_keys(cp) if picked is None else picked
    cp.starts = sources.start_sets(cp.store, cp.data, cp.reads, picked, cp.choice.newest)
    lines = [
        (cp.store.name(offsets_name(batch)), set_name(batch, line.key), line.key, line.kafka)
        for batch, parsed in cp.parsed.items()
        for line in parsed.kafka_sources
    ]
    lines += [
        (cp.store.name(sources.start_path(k)), sources.start_set_name(k), k, start.kafka)
        for k, start in cp.starts.items()
        if start.kafka
    ]
    if not lines:
        raise CheckpointFormatError(
            f"{cp.store.name(offsets_name(cp.choice.newest))}: no Kafka source in the query"
        )
    sets: dict[str, dict] = {}
    warnings = []
    for file, name, key, positions in lines:
        if key not in picked:
            continue
        topics = set(positions or {})
        on_destination = sorted(topics & destination_names - set(src_topics))
        if on_destination:
            raise FerryError(
                f"{file}: source {key} names destination topic(s) "
                f"{', '.join(on_destination)}: the query already ran against the "
                "destination on this checkpoint (or it was edited by hand); restore the "
                "checkpoint as it was on the source before translating it"
            )
        selected = {t for t in topics if cfg.topics.matches(t)}
        if not selected and is_chosen:
            raise CheckpointFormatError(
                f"{file}: --sources names source {key}, whose topics "
                f"({', '.join(sorted(topics))}) the config's topics do not select"
            )
        if not selected:
            warnings.append(
                f"{file}: source {key} ({', '.join(sorted(topics))}) "
                "is not selected by the config's topics: left as it is"
            )
            continue
        if selected != topics:
            raise CheckpointFormatError(
                f"{file}: source {key} reads topics the config selects and others "
                f"({', '.join(sorted(topics - selected))}): select all of them or none"
            )
        sets[name] = {(t, p): o for t, parts in (positions or {}).items() for p, o in parts.items()}
    return sets, warnings


def cp_keys(cp: Checkpoint) -> set[int | str]:
    """Every Kafka source's key in the chosen files."""
    return {line.key for parsed in cp.parsed.values() for line in parsed.kafka_sources}


def check_source_range(
    sets: Mapping[str, Mapping[tuple[str, int], int]],
    bounds: Mapping[tuple[str, int], tuple[int, int]],
    root: str,
    records: Callable[[str], bool] = lambda _name: True,
) -> dict[str, str]:
    """Each set Spark reads records from (`records(name)`) whose positions lie below the
    source's log start: what was lost (records deleted before the query read them), by set
    name. A position past the source's log end, in any set, is not the source's (exit 1): the
    query ran on a cluster with more records (with the same topic names, the destination)."""
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
        if gaps and records(name):
            lost[name] = (
                "records deleted from the source before the query read them: "
                + ", ".join(gaps)
                + " (Spark's failOnDataLoss would stop the query; --allow-data-loss "
                "translates it anyway)"
            )
    return lost


def new_files(
    cp: Checkpoint, plan: Plan, decisions: Mapping[str, GroupDecision], cfg: FerryConfig
) -> dict[int | str, bytes]:
    """Each chosen batch's file with its translated Kafka lines, then each translated start
    offsets file (`sources/KEY/0`, keyed by its path), every set READY. A stand-in set
    (`stand_ins`) takes the newest batch's translated line whole."""
    texts: dict[str, str] = {}
    for batch, parsed in sorted(cp.parsed.items(), reverse=True):  # the newest first
        for line in parsed.kafka_sources:
            name = set_name(batch, line.key)
            if name in cp.stand_ins:
                texts[name] = texts[cp.stand_ins[name]]
            elif name in decisions:
                rename = {t: cfg.topics.destination_topic(t) for t in line.kafka or {}}
                offsets = decisions[name].offsets
                texts[name] = offsets_log.translated_line(line, rename, offsets)
    out: dict[int | str, bytes] = {}
    for batch, parsed in cp.parsed.items():
        lines = {
            line.key: texts[set_name(batch, line.key)]
            for line in parsed.kafka_sources
            if set_name(batch, line.key) in texts
        }
        out[batch] = offsets_log.render_offsets_file(parsed, lines)
    for key, start in cp.starts.items():
        name = sources.start_set_name(key)
        if name in cp.stand_ins:
            text = texts[cp.stand_ins[name]].encode()
            out[sources.start_path(key)] = start.prefix + text
        elif name in decisions:
            rename = {t: cfg.topics.destination_topic(t) for t in start.kafka}
            offsets: dict[str, dict[int, int]] = {rename[t]: {} for t in start.kafka}
            for (topic, partition), offset in sorted(decisions[name].offsets.items()):
                offsets.setdefault(topic, {})[partition] = offset
            out[sources.start_path(key)] = render_start_offsets(start, offsets)
    return out


def stand_in(cp: Checkpoint, decisions: dict[str, GroupDecision]) -> list[str]:
    """With batch N committed, Spark only checks `offsets/N-1` (and start offsets read as
    `PRIMED`) against N on restart (a DSv1 source's `getBatch(N-1, N)`; a DSv2 source reads
    neither): one that cannot be translated takes N's translated line instead (Spark's
    `getBatch` of an empty range: nothing read, nothing checked), when N's is READY. Each
    stand-in is recorded in `cp.stand_ins`, its decision made READY; the warnings said."""
    if not cp.choice.is_committed:
        return []
    said = []
    for name, decision in sorted(decisions.items()):
        if decision.is_write or sources.file_of(name) == f"offsets/{cp.choice.newest}":
            continue
        key = name.split(" source ", 1)[1]
        newest = f"offsets/{cp.choice.newest} source {key}"
        if newest not in decisions or not decisions[newest].is_write:
            continue
        cp.stand_ins[name] = newest
        why = f"{decision.message} ({decision.status})"
        decisions[name] = GroupDecision(name, GroupStatus.READY, why, decisions[newest].offsets)
        said.append(
            f"{cp.store.name(sources.file_of(name))}: source {key} not translated ({why}): "
            f"Spark only checks it against batch {cp.choice.newest} on restart, which is "
            f"committed; written as offsets/{cp.choice.newest}'s translation (an empty batch)"
        )
    return said


def sources_plan(
    cp: Checkpoint,
    cfg: FerryConfig,
    src: kafka.Cluster,
    src_topics: Mapping[str, int],
    chosen: str | None,
    progress: Callable[[str], None],
) -> tuple[dict[str, dict], dict]:
    """The plan's sources (said in progress lines), those `--sources` picks (`chosen`), their
    position sets (`position_sets`) checked against the source cluster (`sources.check_fit`),
    and the source's log bounds of every position."""
    listed = sources.kafka_sources(cp.parsed, cp.reads)
    picked = sources.pick(listed, chosen)
    for line in sources.describe(listed, picked):
        progress(line)
    sets, warnings = position_sets(cp, cfg, src_topics, picked, chosen is not None)
    for warning in warnings:
        print(f"warning: {warning}", file=sys.stderr)
    if not sets:
        raise CheckpointFormatError(f"{cp.store.root}: no Kafka source the config selects")
    if len(listed) > 1 and chosen is None:
        print(
            f"warning: {len(listed)} Kafka sources, all translated: a source reading another "
            "cluster's topic of the same name is told only when its positions do not fit the "
            "source cluster; --sources names those that read it",
            file=sys.stderr,
        )
    sources.check_fit(sets, src_topics, None, cp.store.root, listed)
    bounds = kafka.watermarks(src, {tp for s in sets.values() for tp in s})
    sources.check_fit(sets, src_topics, bounds, cp.store.root, listed)
    return sets, bounds


def plan_topics(decisions: Mapping[str, GroupDecision]) -> set[tuple[str, int]]:
    return {tp for d in decisions.values() for tp in d.offsets}
