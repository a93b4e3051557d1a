"""A real-time query's checkpoint (`Trigger.RealTime`, Spark 4.1+), told from when its offsets
files were written: what `migrate --checkpoint` asks the operator's word for, as the files'
age cannot show whether such a query still runs.

Spark records nothing of a query's trigger in its checkpoint: a real-time query's `offsets/N`,
`commits/N` and metadata line are those of a micro-batch query (the same conf entries, no
marker). What differs is when `offsets/N` is written. A micro-batch query writes it as its
batch starts, right after it took the batch's time (`batchTimestampMs` in the metadata line;
measured: within 0.5 s). A real-time query's batch reads on for its whole duration (at least
`spark.sql.streaming.realTimeMode.minBatchDuration`, 5 s by default; 5 minutes unless the
trigger says) and its end offsets are known only then: `MicroBatchExecution.markMicroBatchEnd`
writes `offsets/N` at the batch's end, just before `commits/N`, and the next batch starts at
once (its trigger is a processing-time trigger of 0). So a real-time batch's file is written
about one batch after its own `batchTimestampMs`, and before the next batch's.

That is the sign (`written_at_batch_end`): `offsets/K` written at least 2 s and at least half
the way from its batch's start to the next one's, and no later than the next batch's start
(give or take `CLOCK_SKEW_MS`: the store's clock is not the driver's). A checkpoint copied
without its files' times (written long after every batch) is not taken for one; files any
Ferry run rewrote are not looked at (their times are Ferry's). Where the times are lost, a
real-time query is not recognised: the docs say so (docs/jobs/checkpoint.md).

A real-time query never leaves the stop to be seen: while a batch runs (minutes), its newest
files are as old as the batch, whether the query runs or not. A batch's files written, a
running query writes the next only at its end.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass

from ferry.checkpoint import offsets_log
from ferry.checkpoint.runs import FERRY_DIR, run_ids

MIN_LATE_MS = 2_000  # a micro-batch query's file follows its batchTimestampMs by well under this
CLOCK_SKEW_MS = 5_000  # how far the store's clock may run from the driver's
PAIRS_LOOKED_AT = 3  # the newest batches looked at (each with the batch after it)


@dataclass(frozen=True)
class RealTimeSign:
    """A batch whose offsets file was written at its end, as a real-time query writes it."""

    batch: int
    started_ms: int  # its batchTimestampMs (the driver's clock)
    written_ms: int  # its file's modification time (the store's clock)
    next_started_ms: int  # the next batch's batchTimestampMs

    def describe(self) -> str:
        late = (self.written_ms - self.started_ms) / 1000
        span = (self.next_started_ms - self.started_ms) / 1000
        return (
            f"offsets/{self.batch} was written {late:.0f}s after its batch started, at its end "
            f"(batches {span:.0f}s long): as a real-time query (Trigger.RealTime) writes it"
        )


def written_at_batch_end(started_ms: int, written_ms: int, next_started_ms: int) -> bool:
    """Whether an offsets file written at `written_ms`, for a batch that started at
    `started_ms` and was followed by one that started at `next_started_ms`, was written at
    its batch's end (module docstring)."""
    span = next_started_ms - started_ms
    late = written_ms - started_ms
    return late >= max(MIN_LATE_MS, span / 2) and late <= span + CLOCK_SKEW_MS


def batch_timestamp_ms(data: bytes) -> int | None:
    """The `batchTimestampMs` of an offsets file's metadata line (None when it has none)."""
    lines = data.decode("utf-8", errors="replace").split("\n")
    try:
        value = json.loads(lines[1]).get("batchTimestampMs") if len(lines) > 1 else None
    except (ValueError, AttributeError):
        return None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def rewritten_by_ferry(store) -> set[int]:  # noqa: ANN001 - a checkpoint store
    """The batches any Ferry run wrote (or was about to write): their files' times are not
    Spark's."""
    out: set[int] = set()
    for run_id in run_ids(store):
        for folder in ("translated", "original"):
            names = (f.name for f in store.list(f"{FERRY_DIR}/{run_id}/{folder}/offsets"))
            out.update(offsets_log.batch_ids(names))
    return out


def candidate_pairs(batches: Iterable[int], skip: set[int]) -> list[tuple[int, int]]:
    """The newest `PAIRS_LOOKED_AT` (batch, next batch) pairs of the log whose first file
    was not rewritten (`skip`), newest first."""
    ordered = sorted(batches)
    pairs = [(a, b) for a, b in zip(ordered, ordered[1:], strict=False) if a not in skip]
    return list(reversed(pairs))[:PAIRS_LOOKED_AT]


def real_time_sign(store, offsets: Iterable[int]) -> RealTimeSign | None:  # noqa: ANN001
    """The newest batch whose offsets file a real-time query wrote, among the newest few
    (`offsets`: the batch ids in offsets/), or None: no sign of real-time mode."""
    pairs = candidate_pairs(offsets, rewritten_by_ferry(store))
    if not pairs:
        return None
    times = {f.name: f.modified_ms for f in store.list("offsets")}
    for batch, following in pairs:
        written = times.get(str(batch))
        started = batch_timestamp_ms(store.read(f"offsets/{batch}"))
        next_started = batch_timestamp_ms(store.read(f"offsets/{following}"))
        if written is None or started is None or next_started is None:
            continue
        if written_at_batch_end(started, written, next_started):
            return RealTimeSign(batch, started, written, next_started)
    return None
