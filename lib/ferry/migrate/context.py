"""Context, located on the driver: for the records matching compares — the anchors and the
destination records that may be their copies — and for no other, where their neighbours are
among the records read, so Spark can cut each record's context (k fingerprints before it,
nearest first, and k after) out of its partition's fingerprints (`matching.with_context`).

Neighbour means the adjacent record read, in offset order, within the contiguous interval it
was read in (a *segment*, `ranges.RangeBook`), never offset ± 1: compaction and transaction
markers leave gaps, and they differ between clusters; an interval's edge is where the records
known end. Every read brings each record's offset, timestamp, fingerprint and SHA-256 to the
driver (`extract.read_hashed`), so a record is located by a sorted search there: its index
among its partition's records read (`at`) and the indexes of its segment's first and last
records. What Spark gets is those three numbers, the timestamp and the SHA-256 of the records
compared (the anchors and their possible candidates, not every record read) and each
partition's fingerprints once (8 bytes a record read), not 2k fingerprints a record: in
Spark the context was two sliding windows over every record read (2,000 groups: 7.5 s of
task time for 640,000 records a side, to compare 60,000), and built on the driver as arrays
it was 64 bytes × 2k a compared record in the driver's heap (250,000 positions: 130 MB
more, and out of memory at 1 GiB).

A fingerprint is the first 64 bits of the record's SHA-256 (`ferry.hashing.fingerprints`): a
neighbour taken for another needs two records' fingerprints to collide, about 1 in 10^19 a
comparison. The anchors and their candidates are joined on the whole SHA-256, in Spark.

Pure: numpy and pyarrow, no Spark, no Kafka client.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from ferry.keys import TopicPartitionKey
from ferry.migrate.anchors import PartitionRecords

# a located record, with its timestamp and SHA-256 (what a candidate is joined on): its index
# among its partition's records read, and its segment's first and last records' (`index_table`)
INDEX_FIELDS = ("topic", "partition", "offset", "timestamp_ms", "sha256", "at", "first", "last")
REPEATED_FIELDS = ("topic", "partition", "sha256")  # a hash shared within a partition
FINGERPRINT_FIELDS = ("topic", "partition", "fingerprints")  # a partition's, in offset order


def locate(
    records: PartitionRecords,
    segments: Sequence[tuple[int, int]],
    at,  # noqa: ANN001 - numpy
):  # noqa: ANN201 - numpy imported lazily
    """The records at offsets `at` (a numpy array of offsets read, any order, repeats
    allowed): their indexes among `records`, and those of their segments' first and last
    records, three numpy arrays aligned with `at`. `segments`: the partition's read intervals
    ([start, end), sorted, disjoint)."""
    import numpy as np

    offsets = records.offsets
    i = np.searchsorted(offsets, at)
    if np.any(i >= len(offsets)) or np.any(offsets[np.minimum(i, len(offsets) - 1)] != at):
        raise ValueError("context asked of a record that was not read")
    starts = np.asarray([s for s, _ in segments], dtype=np.int64)
    ends = np.asarray([e for _, e in segments], dtype=np.int64)
    segment = np.searchsorted(starts, at, side="right") - 1
    first = np.searchsorted(offsets, starts[segment])
    last = np.searchsorted(offsets, ends[segment]) - 1
    return i, first, last


class RecordsAt(NamedTuple):
    """Records asked for in a caller's order of `n` rows: per partition, the rows that name a
    record (numpy int64, ascending) and the offsets read at them; a row in no partition names
    none (an anchor of kind "none"). Built per partition by the caller
    (`ferry.migrate.plan.anchored_table`): 250,000 (partition, offset) tuples grouped again
    for each of three uses took a second of the driver's Python."""

    n: int
    parts: dict[TopicPartitionKey, tuple[Any, Any]]


def locate_each(
    records: Mapping[TopicPartitionKey, PartitionRecords],
    segments: Mapping[TopicPartitionKey, Sequence[tuple[int, int]]],
    at: RecordsAt,
):  # noqa: ANN201 - pyarrow imported lazily
    """`locate` for each row of `at`, in its order: three Arrow int32 arrays (at, first,
    last), null where a row names no record."""
    import numpy as np
    import pyarrow as pa

    out = [np.zeros(at.n, np.int64) for _ in range(3)]
    is_none = np.ones(at.n, dtype=bool)
    for tp, (rows, offsets) in at.parts.items():
        is_none[rows] = False
        for column, values in zip(out, locate(records[tp], segments[tp], offsets), strict=True):
            column[rows] = values
    return tuple(pa.array(c, pa.int32(), mask=is_none) for c in out)


