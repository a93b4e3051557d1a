"""Which committed offsets need a read further back (ferry.migrate.extract.short_of_context),
and what is read around them (ferry.migrate.ranges.source_needs), on plain values."""

from __future__ import annotations

import random

from ferry.migrate.extract import short_of_context
from ferry.migrate.ranges import merge_intervals, source_needs

K = 2  # k + 1 = 3 records wanted before each committed offset


def _lists(short: dict) -> dict:
    return {tp: sorted(c.tolist()) for tp, c in short.items()}


def test_an_offset_with_too_few_records_read_before_it_is_short_until_the_log_start():
    bounds = {("t", 0): (0, 100), ("t", 1): (45, 100), ("u", 0): (0, 100)}
    read = {
        ("t", 0): [47, 44, 49, 51],  # gaps: only 44, 47 and 49 before 50 (unsorted on purpose)
        ("t", 1): [48, 49],  # two before 50, but the window [44, 50) reaches the log start, 45
        ("u", 0): [48, 49],  # two before 50: short
    }
    pending = {("t", 0): [50, 48], ("t", 1): [50], ("u", 0): [50], ("v", 0): [9]}
    bounds[("v", 0)] = (0, 10)  # nothing read at all
    assert _lists(short_of_context(read, pending, bounds, K, lookback=6)) == {
        ("t", 0): [48],  # 44, 47: two
        ("u", 0): [50],
        ("v", 0): [9],
    }
    # once the window reaches the log start nothing more can be read
    assert short_of_context(read, {("u", 0): [50]}, bounds, K, lookback=50) == {}


def test_the_source_is_read_around_every_committed_offset_in_merged_intervals():
    """Each committed offset C needs [C - lookback, C + k + 1) within the log (C past the
    log start: from the log start); the intervals come merged, and cover exactly the union
    of the per-offset ones."""
    rng = random.Random(7)
    bounds = {("t", 0): (100, 400), ("t", 1): (0, 50), ("u", 0): (10, 10)}
    committed = {
        ("t", 0): [rng.randrange(0, 500) for _ in range(60)] + [100, 400, 5],
        ("t", 1): [49, 0, 49],
        ("u", 0): [10],  # an empty log: nothing to read
    }
    needs = source_needs(committed, bounds, K, lookback=6)
    for tp, offsets in committed.items():
        log_start, log_end = bounds[tp]
        one_by_one = []
        for c in offsets:
            start = max(log_start, c - 6)
            one_by_one.append((start, max(start, min(log_end, max(c, log_start) + K + 1))))
        assert needs.get(tp, []) == merge_intervals(one_by_one), tp
    assert needs[("t", 1)] == [(0, 3), (43, 50)]  # 0 and 49: apart
    assert ("u", 0) not in needs
