"""Streamed output (`emit_rows`, `emit_json_document`) writes what the buffered `emit` and
`emit_json` would: same table, CSV and JSON."""

from __future__ import annotations

import contextlib
import io
import json

import pytest

from ferry import cli

ROWS = [
    {"group": "g", "offset": 1, "note": None, "is_ok": True, "sha": b"\x01\xff"},
    {"group": "a-much-longer-group", "offset": 22, "note": "x, y", "is_ok": False, "sha": None},
]
COLUMNS = ["group", "offset", "note", "is_ok", "sha"]


def _out(fn, *args) -> str:  # noqa: ANN001
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        fn(*args)
    return buf.getvalue()


@pytest.mark.parametrize("fmt", ["table", "csv", "json"])
@pytest.mark.parametrize("rows", [[], ROWS], ids=["empty", "rows"])
def test_streamed_rows_are_the_buffered_text(fmt, rows):
    calls = []

    def make_rows():
        calls.append(1)
        return iter(rows)

    assert _out(cli.emit_rows, make_rows, COLUMNS, fmt) == _out(cli.emit, rows, COLUMNS, fmt)
    assert len(calls) == (2 if fmt == "table" else 1)  # a table needs its widths first


@pytest.mark.parametrize("rows", [[], ROWS], ids=["empty", "rows"])
def test_json_document_parses_as_the_buffered_one(rows):
    head = {"run_id": "r", "total": {"groups": 2, "nested": [1, 2]}}
    lists = {"groups": [{"group": "g"}], "rows": rows}
    streamed = _out(cli.emit_json_document, head, {k: iter(v) for k, v in lists.items()})
    assert json.loads(streamed) == json.loads(_out(cli.emit_json, {**head, **lists}))
    assert streamed.count("\n") >= len(rows)  # an item per line, not one long line


def test_json_rows_written_in_chunks_are_one_array():
    rows = [{"group": f"g{i}", "offset": i} for i in range(2 * 2000 + 1)]  # across chunk ends
    text = _out(cli.emit_rows, lambda: iter(rows), ["group", "offset"], "json")
    assert text == _out(cli.emit, rows, ["group", "offset"], "json")


def test_json_document_written_in_chunks_keeps_an_item_per_line():
    rows = [{"group": f"g{i}", "offset": i} for i in range(2 * 2000 + 1)]  # across chunk ends
    text = _out(cli.emit_json_document, {"run_id": "r"}, {"rows": iter(rows), "none": iter([])})
    assert json.loads(text) == {"run_id": "r", "rows": rows, "none": []}
    assert text.count('{"group"') == len(rows) == text.count("\n    {")
