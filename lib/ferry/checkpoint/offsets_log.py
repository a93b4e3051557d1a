"""A Structured Streaming checkpoint's offset log as text: parsed, its Kafka positions found,
and rewritten with other positions byte-compatibly (pure: no Spark, no Kafka).

What Spark writes (`OffsetSeqLog`, format `v1`): `offsets/N` is the line `v1`, the batch's
metadata JSON on one line, then one line per source of the query, in the query's source order:
the source's offset JSON, or `-` for a source that has none yet. Format `v2` (Spark 4.2, opt-in
through `spark.sql.streaming.offsetLog.formatVersion=2`, sources named with
`DataStreamReader.name()`) keys each line by its source: `NAME:{...}` or `NAME:-`, in the
order Spark wrote them; a source is then told by its name, not its place. Lines are joined by
`\\n`, with no newline after the last. A Kafka source's line maps topic → partition (a string)
→ the next offset to read: `{"events":{"0":23,"1":7}}`. `commits/N` marks batch N done; which
files Spark reads on restart is `choose_batches`'s. Batch ids name state store versions and the
sink's own batch log: they are never changed.

A rewrite changes only the Kafka lines that are translated: the header, the metadata line,
other sources' lines and `-` are kept byte for byte; a translated line keeps its topics' and
partitions' order where the topic keeps its partitions, compact as Spark's json4s writes it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from ferry.errors import UsageError

VERSIONS = ("v1", "v2")
NO_OFFSET = "-"

TopicPartitionOffsets = dict[str, dict[int, int]]  # topic -> partition -> next offset


class CheckpointFormatError(UsageError):
    """Not a checkpoint, or an offsets file Ferry cannot read: the message names the file
    (exit code 2)."""


@dataclass(frozen=True)
class SourceLine:
    """One source's line of an offsets file: its index among the query's sources, its text,
    and its Kafka positions when it is a Kafka source's line (None otherwise)."""

    index: int
    text: str  # the offset's JSON (or `-`), without a v2 line's `NAME:`
    kafka: TopicPartitionOffsets | None
    name: str | None = None  # a v2 file's source id (`DataStreamReader.name()`)

    @property
    def is_kafka(self) -> bool:
        return self.kafka is not None

    @property
    def key(self) -> int | str:
        """What names this source in output and in a rewrite: its name in a v2 file, its
        index among the query's sources in a v1 file."""
        return self.name if self.name is not None else self.index

    @property
    def line(self) -> str:
        """The line as the file holds it."""
        return self.text if self.name is None else f"{self.name}:{self.text}"


@dataclass(frozen=True)
class OffsetsFile:
    """One parsed `offsets/N`."""

    batch_id: int
    version: str
    metadata: str
    sources: tuple[SourceLine, ...]

    @property
    def kafka_sources(self) -> list[SourceLine]:
        return [s for s in self.sources if s.is_kafka]


class KafkaLineError(ValueError):
    """A line shaped as a Kafka source's whose offsets are not whole numbers at or above 0."""


def is_source_name(text: str) -> bool:
    """Spark 4.2's rule for a source's name (`DataStreamReader.name()`, checked by
    `StreamingNameValidator` against `^[a-zA-Z0-9_]+$`: any length), which the index a v2 log
    keys an unnamed source by also meets."""
    return bool(text) and all(c.isascii() and (c.isalnum() or c == "_") for c in text)


def kafka_offsets(text: str) -> TopicPartitionOffsets | None:
    """A source line's Kafka positions, or None when the line is not a Kafka source's: a JSON
    object of topics, each an object of partition numbers to offsets. Other sources (files,
    Delta, rate) write objects of other shapes, or plain values. A line of that shape whose
    offsets are not whole numbers >= 0 is a damaged Kafka line (`KafkaLineError`): Spark's
    Kafka source writes the offsets it read up to, never a negative or fractional one."""
    try:
        value = json.loads(text)
    except ValueError:
        return None
    if not isinstance(value, dict) or not value:
        return None
    is_kafka_shape = all(
        isinstance(parts, dict) and parts and all(p.isascii() and p.isdigit() for p in parts)
        for parts in value.values()
    )
    if not is_kafka_shape:
        return None
    out: TopicPartitionOffsets = {}
    for topic, partitions in value.items():
        per: dict[int, int] = {}
        for partition, offset in partitions.items():
            if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
                raise KafkaLineError(f"{topic}[{partition}] has offset {json.dumps(offset)}")
            per[int(partition)] = offset
        out[topic] = per
    return out


