"""How `ferry.write.commit` cuts a run's writes into batches (pure)."""

from __future__ import annotations

from ferry.write import commit


def _writes(*groups: str) -> list[commit.GroupWrite]:
    return [commit.GroupWrite(g, {("t", 0): 1}, []) for g in groups]


def test_batches_keep_order_and_size():
    writes = _writes(*(f"g{i}" for i in range(17)))
    batches = commit._batches(writes, 7)
    assert [len(b) for b in batches] == [7, 7, 3]
    assert [w for b in batches for w in b] == writes


def test_a_group_named_twice_is_never_in_flight_twice():
    batches = commit._batches(_writes("a", "b", "a", "c"), 10)
    assert [[w.group for w in b] for b in batches] == [["a", "b"], ["a", "c"]]


def test_batch_size_below_one_means_one():
    assert [len(b) for b in commit._batches(_writes("a", "b"), 0)] == [1, 1]
