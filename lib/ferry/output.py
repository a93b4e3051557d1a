"""Rows out on stdout: an aligned table, a JSON array or CSV with a header (`render`, `emit`,
and `emit_rows` for output too large to hold), and JSON documents (`emit_json`,
`emit_json_document`); bytes as hex, times as ISO-8601. A leaf module, so library code that
prints rows does not import the CLI."""

from __future__ import annotations

import contextlib
import csv
import io
import json
import operator
import shutil
import sys
import tempfile
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from datetime import date, datetime
from typing import Any

_SCALARS = frozenset({int, str, float, bool, type(None)})


def _plain(value: Any) -> Any:
    if type(value) in _SCALARS:
        return value
    if isinstance(value, bytes | bytearray):
        return value.hex()
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


WRITE_ROWS = 2000  # rows per write of streamed output


def _plain_row(row: Mapping[str, Any], columns: Sequence[str]) -> dict[str, Any]:
    """`columns` of `row` as `_plain` gives them (scalars as they are: one call per row, not
    one per value, for 640,000-row outputs)."""
    out = {}
    for c in columns:
        v = row.get(c)
        out[c] = v if type(v) in _SCALARS else _plain(v)
    return out


def render(rows: Iterable[Mapping[str, Any]], columns: Sequence[str], fmt: str) -> str:
    """Rows as an aligned table, a JSON array, or CSV with a header."""
    data = [{c: _plain(r.get(c)) for c in columns} for r in rows]
    if fmt == "json":
        return _json_rows(data)
    if fmt == "csv":
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=list(columns), lineterminator="\n")
        writer.writeheader()
        writer.writerows(data)
        return buf.getvalue()
    cells = [[("-" if r[c] is None else str(r[c])) for c in columns] for r in data]
    widths = [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(columns)]
    lines = ["  ".join(c.upper().ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip()]
    lines += [
        "  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip() for row in cells
    ]
    return "\n".join(lines) + "\n"


def _json_rows(data: list[dict[str, Any]]) -> str:
    """A JSON array with one object per line. Each row goes through the C encoder (the
    pure-Python one behind `indent=` took 2 s for 24,000 rows); the parsed value is the same."""
    if not data:
        return "[]\n"
    return "[\n  " + ",\n  ".join(json.dumps(row, default=str) for row in data) + "\n]\n"


HELD_IN_MEMORY = 16 * 1024 * 1024  # characters of held output kept in memory; more on disk


@contextlib.contextmanager
def stdout_held_until(ready: Callable[[], object] | None) -> Iterator[None]:
    """Hold what is written to stdout inside until `ready()` returns, then write it out:
    output made while what it vouches for is still being done (a dry run's plan while its
    ledger record is written) is shown only once that is done, and never when it fails
    (`ready()` raises: the held text is dropped). Held in memory up to `HELD_IN_MEMORY`
    characters, beyond that in a temporary file: a plan of any size costs no more memory.
    `ready` None: nothing is held."""
    if ready is None:
        yield
        return
    real = sys.stdout
    with tempfile.SpooledTemporaryFile(HELD_IN_MEMORY, "w+", encoding="utf-8", newline="") as held:
        with contextlib.redirect_stdout(held):
            yield
        ready()
        held.seek(0)
        shutil.copyfileobj(held, real, 1 << 20)
    real.flush()


def emit(rows: Iterable[Mapping[str, Any]], columns: Sequence[str], fmt: str) -> None:
    sys.stdout.write(render(rows, columns, fmt))
    sys.stdout.flush()


def emit_rows(
    make_rows: Callable[[], Iterable[Mapping[str, Any]]], columns: Sequence[str], fmt: str
) -> None:
    """`emit` for output too large to hold (a plan of 10,000 groups): rows are written as
    `make_rows()` yields them — the same text `emit` writes. A table needs its column widths
    first, so `make_rows` is called twice for it."""
    out = sys.stdout
    if fmt == "table":
        widths = [len(c) for c in columns]
        for r in make_rows():
            for i, c in enumerate(columns):
                v = _plain(r.get(c))
                widths[i] = max(widths[i], 1 if v is None else len(str(v)))
        out.write(
            "  ".join(c.upper().ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip()
            + "\n"
        )
        for r in make_rows():
            cells = (_plain(r.get(c)) for c in columns)
            text = ("-" if v is None else str(v) for v in cells)
            out.write(
                "  ".join(v.ljust(w) for v, w in zip(text, widths, strict=True)).rstrip() + "\n"
            )
    elif fmt == "csv":
        writer = csv.DictWriter(out, fieldnames=list(columns), lineterminator="\n")
        writer.writeheader()
        for r in make_rows():
            writer.writerow({c: _plain(r.get(c)) for c in columns})
    else:
        emit_json_lines(json_row(r, columns) for r in make_rows())
    out.flush()


def json_row(row: Mapping[str, Any], columns: Sequence[str]) -> str:
    """One row as `emit_rows` writes it in a JSON array (`json_fields` joins such texts)."""
    return _ENCODE(_plain_row(row, columns))


def json_fields(row: Mapping[str, Any], columns: Sequence[str]) -> str:
    """`columns` of `row` as the text between the braces of `json_row`: a caller that prints
    many rows sharing these fields encodes them once and joins the texts."""
    return _ENCODE(_plain_row(row, columns))[1:-1]


_ENCODE = json.JSONEncoder(default=str).encode


def json_fields_array(rows: Sequence[Mapping[str, Any]], columns: Sequence[str]):  # noqa: ANN201
    """`json_fields` of each row (the same texts), as an Arrow string array to be taken and
    joined further, built a column at a time with Arrow's kernels: 250,000 rows of ten fields
    took 1.7 s encoded one by one. Whole numbers and strings (and nulls) only; a column
    holding anything else has every row encoded by `json_fields`."""
    import pyarrow as pa

    arrays = {}
    for column in columns:
        values = list(map(operator.methodcaller("get", column), rows))  # no Python frame a row
        try:
            # Arrow infers the column's type, checking every value (a Python set of their
            # types cost as much as the encoding)
            arrays[column] = pa.array(values)
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):  # mixed, or beyond 64 bits
            return pa.array([json_fields(r, columns) for r in rows], pa.string())
    texts = json_fields_of_columns(arrays, columns, len(rows))
    if texts is None:
        return pa.array([json_fields(r, columns) for r in rows], pa.string())
    return texts


def json_fields_of_columns(arrays: Mapping[str, Any], columns: Sequence[str], n: int):  # noqa: ANN201
    """`json_fields` of each of `n` rows given as Arrow arrays (a column not in `arrays` is
    null), as an Arrow string array; None when a column holds anything but whole numbers and
    strings (its rows are then encoded one by one)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    parts: list = []
    for i, column in enumerate(columns):
        array = arrays.get(column)
        if array is None:
            array = pa.nulls(n)
        if isinstance(array, pa.ChunkedArray):
            array = array.combine_chunks()
        if pa.types.is_integer(array.type) or pa.types.is_null(array.type):
            text = pc.cast(array, pa.string())
        elif pa.types.is_string(array.type) or pa.types.is_large_string(array.type):
            coded = array.dictionary_encode()
            names = [_ENCODE(v) for v in coded.dictionary.to_pylist()]
            text = pa.array(names, pa.string()).take(coded.indices)
        else:
            return None
        parts += [("" if i == 0 else ", ") + _ENCODE(column) + ": ", pc.fill_null(text, "null")]
    if not parts:
        return pa.array([""] * n, pa.string())
    return pc.binary_join_element_wise(*parts, "")


def emit_json_lines(lines: Iterable[str]) -> None:
    """A JSON array on stdout from rows already encoded (`json_row`), one per line, written a
    chunk at a time — the text `emit_rows` writes for -o json."""
    out = sys.stdout
    chunk: list[str] = []
    n = 0
    for line in lines:
        chunk.append(line)
        if len(chunk) == WRITE_ROWS:  # one write per chunk: a write per row cost seconds
            out.write(("[\n  " if not n else ",\n  ") + ",\n  ".join(chunk))
            n, chunk = n + len(chunk), []
    if chunk:
        out.write(("[\n  " if not n else ",\n  ") + ",\n  ".join(chunk))
        n += len(chunk)
    out.write("\n]\n" if n else "[]\n")
    out.flush()


def emit_json_document(
    head: Mapping[str, Any],
    lists: Mapping[str, Iterable[Any]],
    encoded: Collection[str] = (),
) -> None:
    """A JSON object: `head`'s keys, then each of `lists` as an array written item by item,
    one item per line (the C encoder: a 640,000-row audit through `indent=` took minutes).
    The lists named in `encoded` hold JSON texts already (`json_row`)."""
    out = sys.stdout
    text = json.dumps(_plain(dict(head)), indent=2, default=str)
    out.write(text[:-2] if head else "{")
    sep = ",\n" if head else "\n"
    for key, items in lists.items():
        out.write(f"{sep}  {json.dumps(key)}: [")
        first = "\n    "
        chunk: list[str] = []
        is_encoded = key in encoded
        for item in items:
            chunk.append(item if is_encoded else _ENCODE(_plain(item)))
            if len(chunk) == WRITE_ROWS:  # one write per chunk, as emit_json_lines
                out.write(first + ",\n    ".join(chunk))
                first, chunk = ",\n    ", []
        if chunk:
            out.write(first + ",\n    ".join(chunk))
            first = ",\n    "
        out.write("]" if first == "\n    " else "\n  ]")
        sep = ",\n"
    out.write("\n}\n")
    out.flush()


def print_summary(text: str, fmt: str) -> None:
    """A run's closing summary: under the table on stdout; on stderr when stdout carries JSON
    or CSV for a program to parse."""
    print(text, file=sys.stdout if fmt == "table" else sys.stderr, flush=True)


def emit_json(value: object) -> None:
    """Nested JSON (bytes as hex, times as ISO-8601) on stdout."""
    sys.stdout.write(json.dumps(_plain(value), indent=2, default=str) + "\n")
    sys.stdout.flush()
