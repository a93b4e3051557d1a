"""The audit's pure parts (ferry.audit): verdicts, differences, notes, the summary and the exit
code from plain plan rows; which spans are read; records counted between offsets on tiny
inline DataFrames; the table's contract columns."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from ferry.audit import AUDIT_SCHEMA, audit_rows, exit_code, summarize, summary_lines
from ferry.audit.table import table_rows
from ferry.kafka.source import OffsetRange
from ferry.migrate.difference import (
    SPANS_SCHEMA,
    count_sorted,
    plan_counts,
    read_ranges_of,
    with_record_counts,
)
from ferry.session import local_df
from ferry.status import RESOLVED_PARTITION_STATUSES, AuditVerdict, GroupState, PartitionStatus

BOUNDS = {("t", 0): (0, 1000), ("t", 1): (100, 200)}


def plan(group="g", partition=0, committed=None, exact=None, status="MATCHED", note=None) -> dict:
    resolved = PartitionStatus(status).is_resolved
    return {
        "group": group,
        "src_topic": "s",
        "dst_topic": "t",
        "dst_partition": partition,
        "previous_offset": committed,
        "destination_offset": exact if resolved else None,
        "status": status,
        "is_resolved": resolved,
        "note": note,
    }


def compare(plans, counts=None, state="EMPTY", members=0) -> list[dict]:
    groups = {p["group"] for p in plans}
    return audit_rows(
        plans,
        counts or {},
        dict.fromkeys(groups, state),
        dict.fromkeys(groups, members),
        dict.fromkeys(groups, "STABLE"),
        BOUNDS,
    ).rows()


def test_equal_offsets_are_exact_and_read_nothing():
    [row] = compare([plan(committed=40, exact=40)])
    assert row == {
        "group": "g",
        "topic": "t",
        "partition": 0,
        "committed_offset": 40,
        "exact_offset": 40,
        "difference": 0,
        "verdict": AuditVerdict.EXACT,
        "is_live": False,
        "group_state": "EMPTY",
        "note": None,
        "is_counted": True,
        "members": 0,
        "source_state": "STABLE",
    }


def test_behind_counts_records_delivered_again_not_offsets():
    # 10 offsets apart, 7 records between them (3 transaction markers)
    [row] = compare([plan(committed=30, exact=40)], {("t", 0, 30, 40): (7, True)})
    assert (row["verdict"], row["difference"], row["note"]) == (AuditVerdict.BEHIND, -7, None)


def test_ahead_of_a_stopped_group_is_records_skipped():
    [row] = compare([plan(committed=45, exact=40)], {("t", 0, 40, 45): (5, True)})
    assert (row["verdict"], row["difference"], row["is_live"]) == (AuditVerdict.AHEAD, 5, False)
    assert row["note"] is None


def test_ahead_of_a_live_group_is_expected():
    [row] = compare([plan(committed=45, exact=40)], {("t", 0, 40, 45): (5, True)}, state="STABLE")
    assert (row["verdict"], row["difference"], row["is_live"]) == (AuditVerdict.AHEAD, 5, True)
    assert row["group_state"] == "STABLE" and "live on the destination" in row["note"]
    # members reported make a group live whatever its state says
    [row] = compare([plan(committed=45, exact=40)], {("t", 0, 40, 45): (5, True)}, members=2)
    assert row["is_live"] and row["members"] == 2


def test_offsets_holding_no_record_between_are_exact():
    [row] = compare([plan(committed=42, exact=40)], {("t", 0, 40, 42): (0, True)})
    assert (row["verdict"], row["difference"]) == (AuditVerdict.EXACT, 0)
    assert "40..41 hold no record" in row["note"]


def test_no_commit_has_no_difference():
    [row] = compare([plan(committed=None, exact=40)])
    assert (row["verdict"], row["difference"], row["is_counted"]) == (
        AuditVerdict.NO_COMMIT,
        None,
        None,
    )
    assert row["exact_offset"] == 40 and "auto.offset.reset" in row["note"]


def test_unresolved_rows_carry_the_plan_status_and_note():
    pending, ambiguous = compare(
        [
            plan(committed=40, status="PENDING"),
            plan(partition=1, committed=150, status="AMBIGUOUS", note="tie at 3 candidates"),
        ]
    )
    assert pending["verdict"] == AuditVerdict.PENDING and pending["exact_offset"] is None
    assert pending["difference"] is None and "run again" in pending["note"]
    assert pending["committed_offset"] == 40
    assert (ambiguous["verdict"], ambiguous["note"]) == (
        AuditVerdict.AMBIGUOUS,
        "tie at 3 candidates",
    )


def test_uncounted_spans_report_the_offset_span_as_a_bound():
    [row] = compare([plan(committed=900, exact=40)], {("t", 0, 40, 900): (860, False)})
    assert (row["verdict"], row["difference"], row["is_counted"]) == (
        AuditVerdict.AHEAD,
        860,
        False,
    )
    assert "upper bound" in row["note"]


def test_commits_outside_the_log_are_noted():
    [past] = compare(
        [plan(partition=1, committed=250, exact=150)], {("t", 1, 150, 250): (50, True)}
    )
    assert "past the log end 200" in past["note"]
    [before] = compare(
        [plan(partition=1, committed=20, exact=150)], {("t", 1, 20, 150): (50, True)}
    )
    assert before["verdict"] == AuditVerdict.BEHIND and "before the log start 100" in before["note"]


def test_a_commit_past_the_log_end_is_not_exact_even_with_nothing_between():
    # exact is the log end (the group consumed everything); the commit lies past it
    [row] = compare([plan(partition=1, committed=205, exact=200, status="EMPTY")],
                    {("t", 1, 200, 205): (0, True)})  # fmt: skip
    assert (row["verdict"], row["difference"]) == (AuditVerdict.AHEAD, 0)
    assert "past the log end 200" in row["note"] and "hold no record" not in row["note"]


def test_resolved_plan_notes_are_kept():
    [row] = compare(
        [plan(committed=40, exact=40, status="RECONCILED", note="2 duplicates, 0 unplaced")]
    )
    assert (row["verdict"], row["note"]) == (AuditVerdict.EXACT, "2 duplicates, 0 unplaced")


def rows_of(*verdicts: tuple[str, bool]) -> list[dict]:
    return [{"verdict": AuditVerdict(v), "is_live": live} for v, live in verdicts]


@pytest.mark.parametrize(
    ("verdicts", "code"),
    [
        ([], 0),
        ([("EXACT", False), ("BEHIND", False), ("NO_COMMIT", False)], 0),
        ([("AHEAD", True), ("EXACT", True)], 0),  # a live group moved on: expected
        ([("AHEAD", False)], 1),
        ([("PENDING", False), ("BEHIND", False)], 75),
        ([("PENDING", False), ("AHEAD", True)], 75),
        ([("PENDING", False), ("AMBIGUOUS", False)], 1),
        ([("PENDING", False), ("AHEAD", False)], 1),
        ([("BAND_TOO_WIDE", False)], 1),
    ],
)
def test_exit_code(verdicts, code):
    assert exit_code(rows_of(*verdicts)) == code


def test_summary_per_group_and_total():
    rows = compare(
        [
            plan("a", 0, committed=30, exact=40),  # behind 7
            plan("a", 1, committed=160, exact=150),  # ahead 10
            plan("b", 0, committed=40, exact=40),
            plan("b", 1, committed=None, exact=150),
        ],
        {("t", 0, 30, 40): (7, True), ("t", 1, 150, 160): (10, True)},
    )
    live = compare([plan("c", 0, committed=500, exact=40)], {("t", 0, 40, 500): (460, False)},
                   state="STABLE")  # fmt: skip
    pending = compare([plan("d", 0, committed=1, status="PENDING")])
    summary = summarize(rows + live + pending, ["a", "b", "c", "d", "e"])
    by_group = {s["group"]: s for s in summary["groups"]}
    assert by_group["a"] == {
        "group": "a",
        "group_state": "EMPTY",
        "is_live": False,
        "members": 0,
        "partitions": 2,
        "exact": 0,
        "behind": 1,
        "ahead": 1,
        "no_commit": 0,
        "unresolved": 0,
        "pending": 0,
        "uncounted": 0,
        "records_delivered_again": 7,
        "records_skipped": 10,
        "records_ahead_live": 0,
        "exit_code": 1,
    }
    assert by_group["b"]["exact"] == 1 and by_group["b"]["no_commit"] == 1
    assert by_group["b"]["exit_code"] == 0
    assert by_group["c"]["records_skipped"] == 0 and by_group["c"]["records_ahead_live"] == 460
    assert by_group["c"]["uncounted"] == 1 and by_group["c"]["exit_code"] == 0
    assert by_group["d"]["exit_code"] == 75 and by_group["d"]["pending"] == 1
    assert by_group["e"]["partitions"] == 0 and by_group["e"]["group_state"] is None
    total = summary["total"]
    assert total["groups"] == 5 and total["live_groups"] == 1 and total["partitions"] == 6
    assert (total["exact"], total["behind"], total["ahead"], total["no_commit"]) == (1, 1, 2, 1)
    assert (total["unresolved"], total["pending"]) == (1, 1)
    assert total["records_delivered_again"] == 7 and total["records_skipped"] == 10
    assert total["records_ahead_live"] == 460 and total["exit_code"] == 1
    lines = summary_lines(summary)
    assert lines[0] == (
        "a: EMPTY: 2 partitions, 0 exact, 1 behind (7 records delivered again), "
        "1 ahead (10 records skipped)"
    )
    assert "460 records read on the destination by its live consumers: expected" in lines[2]
    assert lines[4] == "e: no committed offsets on the selected topics"
    assert lines[-1].startswith("audited 5 groups (1 live on the destination), 6 partitions")
    assert lines[-1].endswith("; exit 1")


def test_every_unresolved_plan_status_is_a_verdict_and_resolved_ones_are_not():
    for status in PartitionStatus:
        if status in RESOLVED_PARTITION_STATUSES:
            with pytest.raises(ValueError):
                AuditVerdict.unresolved(status)
        else:
            assert AuditVerdict.unresolved(status).is_unresolved
    assert not any(AuditVerdict(v).is_unresolved for v in ("EXACT", "BEHIND", "AHEAD", "NO_COMMIT"))


def test_spans_are_clamped_to_the_log_and_wide_ones_are_not_read():
    to_read, answered = plan_counts(
        [
            ("t", 0, 10, 20),
            ("t", 1, 20, 150),  # before the log start: read from 100
            ("t", 1, 150, 400),  # past the log end: read to 200
            ("t", 1, 0, 90),  # wholly before the log: nothing to count
            ("t", 0, 0, 1000),  # wider than the bound: the offset span
        ],
        BOUNDS,
        max_offsets=500,
    )
    assert to_read == {
        ("t", 0, 10, 20): ("t", 0, 10, 20),
        ("t", 1, 20, 150): ("t", 1, 100, 150),
        ("t", 1, 150, 400): ("t", 1, 150, 200),
    }
    assert answered == {("t", 1, 0, 90): (0, True), ("t", 0, 0, 1000): (1000, False)}
    assert plan_counts([("t", 0, 10, 20)], BOUNDS, max_offsets=0) == (
        {},
        {("t", 0, 10, 20): (10, False)},
    )
    assert read_ranges_of(to_read.values()) == [
        OffsetRange("t", 0, 10, 20),
        OffsetRange("t", 1, 100, 200),  # adjacent spans read as one range
    ]


def test_records_are_counted_between_offsets_not_offsets_subtracted(spark):
    from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

    records_schema = StructType(
        [
            StructField("topic", StringType(), False),
            StructField("partition", IntegerType(), False),
            StructField("offset", LongType(), False),
        ]
    )
    # t[0]: records at 0..9 except 3 and 7 (markers); t[1]: 5, 6, 9
    present = [("t", 0, o) for o in range(10) if o not in (3, 7)] + [("t", 1, o) for o in (5, 6, 9)]
    spans = [("t", 0, 0, 10), ("t", 0, 2, 4), ("t", 0, 3, 4), ("t", 0, 4, 8), ("t", 1, 6, 9)]
    counted = with_record_counts(
        local_df(spark, spans, SPANS_SCHEMA), local_df(spark, present, records_schema)
    ).collect()
    expected = {
        ("t", 0, 0, 10): 8,
        ("t", 0, 2, 4): 1,  # 2 (3 is a marker)
        ("t", 0, 3, 4): 0,  # a marker alone
        ("t", 0, 4, 8): 3,  # 4, 5, 6
        ("t", 1, 6, 9): 1,  # 6; 9 is the end, not in
    }
    assert {(r.topic, r.partition, r.lo, r.hi): r.records for r in counted} == expected
    # the driver's count of the same read, records in any order
    assert count_sorted(spans, list(reversed(present))) == expected


def test_table_rows_keep_the_contract_columns_first():
    assert AUDIT_SCHEMA.fieldNames()[:12] == [
        "run_id",
        "audited_at",
        "group",
        "topic",
        "partition",
        "committed_offset",
        "exact_offset",
        "difference",
        "verdict",
        "is_live",
        "group_state",
        "note",
    ]
    at = datetime(2026, 11, 1, tzinfo=timezone.utc)
    [row] = table_rows(compare([plan(committed=40, exact=40)], state=GroupState.EMPTY), "r1", at)
    assert row["run_id"] == "r1" and row["audited_at"] == at
    assert row["verdict"] == "EXACT" and type(row["verdict"]) is str
    assert set(row) == set(AUDIT_SCHEMA.fieldNames())


def test_the_table_is_appended_and_a_failure_names_it(spark, tmp_path):
    from deltalake import DeltaTable

    from ferry.audit import append
    from ferry.errors import FerryError

    at = datetime(2026, 11, 1, tzinfo=timezone.utc)
    rows = compare([plan(committed=30, exact=40)], {("t", 0, 30, 40): (7, True)})
    path = tmp_path / "audit"
    append(spark, str(path), rows, "r1", at)
    append(spark, str(path), rows, "r2", at)
    table = DeltaTable(str(path)).to_pyarrow_table()
    assert table.column_names == AUDIT_SCHEMA.fieldNames()
    assert sorted(table.column("run_id").to_pylist()) == ["r1", "r2"]
    assert table.column("difference").to_pylist() == [-7, -7]
    (tmp_path / "file").write_text("not a directory")
    with pytest.raises(FerryError, match=r"^cannot append to the audit table .*file/audit: "):
        append(spark, str(tmp_path / "file" / "audit"), rows, "r3", at)


def test_rows_shared_by_groups_give_the_same_json_summary_and_exit_as_one_dict_each():
    """`audit_rows` keeps one row per distinct (states, plan row) for all the groups that
    share it: its JSON texts, summary and exit code are those of a dict per row."""
    from ferry.audit import ROW_COLUMNS
    from ferry.output import json_row

    plans = [
        plan(group=g, partition=p, committed=c, exact=40)
        for g in ("a", "b", "c\"quoted")
        for p, c in ((0, 40), (1, 150))
    ] + [plan(group="d", committed=45, exact=40), plan(group="e", status="PENDING")]
    states = {"a": "EMPTY", "b": "EMPTY", 'c"quoted': "STABLE", "d": "EMPTY", "e": "EMPTY"}
    args = ({(("t", 0, 40, 45)): (3, True), ("t", 1, 40, 150): (9, True)}, states,
            dict.fromkeys(states, 0), dict.fromkeys(states, "EMPTY"), BOUNDS)  # fmt: skip
    shared = audit_rows(plans, *args)
    rows = shared.rows()
    assert len({id(r) for _g, r in shared.pairs}) < len(shared.pairs)  # shared for real
    assert len({id(r) for r in rows}) == len(rows)
    assert list(shared.json_texts()) == [json_row(r, ROW_COLUMNS) for r in rows]
    assert summarize(shared, states) == summarize(rows, states)
    assert summarize(shared)["total"]["exit_code"] == exit_code(rows) == 1  # AHEAD, not live


def test_a_plan_is_audited_from_its_shared_positions_as_its_rows_are():
    """`audit_rows(plan)` reads exact rows from the plan's shared positions (no row built per
    group partition): the same rows, in the same order, as auditing `plan.rows`."""
    from ferry.migrate.model import Plan

    def position(partition, offset, exact, status="MATCHED"):
        resolved = PartitionStatus(status).is_resolved
        return {"src_topic": "s", "src_partition": partition, "committed_offset": offset,
                "dst_topic": "t", "dst_partition": partition,
                "destination_offset": exact if resolved else None, "status": status,
                "is_resolved": resolved}  # fmt: skip

    positions = {("s", 1, 60): position(1, 60, 150), ("s", 0, 50): position(0, 50, 40),
                 ("s", 0, 9): position(0, 9, None, "PENDING")}  # fmt: skip
    reconciled = {**plan(group="c", partition=1, committed=150, exact=150), "src_partition": None}
    shared_plan = Plan(
        positions,
        exact={"a": {("s", 1): 60, ("s", 0): 50}, "b": {("s", 0): 50}, "c": {("s", 0): 9}},
        previous={"a": {("t", 0): 45, ("t", 1): 150}, "b": {("t", 0): 40}, "c": {("t", 0): 3}},
        extra={"c": [reconciled]},
    )
    states = dict.fromkeys("abc", "EMPTY")
    args = ({("t", 0, 40, 45): (5, True)}, states, dict.fromkeys(states, 0),
            states, BOUNDS)  # fmt: skip
    from_plan = audit_rows(shared_plan, *args).rows()
    assert from_plan == audit_rows(list(shared_plan.rows), *args).rows()
    assert [(r["group"], r["partition"], r["verdict"]) for r in from_plan] == [
        ("a", 0, "AHEAD"), ("a", 1, "EXACT"), ("b", 0, "EXACT"), ("c", 0, "PENDING"),
        ("c", 1, "EXACT"),
    ]  # fmt: skip
