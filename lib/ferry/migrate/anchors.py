"""Anchors, chosen on the driver: for each position (source topic, partition, committed
offset C), the source record matching starts from — the last record read before C ("last"),
or, when none was read before it, the first at or after it ("next"), or neither ("none").

Neighbour means the nearest record read, never C - 1: compaction and transaction markers
leave gaps. The driver already holds the offset and timestamp of every source record read
(`extract`, as Arrow), so this is a sorted search per partition, milliseconds for 250,000
positions, where the same rule in Spark sorted every record beside a marker per position (four
seconds at 60,000 positions on 640,000 records) and was the run's first Spark job. Their
hashes are picked there too (the source read brings each record's SHA-256 to the driver,
`ferry.migrate.context.hashes_at`), and Spark cuts their context where it compares it
(`matching.with_candidates`). The anchors' timestamps also tell the destination search where
to look before Spark runs.

Pure: numpy and pyarrow, no Spark, no Kafka client.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from ferry.keys import TopicPartitionKey


class PartitionRecords(NamedTuple):
    """The records read of one partition, in offset order, as numpy arrays."""

    offsets: Any
    timestamps: Any
    fingerprints: Any = None  # when the read brought them (`ferry.hashing.fingerprints`)
    hashes: Any = None  # the records' SHA-256s (Arrow), when the read brought them


def records_by_partition(read) -> dict[TopicPartitionKey, PartitionRecords]:  # noqa: ANN001
    """An Arrow table of (topic, partition, offset, timestamp_ms, and maybe fingerprint and
    sha256) as, per partition, its offsets in order, their timestamps, fingerprints and
    hashes."""
    import numpy as np
    import pyarrow.compute as pc

    if read.num_rows == 0:
        return {}
    table = read.sort_by([("topic", "ascending"), ("partition", "ascending"),
                          ("offset", "ascending")])  # fmt: skip
    topics = pc.dictionary_encode(table.column("topic")).combine_chunks()
    topic_ids = topics.indices.to_numpy(zero_copy_only=False)
    partitions = table.column("partition").to_numpy()
    offsets = table.column("offset").to_numpy()
    stamps = table.column("timestamp_ms").to_numpy()
    prints = table.column("fingerprint").to_numpy() if "fingerprint" in table.column_names else None
    hashes = table.column("sha256").combine_chunks() if "sha256" in table.column_names else None
    is_new = (topic_ids[1:] != topic_ids[:-1]) | (partitions[1:] != partitions[:-1])
    starts = np.flatnonzero(np.concatenate(([True], is_new)))
    ends = np.append(starts[1:], len(offsets))
    names = topics.dictionary.to_pylist()
    return {
        (names[topic_ids[s]], int(partitions[s])): PartitionRecords(
            offsets[s:e],
            stamps[s:e],
            None if prints is None else prints[s:e],
            None if hashes is None else hashes.slice(s, e - s),
        )
        for s, e in zip(starts, ends, strict=True)
    }


# `PartitionAnchors.kinds`: a code for each kind of anchor
ANCHOR_KINDS = ("last", "next", "none")
LAST, NEXT, NONE = range(len(ANCHOR_KINDS))


class PartitionAnchors(NamedTuple):
    """The anchors of one partition's positions (`nearest_in`), in the positions' order, as
    numpy arrays (no anchor: offset and timestamp -1, no record before)."""

    committed: Any  # the positions' committed offsets
    kinds: Any  # int8 codes of `ANCHOR_KINDS`
    offsets: Any  # the anchor record's offset
    timestamps: Any  # and its timestamp
    records_before: Any  # records read before the anchor in its partition


def nearest_in(committed: Sequence[int], records: PartitionRecords | None) -> PartitionAnchors:
    """The anchors of one partition's committed offsets among its records read (`records`:
    None or empty when none was read). Column-wise: 250,000 positions' anchors made one at a
    time took half a second of the driver's Python."""
    import numpy as np

    committed = np.asarray(committed, dtype=np.int64)
    n = len(committed)
    if records is None or not len(records.offsets):
        kinds = np.full(n, NONE, dtype=np.int8)
        none = np.full(n, -1, dtype=np.int64)
        return PartitionAnchors(committed, kinds, none, none, np.zeros(n, dtype=np.int64))
    offsets, stamps = records.offsets, records.timestamps
    at = np.searchsorted(offsets, committed.astype(offsets.dtype), side="left")
    is_last = at > 0  # a record read before C: the last of them
    is_next = ~is_last & (at < len(offsets))  # else the first at or after C
    kinds = np.where(is_last, LAST, np.where(is_next, NEXT, NONE)).astype(np.int8)
    i = np.where(is_last, at - 1, np.minimum(at, len(offsets) - 1))
    has = kinds != NONE
    return PartitionAnchors(
        committed,
        kinds,
        np.where(has, offsets[i], -1).astype(np.int64),
        np.where(has, stamps[i], -1).astype(np.int64),
        np.where(is_last, at - 1, 0).astype(np.int64),
    )


def search_positions(
    found: Mapping[TopicPartitionKey, PartitionAnchors], renamed: Mapping[str, str], k: int
) -> dict[tuple[str, int, int], int]:
    """Where the destination search looks: each anchor's destination partition and
    timestamp, with the records before it that its anchors need matched (the least of
    theirs, at most k)."""
    import numpy as np

    stamps: dict[TopicPartitionKey, list] = {}
    before: dict[TopicPartitionKey, list] = {}
    for (topic, partition), a in found.items():
        has = a.kinds != NONE
        tp = (renamed[topic], partition)
        stamps.setdefault(tp, []).append(a.timestamps[has])
        before.setdefault(tp, []).append(a.records_before[has])
    out: dict[tuple[str, int, int], int] = {}
    for (topic, partition), ts in stamps.items():
        ts, rb = np.concatenate(ts), np.concatenate(before[(topic, partition)])
        order = np.lexsort((rb, ts))  # by timestamp, the fewest records before first
        ts, rb = ts[order], rb[order]
        unique, first = np.unique(ts, return_index=True)
        least = np.minimum(rb[first], k)
        keys = [(topic, partition, t) for t in unique.tolist()]
        out.update(zip(keys, least.tolist(), strict=True))
    return out
