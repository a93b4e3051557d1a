"""The three output formats of `ferry.cli.render`: JSON parses to the rows (bytes as hex,
times as ISO-8601, missing columns as null), CSV has the header, the table aligns."""

from __future__ import annotations

import csv
import io
import json
import sys
from datetime import datetime, timezone

import pytest

from ferry.output import render

COLUMNS = ["group", "partition", "offset", "key", "time"]
ROWS = [
    {
        "group": "g1",
        "partition": 0,
        "offset": 12,
        "key": b"\x01\xff",
        "time": datetime(2026, 11, 23, 1, 2, 3, tzinfo=timezone.utc),
        "extra": "dropped",
    },
    {"group": 'g"2', "partition": 1, "offset": None},
]
EXPECTED = [
    {
        "group": "g1",
        "partition": 0,
        "offset": 12,
        "key": "01ff",
        "time": "2026-11-23T01:02:03+00:00",
    },
    {"group": 'g"2', "partition": 1, "offset": None, "key": None, "time": None},
]


def test_json_parses_to_the_rows_one_object_per_line() -> None:
    out = render(ROWS, COLUMNS, "json")
    assert json.loads(out) == EXPECTED
    lines = out.splitlines()
    assert lines[0] == "[" and lines[-1] == "]" and len(lines) == len(ROWS) + 2
    assert [list(json.loads(line.rstrip(","))) for line in lines[1:-1]] == [COLUMNS, COLUMNS]


def test_json_of_no_rows_is_an_empty_array() -> None:
    assert json.loads(render([], COLUMNS, "json")) == []


def test_nested_values_are_plain() -> None:
    rows = [{"group": "g", "partition": [b"\x00", {"t": datetime(2026, 1, 1)}]}]
    assert json.loads(render(rows, ["group", "partition"], "json")) == [
        {"group": "g", "partition": ["00", {"t": "2026-01-01T00:00:00"}]}
    ]


def test_csv_has_a_header_and_every_row() -> None:
    parsed = list(csv.DictReader(io.StringIO(render(ROWS, COLUMNS, "csv"))))
    assert [r["group"] for r in parsed] == ["g1", 'g"2']
    assert parsed[0]["key"] == "01ff" and parsed[1]["offset"] == ""


def test_table_aligns_columns_and_shows_missing_as_dash() -> None:
    lines = render(ROWS, COLUMNS, "table").splitlines()
    assert lines[0].split() == [c.upper() for c in COLUMNS]
    assert lines[2].split() == ['g"2', "1", "-", "-", "-"]
    assert lines[1].index("12") == lines[0].index("OFFSET")


@pytest.mark.parametrize("in_memory", [True, False], ids=["in memory", "past it, on disk"])
def test_held_output_is_written_once_ready_and_never_when_it_fails(monkeypatch, in_memory):
    """`stdout_held_until`: the text appears only after `ready()` returns, whole and in order;
    when `ready()` raises, nothing appears."""
    from ferry import output

    if not in_memory:
        monkeypatch.setattr(output, "HELD_IN_MEMORY", 10)
    out, seen = io.StringIO(), []
    monkeypatch.setattr(sys, "stdout", out)
    text = "".join(f"row {i}: é\n" for i in range(1000))
    with output.stdout_held_until(lambda: seen.append(out.getvalue())):
        for line in text.splitlines(keepends=True):
            print(line, end="")
    assert seen == [""] and out.getvalue() == text

    def fails() -> None:
        raise RuntimeError("not on record")

    out.seek(0)
    out.truncate()
    with pytest.raises(RuntimeError, match="not on record"):
        with output.stdout_held_until(fails):
            print("a plan")
    assert out.getvalue() == "" and sys.stdout is out
    with output.stdout_held_until(None):  # nothing to wait for: written as it goes
        print("shown")
        assert out.getvalue() == "shown\n"
