"""The column-wise ledger rows and the pre-encoded JSON output of `migrate` against the
per-row paths they replace (`load.ledger_rows`, `output.emit_rows`): the same rows, the same
text, for a plan mixing shared positions, previous offsets, an ALREADY_MIGRATED group with a
counted difference, a refused group and a row made outside matching."""

from __future__ import annotations

import io
import json
from datetime import datetime, timezone

import pytest

from ferry.kafka.cluster import Cluster
from ferry.migrate import ledger_table
from ferry.migrate.decision import decide
from ferry.migrate.load import (
    OUTPUT_COLUMNS,
    _message,
    group_ledger_rows,
    ledger_rows,
    output_json,
    output_rows,
)
from ferry.migrate.matching import plan_row
from ferry.migrate.model import Plan, PositionRows, exact_indexes
from ferry.migrate.spans import row_span
from ferry.output import emit_json_lines, emit_rows
from ferry.status import GroupStatus
from ferry.write import commit

pa = pytest.importorskip("pyarrow")


def _position(topic: str, partition: int, offset: int, status: str, dst: int | None) -> dict:
    return {
        "src_topic": topic,
        "src_partition": partition,
        "committed_offset": offset,
        "dst_topic": f"{topic}.copy",
        "dst_partition": partition,
        "anchor_kind": "record",
        "anchor_offset": offset - 1,
        "anchor_timestamp_ms": 1_700_000_000_123 + offset,
        "anchor_sha256": bytearray(b"\x01\x02" * 16),
        "candidate_count": 1,
        "match_before": 3,
        "match_after": 2,
        "destination_offset": dst,
        "status": status,
        "is_resolved": status != "PENDING",
    }


def _plan(with_table: bool | str = False) -> Plan:
    """`with_table`: matching's table instead of dicts; "ahead": with the positions' order
    and each group's positions known before the table came (`build_plan`)."""
    positions = {
        ("a", 0, 5): _position("a", 0, 5, "MATCHED", 9),
        ("a", 1, 7): _position("a", 1, 7, "MATCHED", 11),
        ("b", 0, 3): _position("b", 0, 3, "PENDING", None),
    }
    refused = plan_row(
        group="r", src_topic="a", src_partition=0, committed_offset=5, dst_topic="a.copy",
        dst_partition=0, status="REFUSED", previous_offset=None, note="source group is Stable",
    )  # fmt: skip
    # as matching hands them over (Spark's types: partitions are ints of 32 bits)
    table = pa.Table.from_pylist(list(positions.values())).cast(
        pa.schema(
            [
                pa.field(f.name, pa.int32()) if f.name.endswith("partition") else f
                for f in pa.Table.from_pylist(list(positions.values())).schema
            ]
        )
    )
    exact = {
        "g": {("a", 1): 7, ("a", 0): 5},
        "h": {("a", 0): 5},
        "p": {("a", 0): 5, ("b", 0): 3},
        "done": {("a", 0): 5},
    }
    ahead = with_table == "ahead"
    return Plan(
        PositionRows(table, list(positions) if ahead else None) if with_table else positions,
        exact=exact,
        previous={"h": {("a.copy", 0): 4}, "done": {("a.copy", 0): 12}},
        extra={"r": [refused]},
        group_notes={"r": (GroupStatus.REFUSED, "source group is Stable")},
        indexes=exact_indexes(exact, list(positions)) if ahead else {},
    )


TABLES = pytest.mark.parametrize(
    "with_table", [False, True, "ahead"], ids=["dicts", "matching's table", "known ahead"]
)


def test_each_groups_positions_worked_out_ahead_are_those_worked_out_when_asked():
    ahead, asked = _plan("ahead"), _plan(True)
    assert ahead.position_order == asked.position_order
    assert set(ahead.indexes) == {"g", "h", "p", "done"} and not asked.indexes
    for group in ahead.indexes:
        assert ahead.indexes[group] == asked.exact_at(group)
    assert ahead.exact_at("g") == [0, 1]  # partition order, whatever the commits' order
    table, order = ahead.position_table, ahead.position_order
    for wrong in (order[::-1], order[:-1], [(t, p, o + 1) for t, p, o in order]):
        with pytest.raises(ValueError, match="are not the plan's"):
            PositionRows(table, wrong)


@TABLES
def test_ledger_tables_hold_the_rows_ledger_rows_gives(with_table):
    plan = _plan(with_table)
    decisions = decide(plan, allow_rewind=False)
    assert decisions["done"].status == GroupStatus.ALREADY_MIGRATED
    dst = Cluster("destination", {"bootstrap.servers": "dst:9092"})
    tables = list(
        ledger_table.plan_tables(
            plan,
            plan.groups(),
            lambda g: _message(decisions[g]),
            "dst:9092",
            3,  # small batches: groups are never split, a table per batch
            lambda g: group_ledger_rows(plan, g, decisions[g], dst),
        )
    )
    assert len(tables) > 1
    got = [r for t in tables for r in t.to_pylist()]
    want = list(ledger_rows(plan, decisions, dst))
    assert want[0]["anchor_timestamp"] == datetime.fromtimestamp(1_700_000_000.128, timezone.utc)

    def key(r: dict) -> tuple:
        return r["group"], r["source_topic"], r["source_partition"]

    def plain(r: dict) -> dict:
        return {c: bytes(v) if isinstance(v, bytearray) else v for c, v in r.items()}

    assert sorted((plain(r) for r in want), key=key) == sorted(
        ({c: r[c] for c in want[0]} for r in got), key=key
    )


