"""A Kafka source's start offsets, `sources/<KEY>/0`: parsed, rewritten byte-compatibly, and
which of them Spark reads when the query restarts (pure: no Spark, no Kafka).

Spark's Kafka source (`KafkaSource`, DSv1, and `KafkaMicroBatchStream`, DSv2) writes the
positions its query started from once, through `KafkaSourceInitialOffsetWriter`: a zero byte
(kept for Spark 2.1.0, SPARK-19517), the line `v1`, then the offsets' JSON with no newline
after it (`\\x00v1\\n{"t":{"0":0,"1":0}}`); a file of Spark 2.1.0 has the JSON right after the
zero byte. KEY is the source's index in the query, or in a `v2` offset log its name (the key
of its lines). The JSON is the shape of an offsets line's: topic → partition → next offset.

When Spark reads them on restart (`MicroBatchExecution.populateStartOffsets` and `runBatch`,
Spark 4.2), with N the newest batch in `offsets/` and P the one before it in storage:

- N not committed: batch N runs again from P's offsets; a source with none in P (no P at all,
  the first batch; a `-` line; in a `v2` log a source first seen in N) from its start
  offsets, its records read (`KafkaSource.getBatch(None, N)`, `KafkaMicroBatchStream`'s
  `initialOffset`);
- N committed: a DSv1 source is asked for batch N again, `getBatch(P's, N's)`, only checked,
  no record read; with none in P, `getBatch(None, N)` checks the start offsets against N's
  (a partition missing, or one going backwards, is data loss). A DSv2 source reads nothing
  of them. Which API a query used is not written in the checkpoint, so these are translated
  too (`PRIMED`), with the same stand-in as `offsets/P`'s when they cannot be;
- a source with no offset in N nor in P (a `-` line: no partition yet) reads its next batch
  from them: Ferry leaves those as they are (nothing says the line is a Kafka source's).

Anywhere else they are never read again and are kept byte for byte.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum

from ferry.checkpoint.offsets_log import (
    NO_OFFSET,
    BatchChoice,
    CheckpointFormatError,
    KafkaLineError,
    OffsetsFile,
    TopicPartitionOffsets,
    kafka_offsets,
    render_kafka_line,
)

ZERO = b"\x00"
VERSION = "v1"


class Read(str, Enum):
    """How Spark reads a source's start offsets on restart."""

    RECORDS = "RECORDS"  # records are read from them (batch N runs again, or the next one)
    PRIMED = "PRIMED"  # a DSv1 source checks them against batch N's (getBatch(None, N))


@dataclass(frozen=True)
class StartOffsets:
    """One parsed `sources/KEY/0`."""

    key: int | str
    prefix: bytes  # what comes before the JSON: b"\\x00v1\\n", or b"\\x00" (Spark 2.1.0)
    text: str  # the JSON, as written
    kafka: TopicPartitionOffsets  # empty: a source that had no partition when it started


def start_path(key: int | str) -> str:
    """The file holding source KEY's start offsets, in the checkpoint."""
    return f"sources/{key}/0"


def parse_start_offsets(name: str, key: int | str, data: bytes) -> StartOffsets:
    """`sources/KEY/0`'s bytes parsed as `KafkaSourceInitialOffsetWriter.deserialize` reads
    them; `name` (its path) goes in every error (exit 2)."""
    if not data.startswith(ZERO):
        raise CheckpointFormatError(
            f"{name}: does not start with the zero byte Spark's Kafka source writes: not its "
            "start offsets"
        )
    try:
        content = data[1:].decode("utf-8")
    except UnicodeDecodeError:
        raise CheckpointFormatError(f"{name}: not UTF-8 text: damaged") from None
    prefix = ZERO
    if content.startswith("v"):
        version, newline, content = content.partition("\n")
        if not newline or version != VERSION:
            raise CheckpointFormatError(
                f"{name}: start offsets of format {version!r}: Ferry reads {VERSION}"
            )
        prefix = ZERO + f"{version}\n".encode()
    if content.strip() == "{}":
        return StartOffsets(key, prefix, content, {})
    try:
        kafka = kafka_offsets(content)
    except KafkaLineError as exc:
        raise CheckpointFormatError(f"{name}: {exc}: damaged, or edited") from None
    if kafka is None:
        raise CheckpointFormatError(f"{name}: not a Kafka source's offsets: damaged")
    return StartOffsets(key, prefix, content, kafka)


def render_start_offsets(start: StartOffsets, offsets: Mapping[str, Mapping[int, int]]) -> bytes:
    """The file's bytes with `offsets` (topic → partition → next offset) as its JSON, compact
    as Spark's json4s writes it, the zero byte and version line kept."""
    return start.prefix + render_kafka_line(offsets).encode("utf-8")


def start_reads(choice: BatchChoice, parsed: Mapping[int, OffsetsFile]) -> dict[int | str, Read]:
    """Each source whose start offsets Spark reads on restart, by key, and how (the module
    docstring): the sources with a Kafka line in the newest batch."""
    newest = parsed[choice.newest]
    before = [b for b in choice.batches if b < choice.newest]
    # The batch the newest one starts from: the previous one in storage (`choose_batches`).
    start = parsed[before[-1]] if before else None
    has_start = {s.key for s in start.sources if s.text != NO_OFFSET} if start else set()
    out: dict[int | str, Read] = {}
    for line in newest.sources:
        if line.is_kafka and line.key not in has_start:
            out[line.key] = Read.PRIMED if choice.is_committed else Read.RECORDS
    return out
