"""Reading the ledger for a rollback: only the rows that say what a run wrote.

Every run appends its plan (10,000 groups: 320,000 rows a run, dry runs included); a rollback
reads intents, outcomes and, from tables older than phases, committed rows. A table that
gained `phase` later is read through both layouts (deltalake path: the test session has no
Delta jars)."""

from __future__ import annotations

from datetime import datetime, timezone

from pyspark.sql.types import StructType

from ferry import delta
from ferry.write import ledger

T = datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)


def _rows(schema: StructType, rows: list[dict]) -> dict[str, list]:
    return {f.name: [r.get(f.name) for r in rows] for f in schema.fields}


def _row(run_id: str, group: str, phase: str | None, is_committed: bool, executed: bool) -> dict:
    return {
        "run_id": run_id,
        "run_time": T,
        "action": "migrate",
        "is_executed": executed,
        "group": group,
        "is_committed": is_committed,
        "phase": phase,
    }


def test_a_rollback_reads_writes_not_plans(spark, tmp_path):
    path = str(tmp_path / "ledger")
    # a table from before phases: its committed rows are its writes
    old = StructType([f for f in ledger.LEDGER_SCHEMA.fields if f.name != "phase"])
    old_rows = [_row("old", "g0", None, True, True), _row("old", "g1", None, False, True)]
    delta.append_columns(spark, _rows(old, old_rows), old, path)
    rows = [
        _row("dry", "g2", ledger.PHASE_PLAN, False, False),
        _row("run", "g3", ledger.PHASE_PLAN, False, True),
        _row("run", "g3", ledger.PHASE_INTENT, False, True),
        _row("run", "g3", ledger.PHASE_OUTCOME, True, True),
        _row("run", "g4", ledger.PHASE_OUTCOME, False, True),
    ]
    delta.append_columns(spark, _rows(ledger.LEDGER_SCHEMA, rows), ledger.LEDGER_SCHEMA, path)

    writes = ledger.read(spark, path, writes_only=True)
    got = sorted((r.run_id, r.group, r.phase) for r in writes.collect())
    assert got == [
        ("old", "g0", None),
        ("run", "g3", "intent"),
        ("run", "g3", "outcome"),
        ("run", "g4", "outcome"),
    ]
    assert writes.columns == ledger.LEDGER_SCHEMA.fieldNames()
    assert ledger.read(spark, path).count() == 7


def test_a_ledger_without_writes_reads_empty_with_its_columns(spark, tmp_path):
    path = str(tmp_path / "ledger")
    rows = [_row("dry", "g", ledger.PHASE_PLAN, False, False)]
    delta.append_columns(spark, _rows(ledger.LEDGER_SCHEMA, rows), ledger.LEDGER_SCHEMA, path)
    writes = ledger.read(spark, path, writes_only=True)
    assert writes.count() == 0
    assert writes.columns == ledger.LEDGER_SCHEMA.fieldNames()