@TABLES
@pytest.mark.parametrize("is_dry_run", [False, True])
def test_output_json_is_the_text_emit_rows_writes(monkeypatch, is_dry_run, with_table):
    plan = _plan(with_table)
    decisions = decide(plan, allow_rewind=False)
    counts = None  # a dry run counts the ALREADY_MIGRATED group's difference on its span
    if is_dry_run:
        counts = {row_span(r): (2, True) for r in plan.rows_of("done")}
    texts = []
    for emit in (
        lambda: emit_rows(lambda: output_rows(plan, decisions, counts), OUTPUT_COLUMNS, "json"),
        lambda: emit_json_lines(output_json(plan, decisions, counts)),
    ):
        out = io.StringIO()
        monkeypatch.setattr("sys.stdout", out)
        emit()
        texts.append(out.getvalue())
    assert texts[0] == texts[1]
    rows = json.loads(texts[1])
    assert [r["group"] for r in rows] == ["done", "g", "g", "h", "p", "p", "r"]
    assert rows[3]["previous_offset"] == 4 and rows[1]["src_partition"] == 0
    if counts is not None:
        assert rows[0]["difference"] == 2


def test_outcome_table_is_outcome_rows_column_wise():
    plan = _plan()
    decisions = decide(plan, allow_rewind=False)
    dst = Cluster("destination", {"bootstrap.servers": "dst:9092"})
    groups = ["g", "h"]
    done = {
        "g": commit.WriteOutcome("g", GroupStatus.COMMITTED, True, None, {("a.copy", 1): 2}),
        "h": commit.WriteOutcome("h", GroupStatus.FAILED, False, "broker said no", {}),
    }
    (table,) = ledger_table.plan_tables(
        plan, groups, lambda g: _message(decisions[g]), "dst:9092", 100, lambda g: []
    )
    writes = [
        commit.GroupWrite(g, {}, group_ledger_rows(plan, g, decisions[g], dst)) for g in groups
    ]
    want = [r for w in writes for r in commit._outcome_rows(w, done[w.group])]
    got = commit.outcome_table(table, done).to_pylist()
    assert [r["previous_offset"] for r in got] == [None, 2, None]  # g: a[0] then a[1], sorted
    for name in ("group", "topic", "partition", "previous_offset", "status", "is_committed"):
        assert [r[name] for r in got] == [r[name] for r in want], name
    assert [r["message"] for r in got] == [r["message"] for r in want]


def test_json_fields_array_is_json_fields_of_each_row():
    from ferry.output import json_fields, json_fields_array

    def json_fields_each(rows: list[dict], columns: list[str]) -> list[str]:
        return json_fields_array(rows, columns).to_pylist()

    rows = [
        {"t": 'a "quoted"\\ topic', "n": 0, "m": None, "s": "MATCHED", "big": 2**62},
        {"t": "ünïcode", "n": -7, "m": 12, "s": "MATCHED"},  # "big" missing: null
        {"t": "a", "n": 3, "m": None, "s": None, "big": 1},
    ]
    columns = ["t", "n", "m", "s", "big", "absent"]
    assert json_fields_each(rows, columns) == [json_fields(r, columns) for r in rows]
    assert json_fields_each(rows, ["n"]) == ['"n": 0', '"n": -7', '"n": 3']
    # anything but whole numbers and strings: every row encoded as it was
    for odd in (True, 1.5, b"\x01", 2**64, ["x"]):
        mixed = [{**rows[0], "n": odd}, rows[1]]
        assert json_fields_each(mixed, columns) == [json_fields(r, columns) for r in mixed]
    assert json_fields_each([], columns) == []
    assert json_fields_each(rows, []) == ["", "", ""]


def test_a_plan_on_matching_s_table_decides_as_one_on_dicts():
    """`PositionRows` (rows made when read, targets read column-wise) against plain dicts:
    the same decisions, the same rows, and a row's dict made once."""
    on_dicts, on_table = _plan(), _plan(with_table=True)
    want, got = decide(on_dicts, allow_rewind=False), decide(on_table, allow_rewind=False)
    assert {g: (d.status, d.message, d.offsets) for g, d in got.items()} == {
        g: (d.status, d.message, d.offsets) for g, d in want.items()
    }
    assert got["g"].offsets == {("a.copy", 0): 9, ("a.copy", 1): 11}
    assert got["p"].status == GroupStatus.PENDING
    for group in on_dicts.groups():
        assert on_table.rows_of(group) == on_dicts.rows_of(group)
    assert on_table.positions[("a", 0, 5)] is on_table.positions[("a", 0, 5)]
    assert dict(on_table.positions) == on_dicts.positions