def parse_offsets_file(name: str, batch_id: int, data: bytes) -> OffsetsFile:
    """`offsets/N`'s bytes parsed; `name` (its path) goes in every error."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise CheckpointFormatError(f"{name}: not UTF-8 text: not a Spark offsets file") from None
    lines = text.split("\n")
    if not lines or not lines[0].startswith("v"):
        raise CheckpointFormatError(f"{name}: no version line: not a Spark offsets file")
    if lines[0] not in VERSIONS:
        raise CheckpointFormatError(
            f"{name}: offsets format {lines[0]!r}: Ferry reads {' and '.join(VERSIONS)}"
        )
    if len(lines) < 2:
        raise CheckpointFormatError(f"{name}: no metadata line: the file is damaged")
    metadata = lines[1]
    if metadata:
        try:
            json.loads(metadata)
        except ValueError:
            raise CheckpointFormatError(
                f"{name}: metadata line is not JSON: the file is damaged"
            ) from None
    sources = []
    for index, line in enumerate(lines[2:]):
        source_id = None
        if lines[0] == "v2":
            # `NAME:OFFSET` (Spark's OffsetSeqLog, format 2): names are [A-Za-z0-9_]+
            source_id, colon, line = line.partition(":")
            if not colon or not is_source_name(source_id):
                raise CheckpointFormatError(
                    f"{name}: line {index + 3} is not NAME:OFFSET: the file is damaged"
                )
        label = source_id if source_id is not None else index
        if line == NO_OFFSET:
            sources.append(SourceLine(index, line, None, source_id))
            continue
        if not line.strip():
            raise CheckpointFormatError(f"{name}: source {label} has an empty line: damaged")
        try:
            json.loads(line)
        except ValueError:
            # Sources write JSON (a plain number is JSON too): anything else is damage, most
            # often a file cut short while it was written.
            raise CheckpointFormatError(
                f"{name}: source {label}'s offsets are not JSON: the file is damaged"
            ) from None
        try:
            kafka = kafka_offsets(line)
        except KafkaLineError as exc:
            raise CheckpointFormatError(
                f"{name}: source {label}: {exc}: not an offset Spark's Kafka source writes "
                "(the file is damaged or was edited)"
            ) from None
        sources.append(SourceLine(index, line, kafka, source_id))
    return OffsetsFile(batch_id, lines[0], metadata, tuple(sources))


def render_kafka_line(offsets: Mapping[str, Mapping[int, int]]) -> str:
    """A Kafka source's line for `offsets` (topic → partition → next offset), compact as
    Spark's json4s writes it: topics in the order given, partitions ascending."""
    body = {
        topic: {str(p): int(o) for p, o in sorted(parts.items())}
        for topic, parts in offsets.items()
    }
    return json.dumps(body, separators=(",", ":"))


def translated_line(
    source: SourceLine,
    rename: Mapping[str, str],
    new_offsets: Mapping[tuple[str, int], int],
) -> str:
    """A Kafka source line with every topic renamed (`rename`: source → destination topic)
    and every partition's offset replaced from `new_offsets` ((destination topic, partition)
    → offset). A destination topic's partitions are exactly those `new_offsets` names for it
    (the same as the source's unless the topic was reconciled to another partition count)."""
    assert source.kafka is not None
    out: dict[str, dict[int, int]] = {}
    for topic in source.kafka:  # the original topic order
        dst_topic = rename[topic]
        out[dst_topic] = {p: o for (t, p), o in sorted(new_offsets.items()) if t == dst_topic}
    return render_kafka_line(out)


