"""Reading the ledger for a rollback: the run's writes, and other runs' writes as distinct rows.

Every run appends its plan (10,000 groups: 320,000 rows a run, dry runs included); a rollback
reads intents, outcomes and, from tables older than phases, committed rows: its run's, and
other executing runs' on the same cluster, each distinct row once. A table that gained
`phase` later is read through both layouts (deltalake path: the test session has no Delta
jars; tests/integration/test_delta_interop.py reads the same through delta-spark)."""

from __future__ import annotations

from datetime import datetime, timezone

from pyspark.sql.types import StructType

from ferry import delta
from ferry.write import ledger

T = datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)
HERE, ELSEWHERE = "dst:9092", "other:9092"


def _columns(schema: StructType, rows: list[dict]) -> dict[str, list]:
    return {f.name: [r.get(f.name) for r in rows] for f in schema.fields}


def _row(run_id: str, group: str, phase: str | None, **values: object) -> dict:
    return {
        "run_id": run_id,
        "run_time": T,
        "action": "migrate",
        "is_executed": True,
        "cluster": HERE,
        "group": group,
        "partition": 0,
        "is_committed": False,
        "phase": phase,
        **values,
    }


def _ledger(spark, tmp_path) -> str:  # noqa: ANN001
    path = str(tmp_path / "ledger")
    # a table from before phases: its committed rows are its writes
    old = StructType([f for f in ledger.LEDGER_SCHEMA.fields if f.name != "phase"])
    old_rows = [_row("old", "g0", None, is_committed=True), _row("old", "g1", None)]
    delta.append_columns(spark, _columns(old, old_rows), old, path)
    rows = [
        _row("dry", "g2", ledger.PHASE_PLAN, is_executed=False),
        _row("run", "g3", ledger.PHASE_PLAN),
        _row("run", "g3", ledger.PHASE_INTENT),
        _row("run", "g3", ledger.PHASE_INTENT, partition=1),
        _row("run", "g3", ledger.PHASE_OUTCOME, is_committed=True),
        _row("run", "g3", ledger.PHASE_OUTCOME, is_committed=True, partition=1),
        _row("run", "g4", ledger.PHASE_OUTCOME),
        _row("away", "g3", ledger.PHASE_INTENT, cluster=ELSEWHERE),
        _row("undo", "g3", ledger.PHASE_INTENT, action="rollback", rollback_of="run"),
    ]
    schema = ledger.LEDGER_SCHEMA
    delta.append_columns(spark, _columns(schema, rows), schema, path)
    return path


def test_a_run_s_writes_are_its_intents_outcomes_and_older_committed_rows(spark, tmp_path):
    path = _ledger(spark, tmp_path)
    got = ledger.read_run_writes(spark, path, "run")
    assert got.columns == ledger.RUN_WRITE_COLUMNS
    assert sorted((r.group, r.partition, r.phase) for r in got.collect()) == [
        ("g3", 0, "intent"),
        ("g3", 0, "outcome"),
        ("g3", 1, "intent"),
        ("g3", 1, "outcome"),
        ("g4", 0, "outcome"),
    ]
    old = ledger.read_run_writes(spark, path, "old").collect()
    assert [(r.group, r.phase, r.is_committed) for r in old] == [("g0", None, True)]
    assert ledger.read(spark, path).count() == 11


def test_other_runs_writes_on_the_cluster_come_once_per_distinct_row(spark, tmp_path):
    path = _ledger(spark, tmp_path)
    got = ledger.read_other_writes(spark, path, "run", HERE)
    assert got.columns == ledger.OTHER_WRITE_COLUMNS
    # g3's two partitions of "run" are one row each phase; "dry" (a plan), "away" (another
    # cluster) and "run" itself are not there
    assert sorted((r.run_id, r.group, r.phase, r.rollback_of) for r in got.collect()) == [
        ("old", "g0", None, None),
        ("undo", "g3", "intent", "run"),
    ]
    of_undo = ledger.read_other_writes(spark, path, "undo", HERE).collect()
    assert sorted((r.run_id, r.group, r.phase) for r in of_undo) == [
        ("old", "g0", None),
        ("run", "g3", "intent"),
        ("run", "g3", "outcome"),
        ("run", "g4", "outcome"),
    ]


def test_a_ledger_without_writes_reads_empty_with_its_columns(spark, tmp_path):
    path = str(tmp_path / "ledger")
    rows = [_row("dry", "g", ledger.PHASE_PLAN, is_executed=False)]
    schema = ledger.LEDGER_SCHEMA
    delta.append_columns(spark, _columns(schema, rows), schema, path)
    for df in (
        ledger.read_run_writes(spark, path, "dry"),
        ledger.read_other_writes(spark, path, "x", HERE),
    ):
        assert df.count() == 0
        assert len(df.columns) > 5


def test_a_run_s_writes_come_whole_when_a_file_between_them_holds_none(spark, tmp_path):
    """A file between a run's intents and its outcomes that the scan must open (its run ids
    span this one's: two runs' rows, as after an OPTIMIZE) and that holds none of its rows
    gives an empty batch; PySpark stopped reading a table at an empty batch, and the outcomes
    after it were lost to the rollback (`session.arrow_df`)."""
    path = str(tmp_path / "ledger")
    schema = ledger.LEDGER_SCHEMA
    for rows in (
        [_row("run", "g", ledger.PHASE_INTENT)],
        [_row("alpha", "g", ledger.PHASE_INTENT), _row("zulu", "g", ledger.PHASE_INTENT)],
        [_row("run", "g", ledger.PHASE_OUTCOME, is_committed=True)],
    ):
        delta.append_columns(spark, _columns(schema, rows), schema, path)
    got = ledger.read_run_writes(spark, path, "run").collect()
    assert sorted(r.phase for r in got) == ["intent", "outcome"]
