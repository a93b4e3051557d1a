"""Offset intervals: what to read around each committed offset, and a book of what has been
read already so no interval is read twice; its intervals are also the segments a record's
context stays within (`ferry.migrate.context`). Pure: no Spark, no Kafka client."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from ferry.kafka.reader import OffsetRange
from ferry.keys import TopicPartitionKey


def merge_intervals(intervals: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """Sorted, non-overlapping, non-adjacent intervals covering the input ([start, end))."""
    merged: list[list[int]] = []
    for start, end in sorted(i for i in intervals if i[1] > i[0]):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(s, e) for s, e in merged]


def subtract_intervals(
    wanted: tuple[int, int], have: Sequence[tuple[int, int]]
) -> list[tuple[int, int]]:
    """Parts of `wanted` not covered by the (merged) intervals in `have`."""
    parts = [wanted]
    for hs, he in have:
        parts = [
            piece
            for s, e in parts
            for piece in ((s, min(e, hs)), (max(s, he), e))
            if piece[1] > piece[0]
        ]
    return parts


def source_needs(
    committed: Mapping[TopicPartitionKey, Sequence[int]],
    bounds: Mapping[TopicPartitionKey, tuple[int, int]],
    context: int,
    lookback: int,
) -> dict[TopicPartitionKey, list[tuple[int, int]]]:
    """Per source partition, the offset intervals holding each committed offset's anchor and
    context (`committed`: per partition, its committed offsets), merged: an interval per
    offset, built and merged by numpy (250,000 offsets one by one took 0.6 s)."""
    import numpy as np

    needs: dict[TopicPartitionKey, list[tuple[int, int]]] = {}
    for tp, offsets in committed.items():
        log_start, log_end = bounds[tp]
        c = np.sort(np.asarray(offsets, dtype=np.int64))
        # both ends grow with c, so the intervals are sorted by start and by end alike
        start = np.maximum(log_start, c - lookback)
        end = np.maximum(start, np.minimum(log_end, np.maximum(c, log_start) + context + 1))
        keep = end > start
        start, end = start[keep], end[keep]
        if len(start):
            breaks = np.flatnonzero(start[1:] > end[:-1]) + 1
            firsts = np.concatenate(([0], breaks))
            lasts = np.concatenate((breaks - 1, [len(end) - 1]))
            needs[tp] = list(zip(start[firsts].tolist(), end[lasts].tolist(), strict=True))
    return needs


@dataclass
class RangeBook:
    """Which offset intervals of which partitions have been read; nothing is read twice."""

    read: dict[TopicPartitionKey, list[tuple[int, int]]] = field(default_factory=dict)

    def new_ranges(
        self, needs: Mapping[TopicPartitionKey, list[tuple[int, int]]]
    ) -> list[OffsetRange]:
        out = []
        for tp, intervals in needs.items():
            have = self.read.get(tp, [])
            for s, e in merge_intervals(intervals):
                for ps, pe in subtract_intervals((s, e), have):
                    out.append(OffsetRange(tp[0], tp[1], ps, pe))
        for r in out:
            key = (r.topic, r.partition)
            self.read[key] = merge_intervals(self.read.get(key, []) + [(r.start, r.end)])
        return out

    def unread(self, needs: Mapping[TopicPartitionKey, list[tuple[int, int]]]) -> int:
        """How many offsets of `needs` have not been read (nothing is recorded)."""
        have = self.read
        return sum(
            pe - ps
            for tp, intervals in needs.items()
            for s, e in merge_intervals(intervals)
            for ps, pe in subtract_intervals((s, e), have.get(tp, []))
        )
