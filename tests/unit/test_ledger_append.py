"""Appending to the ledger: each run holds the table it appends to (its log read once, not at
every commit), and runs that append in turn to one table still keep every row, in the order
their commits were made (deltalake path: the test session has no Delta jars)."""

from __future__ import annotations

import json

from deltalake import DeltaTable

from ferry.write import ledger


def _rows(group: str, n: int) -> list[dict]:
    return [{"cluster": "dst:9092", "group": group, "partition": p} for p in range(n)]


def test_runs_appending_in_turn_keep_every_row_in_commit_order(spark, tmp_path):
    path = str(tmp_path / "ledger")
    first = ledger.Ledger(spark, path, "run-a", "migrate", True)
    second = ledger.Ledger(spark, path, "run-b", "migrate", True)
    first.append(_rows("a1", 2), ledger.PHASE_INTENT)  # creates the table
    first.append(_rows("a2", 3), ledger.PHASE_INTENT)  # held from here on
    second.append(_rows("b1", 1), ledger.PHASE_INTENT)
    first.append(_rows("a3", 1), ledger.PHASE_OUTCOME)  # its held table is a commit behind
    second.append(_rows("b2", 2), ledger.PHASE_OUTCOME)

    table = DeltaTable(path)
    assert table.version() == 4
    commits = [
        (h["version"], json.loads(h["userMetadata"])["ferry.run_id"])
        for h in table.history()
        if h.get("userMetadata")
    ]
    assert sorted(commits) == [(0, "run-a"), (1, "run-a"), (2, "run-b"), (3, "run-a"), (4, "run-b")]
    rows = ledger.read(spark, path).select("run_id", "group", "phase").collect()
    got = sorted((r.run_id, r.group, r.phase) for r in rows)
    assert got == sorted(
        [("run-a", "a1", "intent")] * 2
        + [("run-a", "a2", "intent")] * 3
        + [("run-b", "b1", "intent")]
        + [("run-a", "a3", "outcome")]
        + [("run-b", "b2", "outcome")] * 2
    )
