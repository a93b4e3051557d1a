"""Which committed offsets need a read further back (ferry.migrate.extract.short_of_context),
on plain values."""

from __future__ import annotations

from ferry.migrate.extract import short_of_context

K = 2  # k + 1 = 3 records wanted before each committed offset


def test_an_offset_with_too_few_records_read_before_it_is_short_until_the_log_start():
    bounds = {("t", 0): (0, 100), ("t", 1): (45, 100), ("u", 0): (0, 100)}
    read = {
        ("t", 0): [47, 44, 49, 51],  # gaps: only 44, 47 and 49 before 50 (unsorted on purpose)
        ("t", 1): [48, 49],  # two before 50, but the window [44, 50) reaches the log start, 45
        ("u", 0): [48, 49],  # two before 50: short
    }
    pending = {(("t", 0), 50), (("t", 0), 48), (("t", 1), 50), (("u", 0), 50), (("v", 0), 9)}
    bounds[("v", 0)] = (0, 10)  # nothing read at all
    assert short_of_context(read, pending, bounds, K, lookback=6) == {
        (("t", 0), 48),  # 44, 47: two
        (("u", 0), 50),
        (("v", 0), 9),
    }
    # once the window reaches the log start nothing more can be read
    assert short_of_context(read, {(("u", 0), 50)}, bounds, K, lookback=50) == set()