def index_table(
    records: Mapping[TopicPartitionKey, PartitionRecords],
    segments: Mapping[TopicPartitionKey, Sequence[tuple[int, int]]],
    wanted: Mapping[TopicPartitionKey, Any],
):  # noqa: ANN201 - pyarrow imported lazily
    """The `wanted` records (per partition, offsets read: a sequence or numpy array) located,
    one row per distinct record with its timestamp and SHA-256 (`INDEX_FIELDS`; `records`
    must hold hashes), as one Arrow table."""
    import numpy as np
    import pyarrow as pa

    topics: list[str] = []
    columns: list[list] = [[], [], [], [], [], []]  # partition, offset, timestamp, at, first, last
    hashes = []
    for (topic, partition), offsets in sorted(wanted.items()):
        part = records[(topic, partition)]
        if part.hashes is None:
            raise ValueError("candidates located in a read without hashes")
        at = np.unique(np.asarray(offsets, dtype=np.int64))
        located = locate(part, segments[(topic, partition)], at)
        topics += [topic] * len(at)
        values = (np.full(len(at), partition), at, part.timestamps[located[0]], *located)
        for column, v in zip(columns, values, strict=True):
            column.append(v)
        hashes.append(part.hashes.take(pa.array(located[0])))
    types = [pa.int32(), pa.int64(), pa.int64(), pa.int32(), pa.int32(), pa.int32()]
    arrays = [
        pa.array(np.concatenate(c) if c else np.empty(0, np.int64), t)
        for c, t in zip(columns, types, strict=True)
    ]
    sha256 = pa.concat_arrays(hashes) if hashes else pa.array([], pa.binary())
    return pa.table(
        [pa.array(topics, pa.string()), *arrays[:3], sha256, *arrays[3:]],
        names=list(INDEX_FIELDS),
    )


def repeated_hashes(index):  # noqa: ANN001, ANN201 - pyarrow imported lazily
    """The (topic, partition, sha256) that two or more of an `index_table`'s records share,
    each once, as Arrow: no rows when every record's hash is its own in its partition."""
    import pyarrow.compute as pc

    keys = list(REPEATED_FIELDS)
    counts = index.group_by(keys, use_threads=False).aggregate([("offset", "count")])
    return counts.filter(pc.greater(counts.column("offset_count"), 1)).select(keys)


def fingerprint_table(
    records: Mapping[TopicPartitionKey, PartitionRecords], partitions: Iterable[TopicPartitionKey]
):  # noqa: ANN201 - pyarrow imported lazily
    """Each of `partitions`' fingerprints, in offset order (`FINGERPRINT_FIELDS`), as Arrow:
    what `locate`'s indexes point into."""
    import pyarrow as pa

    tps = sorted(tp for tp in set(partitions) if tp in records)
    return pa.table(
        [
            pa.array([t for t, _ in tps], pa.string()),
            pa.array([p for _, p in tps], pa.int32()),
            pa.array([records[tp].fingerprints for tp in tps], pa.list_(pa.int64())),
        ],
        names=list(FINGERPRINT_FIELDS),
    )


def fingerprints_at(records: Mapping[TopicPartitionKey, PartitionRecords], at: RecordsAt):  # noqa: ANN201 - numpy imported lazily
    """The fingerprints of the records `at` names, in its order (rows naming none: 0), as a
    numpy array: one sorted search per partition (one a record cost 0.6 s for 250,000
    anchors)."""
    import numpy as np

    out = np.zeros(at.n, dtype=np.int64)
    for tp, (rows, offsets) in at.parts.items():
        part = records[tp]
        out[rows] = part.fingerprints[np.searchsorted(part.offsets, offsets)]
    return out


def hashes_at(records: Mapping[TopicPartitionKey, PartitionRecords], at: RecordsAt):  # noqa: ANN201 - pyarrow imported lazily
    """The SHA-256 of each record `at` names, in its order, null for a row naming none: an
    Arrow binary array, from the hashes the read brought (`PartitionRecords.hashes`)."""
    import numpy as np
    import pyarrow as pa

    parts, order = [], []
    for tp, (rows, offsets) in at.parts.items():
        part = records[tp]
        i = np.minimum(np.searchsorted(part.offsets, offsets), len(part.offsets) - 1)
        if part.hashes is None or np.any(part.offsets[i] != offsets):
            raise ValueError("hash asked of a record that was not read, or read without it")
        parts.append(part.hashes.take(pa.array(i)))
        order.append(rows)
    where = np.full(at.n, -1, dtype=np.int64)  # each row's place among the parts
    if order:
        where[np.concatenate(order)] = np.arange(sum(len(o) for o in order))
    taken = pa.concat_arrays(parts) if parts else pa.array([], pa.binary())
    return taken.take(pa.array(where, mask=where < 0))


def with_fingerprint_in(
    records: Mapping[TopicPartitionKey, PartitionRecords],
    fingerprints,  # noqa: ANN001 - numpy int64 array
    partitions: Iterable[TopicPartitionKey],
) -> dict[TopicPartitionKey, Any]:
    """The offsets of the records of `partitions` whose fingerprint is one of `fingerprints`
    (the anchors'): the only destination records that can be candidates (a candidate has
    its anchor's SHA-256), so the only ones whose context matching needs; numpy arrays."""
    import numpy as np

    # sorted once, searched per partition (`np.isin` sorted the anchors' again for each: 3 s
    # for 64 partitions and 250,000 anchors)
    known = np.unique(np.asarray(fingerprints, dtype=np.int64))
    out = {}
    for tp in partitions:
        part = records.get(tp)
        if part is not None and len(part.offsets) and len(known):
            i = np.minimum(np.searchsorted(known, part.fingerprints), len(known) - 1)
            out[tp] = part.offsets[known[i] == part.fingerprints]
    return out
