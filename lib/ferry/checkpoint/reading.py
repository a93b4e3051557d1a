"""A checkpoint as Spark reads it on restart: the batches chosen (`offsets_log.choose_batches`),
their offsets files' bytes and parses, the start offsets Spark reads (`sources/KEY/0`), and the
idle check that refuses a checkpoint whose query may still run (`--idle`, `--query-stopped`).
Read once by `ferry.checkpoint.translate` and handed to every stage after it (`sets`,
`earlier`), which is why it lives apart from the run itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ferry.checkpoint import offsets_log, rewrite, sources
from ferry.checkpoint.modes import RealTimeSign
from ferry.checkpoint.offsets_log import CheckpointFormatError, OffsetsFile
from ferry.checkpoint.rewrite import LogsSeen
from ferry.checkpoint.runs import offsets_name
from ferry.checkpoint.start_offsets import Read, StartOffsets, start_reads
from ferry.checkpoint.stores import open_store
from ferry.errors import FerryError

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