def render_offsets_file(parsed: OffsetsFile, lines: Mapping[int, str]) -> bytes:
    """The file's bytes with the source lines `lines` names (key → text) replaced, every
    other byte as it was."""
    out = [parsed.version, parsed.metadata]
    out += [s.line if s.key not in lines else replace(s, text=lines[s.key]).line
            for s in parsed.sources]  # fmt: skip
    return "\n".join(out).encode("utf-8")


def batch_ids(names: Iterable[str]) -> list[int]:
    """The batch ids among a log directory's file names, ascending: Spark's logs name files
    by the batch id alone and ignore everything else there (`.N.crc`, temporary files)."""
    return sorted(int(n) for n in names if n.isascii() and n.isdigit())


@dataclass(frozen=True)
class BatchChoice:
    """Which offsets files a translation reads and rewrites: every file Spark reads when the
    query restarts (`choose_batches`)."""

    newest: int
    newest_commit: int | None
    batches: tuple[int, ...]  # ascending

    @property
    def is_committed(self) -> bool:
        return self.newest_commit == self.newest

    @property
    def read_from(self) -> tuple[int, ...]:
        """The batches whose positions Spark reads records from on restart: the newest alone
        when it is committed (the one before only primes a DSv1 source: nothing of it is
        read again), every chosen one otherwise."""
        return (self.newest,) if self.is_committed else self.batches

    def restart(self) -> str:
        """What Spark does with these files on restart, in a few words."""
        files = ", ".join(f"offsets/{b}" for b in self.batches)
        if len(self.batches) == 1 and not self.is_committed:
            return (
                f"batch {self.newest} not committed: Spark runs it again from the sources' "
                f"start offsets (sources/) to {files}"
            )
        if len(self.batches) == 1:
            return f"batch {self.newest} committed: Spark goes on after {files}"
        if self.is_committed:
            return f"batch {self.newest} committed: Spark reads {files} and goes on after it"
        return f"batch {self.newest} not committed: Spark runs it again from {files}"


def choose_batches(name: str, offsets_ids: Iterable[int], commit_ids: Iterable[int]) -> BatchChoice:
    """The batches Spark reads on restart, from the ids found in `offsets/` and `commits/`;
    `name` (the checkpoint) goes in the error.

    A micro-batch query (`MicroBatchExecution.populateStartOffsets`) reads the newest
    `offsets/N` and the one before it in the log: batch N's start. N committed, it goes on
    from N, after a DSv1 source (`KafkaSource`) was asked for batch N again (`getBatch(N-1,
    N)`: with untranslated N-1 and `failOnDataLoss`, the restart fails); not committed, it
    runs batch N again from there. Async progress tracking writes the logs every so often, so
    ids skip: "the one before" is the previous id in storage (`getPrevBatchFromStorage`), and
    commits may lag several batches. A continuous query restarts at the newest committed
    epoch's offsets (later files are purged), so that file is translated too when it is
    older. The first batch, not committed, runs again from the sources' start offsets
    (`sources/`, their choice `start_offsets.start_reads`); any other batch with none before
    it in storage stops Spark's restart. Every file Spark may read is translated; batch ids
    are never changed."""
    offsets = sorted(set(offsets_ids))
    commits = sorted(set(commit_ids))
    if not offsets:
        raise CheckpointFormatError(f"{name}: no batch in offsets/: the query never ran a batch")
    newest = offsets[-1]
    newest_commit = commits[-1] if commits else None
    before = [b for b in offsets if b < newest]
    if not before:
        if newest_commit == newest or newest == 0:
            # The first batch uncommitted: Spark runs it again from each source's start
            # offsets (`sources/KEY/0`, `ferry.checkpoint.start_offsets`), translated too.
            return BatchChoice(newest, newest_commit, (newest,))
        raise CheckpointFormatError(
            f"{name}: batch {newest} is not committed and offsets/{newest - 1} is not there: "
            f"Spark cannot restart the query (batch {newest - 1} doesn't exist), on any cluster"
        )
    batches = {before[-1], newest}
    if newest_commit is not None and newest_commit in offsets:
        batches.add(newest_commit)
    return BatchChoice(newest, newest_commit, tuple(sorted(batches)))
