"""A checkpoint's Kafka sources, as the operator sees and chooses them: listed in the plan (each
by its key, its index in the query or its name in a `v2` log, with its topics), picked with
`--sources`, checked against the source cluster, and their start offsets (`sources/KEY/0`,
`ferry.checkpoint.start_offsets`) turned into position sets and files where Spark reads them.

Kafka lines carry topic names and offsets, never the cluster they were read from: a source of
a union that reads a third cluster's topic of the same name is told only when its positions
do not fit the source cluster (a topic it lacks, a partition past its count, an offset past
its log end). Such a source is named and refused (exit 1) unless `--sources` leaves it out;
one whose positions fit by chance cannot be told from the files, which is why the plan lists
every source and a query with several asks for `--sources` to be sure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ferry.checkpoint import start_offsets
from ferry.checkpoint.offsets_log import CheckpointFormatError, OffsetsFile
from ferry.checkpoint.start_offsets import Read, StartOffsets, start_path
from ferry.errors import FerryError, UsageError

Key = int | str


def start_set_name(key: Key) -> str:
    """The position set of source KEY's start offsets (the file, then the source, as
    `offsets/N source KEY` names a line)."""
    return f"{start_path(key)} source {key}"


def file_of(set_name: str) -> str:
    """The checkpoint file a position set comes from: `offsets/N` or `sources/KEY/0`."""
    return set_name.split(" ", 1)[0]


@dataclass(frozen=True)
class SourcePlan:
    """One Kafka source of the query as the chosen files show it."""

    key: Key
    topics: tuple[str, ...]  # every topic of its lines, sorted
    files: tuple[str, ...]  # the offsets files with a Kafka line of it
    start_read: Read | None  # how Spark reads its start offsets on restart (None: never)


def kafka_sources(parsed: Mapping[int, OffsetsFile], reads: Mapping[Key, Read]) -> list[SourcePlan]:
    """The query's Kafka sources in the newest file's order, then any only older files have."""
    topics: dict[Key, set[str]] = {}
    files: dict[Key, list[str]] = {}
    for batch in sorted(parsed, reverse=True):
        for line in parsed[batch].kafka_sources:
            topics.setdefault(line.key, set()).update(line.kafka or {})
            files.setdefault(line.key, []).append(f"offsets/{batch}")
    return [
        SourcePlan(key, tuple(sorted(topics[key])), tuple(sorted(files[key])), reads.get(key))
        for key in topics
    ]


def pick(sources: list[SourcePlan], given: str | None) -> set[Key]:
    """The sources `--sources` names (comma-separated keys: indexes in a `v1` log, names in a
    `v2` one); every Kafka source without the option. An unknown key is a usage error."""
    known = {str(s.key): s.key for s in sources}
    if given is None:
        return set(known.values())
    wanted = [k.strip() for k in given.split(",") if k.strip()]
    unknown = [k for k in wanted if k not in known]
    if unknown or not wanted:
        listed = "; ".join(f"{s.key} ({', '.join(s.topics)})" for s in sources)
        raise UsageError(
            f"--sources {given}: {'no source named' if wanted else 'no source given'}"
            f"{' ' + ', '.join(unknown) if unknown else ''}; the query's Kafka sources: {listed}"
        )
    return {known[k] for k in wanted}


def describe(sources: list[SourcePlan], picked: set[Key]) -> list[str]:
    """The plan's lines: each source, its topics, and what happens to it."""
    out = []
    for s in sources:
        what = "translated" if s.key in picked else "left out by --sources: kept byte for byte"
        start = ""
        if s.start_read is not None and s.key in picked:
            how = "read from" if s.start_read == Read.RECORDS else "checked by a DSv1 source"
            start = f"; its start offsets {start_path(s.key)} {how} on restart: translated"
        out.append(f"source {s.key}: {', '.join(s.topics)} ({what}{start})")
    return out


def start_sets(
    store,  # noqa: ANN001 - a checkpoint store
    data: Mapping[str, bytes | None],
    reads: Mapping[Key, Read],
    picked: set[Key],
    batch: int,
) -> dict[Key, StartOffsets]:
    """The start offsets Spark reads of each picked source, parsed (`data`: the files read,
    None when not there; `batch`: the newest). A missing or damaged file is refused (exit
    2)."""
    out = {}
    for key, how in reads.items():
        if key not in picked:
            continue
        path = start_path(key)
        raw = data.get(path)
        if raw is None:
            when = (
                f"batch {batch} is not committed: Spark runs it again for source {key} from"
                if how == Read.RECORDS
                else f"batch {batch} is committed: a DSv1 source {key} checks it against"
            )
            raise CheckpointFormatError(
                f"{store.name(path)}: not there, and {when} the start offsets that file holds "
                "(without it, the query's startingOffsets on the destination); nothing written"
            )
        out[key] = start_offsets.parse_start_offsets(store.name(path), key, raw)
    return out


def check_fit(
    sets: Mapping[str, Mapping[tuple[str, int], int]],
    src_topics: Mapping[str, int],
    bounds: Mapping[tuple[str, int], tuple[int, int]] | None,
    root: str,
    sources: list[SourcePlan],
) -> None:
    """Refuse (exit 1, one line) the first source whose positions do not fit the source
    cluster: a topic it lacks, a partition past its count, or (with `bounds`, the source's
    log start and end) an offset past its log end. The line names the source, why, and the
    `--sources` that leaves it out."""
    for name, offsets in sorted(sets.items()):
        key = name.split(" source ", 1)[1]
        why = None
        for (topic, partition), offset in sorted(offsets.items()):
            if topic not in src_topics:
                why = f"topic {topic} is not on the source cluster"
            elif partition >= src_topics[topic]:
                why = f"{topic}[{partition}]: {topic} has {src_topics[topic]} partitions there"
            elif bounds is not None and offset > bounds[(topic, partition)][1]:
                end = bounds[(topic, partition)][1]
                why = f"{topic}[{partition}] is at {offset}, past the source's log end {end}"
            if why:
                break
        if why is None:
            continue
        others = [str(s.key) for s in sources if str(s.key) != key]
        hint = (
            f"if it reads another cluster, leave it out with --sources {','.join(others)}"
            if others
            else "it reads another cluster (the destination?) or the checkpoint was edited"
        )
        raise FerryError(
            f"{root}/{file_of(name)}: source {key} does not fit the source cluster ({why}): "
            f"its positions are not the source's; {hint}; nothing written"
        )
