"""Where anchors land on the destination: the first offset at or after each anchor's
timestamp, and the offsets of its matching window, for the destination search
(`ferry.migrate.search`), every lookup in lockstep (`kafka.offsets_for_many_timestamps`).

Kafka's answer to a timestamp lookup is only a lower bound (a transaction marker, stamped by
the broker's clock, can come before records of older CreateTime): `first_positions` takes it
unverified and `verify_first` checks it against the first read around it, looking up again,
verified, only the answers that fail.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence

from ferry import kafka
from ferry.kafka.cluster import Cluster
from ferry.keys import TopicPartitionKey
from ferry.migrate import anchors
from ferry.migrate.extract import window_extents
from ferry.migrate.slices import AnchorSlice


def anchor_positions(
    dst: Cluster,
    keys: Iterable[tuple[str, int, int]],
    bounds: Mapping[TopicPartitionKey, tuple[int, int]],
) -> dict[tuple[str, int, int], int]:
    """P for each key (dst_topic, dst_partition, anchor_timestamp_ms): verified timestamp
    lookups, all of them in lockstep (`kafka.offsets_for_many_timestamps`)."""
    per_tp: dict[TopicPartitionKey, list[int]] = defaultdict(list)
    for t, p, ts in keys:
        per_tp[(t, p)].append(ts)
    found = kafka.offsets_for_many_timestamps(dst, per_tp, bounds)
    return {key: bounds[key[:2]][1] if at is None else at for key, at in found.items()}


def first_positions(
    dst: Cluster,
    keys: Sequence[tuple[str, int, int]],
    bounds: Mapping[TopicPartitionKey, tuple[int, int]],
) -> tuple[dict[tuple[str, int, int], int], set[tuple[str, int, int]]]:
    """P for each key (dst_topic, dst_partition, anchor_timestamp_ms), and the keys whose P is
    the broker's unverified answer. The broker names the first offset whose record *or
    transaction marker* is at least as new (`kafka.offsets_for_many_timestamps`); most answers
    are right, and the first read around them shows it (`verify_first`) at no cost, where a
    probe each took seconds (1,278 of them 1.7 s). Keys the broker answered with no offset
    are looked up at once, verified."""
    answers = kafka.timestamp_offsets(dst, keys)
    at = {key: a for key, a in answers.items() if a is not None and a >= 0}
    rest = [key for key in keys if key not in at]
    unverified = set(at)
    at.update(anchor_positions(dst, rest, bounds))
    return at, unverified


def verify_first(
    dst: Cluster,
    slices: Mapping[tuple[str, int, int], AnchorSlice],
    read,  # noqa: ANN001 - Arrow table of the first read's topic, partition, offset, timestamp_ms
    bounds: Mapping[TopicPartitionKey, tuple[int, int]],
    k: int,
) -> set[tuple[str, int, int]]:
    """Check the broker's answers (`first_positions`) against the first read: right when the
    first record read at or after it is at least as new as the anchor (the records before
    it are older, by the broker's rule). Each wrong one, or one the read does not show, is
    looked up verified and its slice moved there; those keys are returned."""
    import numpy as np

    by_tp = anchors.records_by_partition(read) if read is not None else {}
    none = anchors.PartitionRecords(np.empty(0, np.int64), np.empty(0, np.int64))
    wrong = set()
    for key, s in slices.items():
        offsets, stamps = by_tp.get(key[:2], none)[:2]
        i = int(np.searchsorted(offsets, s.position))
        # the slice's own range was read whole: a record of it at or after P is in the table
        end = s.read_bounds[1] if s.read_bounds else s.position
        if i == len(offsets) or offsets[i] >= end or stamps[i] < key[2]:
            wrong.add(key)
    if wrong:
        for key, at in anchor_positions(dst, sorted(wrong), bounds).items():
            s = slices[key]
            s.position = at
            s.is_left_closed = s.is_right_closed = False
            s.close_at_edges(k)
    return wrong


def look_up_windows(
    dst: Cluster,
    slices: Mapping[tuple[str, int, int], AnchorSlice],
    bounds: Mapping[TopicPartitionKey, tuple[int, int]],
    k: int,
    before_ms: int,
    after_ms: int,
) -> None:
    """Give each slice its window's offsets, those a full read of it reads (never less than
    the slice already covers), all looked up at once."""
    windows: dict[TopicPartitionKey, list[tuple[int, int]]] = defaultdict(list)
    keys = sorted(slices)
    for t, p, ts in keys:
        windows[(t, p)].append((ts - before_ms, ts + after_ms + 1))
    extents = window_extents(dst, windows, bounds, k)
    taken: dict[TopicPartitionKey, int] = defaultdict(int)
    for key in keys:
        tp = key[:2]
        lo, hi = extents[tp][taken[tp]]
        taken[tp] += 1
        start, end = slices[key].bounds(k)
        slices[key].window = (min(lo, start), max(hi, end))
