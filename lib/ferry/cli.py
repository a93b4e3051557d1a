"""What every job shares at the edges: argument parsing, one-line errors and exit codes,
output as table/json/csv, progress on stderr, and `--print-config` (the config as the job
resolves it, printed before anything connects).

Exit codes: 0 the run did all it was asked; 1 it did not (a group refused, a partition not
resolved, a cluster failing mid-run); 2 usage or config errors; `migrate` also 75 (run again
later). Errors are one line on stderr; `--verbose` adds the traceback. Otherwise the traceback
goes to the run's log file (`$FERRY_LOG_FILE`, where Spark's own logging goes too), which the
error line names when the failure came out of Spark.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import re
import sys
import time
import traceback
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import date, datetime
from typing import Any, NoReturn

from ferry.errors import (  # noqa: F401 - re-exported until every caller imports ferry.errors
    EXIT_INCOMPLETE,
    EXIT_OK,
    EXIT_USAGE,
    FerryError,
    UsageError,
)

_SPAN = re.compile(r"^(?P<n>\d+(?:\.\d+)?)(?P<unit>ms|s|m|h)$")
_SPAN_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_span(text: str, option: str) -> float:
    """A duration in seconds: `90s`, `10m`, `1h`, `500ms`, or ISO-8601 `PT5M`."""
    from ferry.groups.reset import ResetError, parse_duration

    match = _SPAN.match(text.strip().lower())
    if match:
        return float(match["n"]) * _SPAN_UNITS[match["unit"]]
    try:
        return parse_duration(text).total_seconds()
    except ResetError:
        raise UsageError(f"{option} {text!r} is not a duration like 90s, 10m, 1h or PT5M") from None


class ArgumentParser(argparse.ArgumentParser):
    """argparse with a one-line error and exit code 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see --help)\n")


def add_common_arguments(parser: argparse.ArgumentParser, output: bool = True) -> None:
    parser.add_argument("--config", help="YAML config file (see conf/)")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config key, e.g. --set matching.context=8 (repeatable)",
    )
    if output:
        parser.add_argument("-o", "--output", choices=("table", "json", "csv"), default="table")
    parser.add_argument("--verbose", action="store_true", help="show tracebacks and Spark logs")
    parser.add_argument(
        "--print-config",
        action="store_true",
        help="print the config as this job resolves it (--set applied, ${VAR}s read, secrets "
        "masked) as YAML, and exit",
    )


_SECRET = re.compile(r"password|secret|token|(^|\.)key\.pem$|sasl\.username", re.I)


def resolved_config_yaml(path: str | None, overrides: Sequence[str]) -> str:
    """The config as a job loads it, as YAML: every section with its defaults filled in,
    secrets masked. On a client-mode driver a file property naming a copy shipped by
    spark-submit.sh is followed by a comment saying which local file it opens."""
    import dataclasses

    import yaml

    from ferry.config import CLUSTER_SECTIONS, load_config
    from ferry.shipping import local_paths

    cfg = load_config(path, overrides)

    def plain(value: Any) -> Any:
        if isinstance(value, Mapping):
            return {k: plain(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [plain(v) for v in value]
        return value

    data: dict[str, Any] = {}
    notes: list[str] = []
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        if f.name in CLUSTER_SECTIONS:
            if value is None:
                continue
            conf = {k: ("***" if _SECRET.search(k) else v) for k, v in value.items()}
            local = local_paths(conf)
            notes += [
                f"# {f.name}.{k}: {conf[k]} opens {local[k]} on this driver"
                for k in conf
                if local[k] != conf[k]
            ]
            data[f.name] = conf
        else:
            data[f.name] = plain(dataclasses.asdict(value))
    text = yaml.safe_dump(data, sort_keys=False)
    return text + "".join(f"{n}\n" for n in notes)


def _print_config(args: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--config")
    parser.add_argument("--set", action="append", default=[])
    known, _ = parser.parse_known_args(list(args))
    sys.stdout.write(resolved_config_yaml(known.config, known.set))
    return EXIT_OK


_WRAPPED = re.compile(
    r"(?:KafkaReadError|ClusterError|FerryError|OffsetsDecodeError|ConfigError)"
    r": (?P<msg>[^\n]+)"
)


def check_regex(option: str, pattern: str | None) -> None:
    """A command-line regex that does not compile is a usage error naming the option."""
    if pattern is None:
        return
    try:
        re.compile(pattern)
    except re.error as exc:
        raise UsageError(f"{option} {pattern!r} is not a valid regex: {exc}") from None


_CAUSE = re.compile(r"^(?:Caused by: |: )?[\w.$]+(?:Exception|Error): (?P<msg>\S[^\n]*)$", re.M)


def one_line(exc: BaseException) -> str:
    """The message a user needs; digs our own errors out of Spark's wrapped exceptions, and
    the first named cause out of a bare Java one ("An error occurred while calling o83.count.")."""
    text = str(exc)
    match = _WRAPPED.search(text)
    if match:
        return match.group("msg").strip()
    first = text.strip().splitlines()[0] if text.strip() else type(exc).__name__
    if first.startswith("An error occurred while calling"):
        cause = _CAUSE.search(text)
        if cause:
            return f"{first} {cause.group('msg').strip()}"[:500]
    return first[:500]


def _restore_stderr() -> None:
    """Under spark-submit.sh, write stderr to spark-submit's real stderr (see the script):
    spark-submit merges the driver's stderr into stdout. Only when the named process is this
    one's parent, so a stray variable never writes into another process's stream."""
    pid = os.environ.get("FERRY_STDERR_OF_PID", "")
    if not pid.isdigit() or int(pid) != os.getppid():
        return
    try:
        sys.stderr = open(f"/proc/{pid}/fd/2", "a", buffering=1)  # noqa: SIM115 - for the run
    except OSError:
        pass


def _from_spark(exc: BaseException) -> bool:
    """The failure came out of a Spark job (a task failed, the JVM raised)."""
    seen: BaseException | None = exc
    while seen is not None:
        module = type(seen).__module__ or ""
        if module.startswith(("py4j", "pyspark")):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _log_traceback(exc: BaseException) -> str | None:
    """Append the traceback to the run's log file; returns the file's path when written."""
    path = os.environ.get("FERRY_LOG_FILE")
    if not path:
        return None
    try:
        with open(path, "a") as log:
            log.write(f"--- ferry: {type(exc).__name__}\n")
            traceback.print_exception(exc, file=log)
        return path
    except OSError:
        return None


def _report(exc: BaseException, verbose: bool) -> None:
    if verbose:
        traceback.print_exc()
        print(f"error: {one_line(exc)}", file=sys.stderr)
        return
    path = _log_traceback(exc)
    where = f" (details: {path})" if path and _from_spark(exc) else ""
    print(f"error: {one_line(exc)}{where}", file=sys.stderr)


def run(main: Callable[[list[str]], int], argv: Sequence[str] | None = None) -> int:
    """Call a job's main and turn exceptions into one-line errors and exit codes."""
    from ferry.config import ConfigError

    if argv is None:
        _restore_stderr()

    args = list(sys.argv[1:] if argv is None else argv)
    verbose = "--verbose" in args
    try:
        if "--print-config" in args:
            return _print_config(args)
        return main(args)
    except SystemExit as exc:
        return int(exc.code or 0) if isinstance(exc.code, int) else EXIT_USAGE
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
    except (UsageError, ConfigError) as exc:
        _report(exc, verbose)
        return EXIT_USAGE
    except Exception as exc:  # noqa: BLE001 - the whole point is a clean one-line error
        _report(exc, verbose)
        return EXIT_INCOMPLETE


def exit_process(code: int) -> NoReturn:
    """End a job's process with `code` at once, once its output is flushed.

    The interpreter's own teardown is skipped on purpose: native threads of the Delta and
    Kafka client libraries can abort it ("terminate called without an active exception"),
    turning a finished run's exit code into 134. Spark's JVM stops the session when its
    Python driver exits."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


class Progress:
    """Timestamped progress lines on stderr (stdout stays clean for -o json/csv)."""

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        self.start = time.monotonic()

    def __call__(self, message: str) -> None:
        if self.enabled:
            print(f"[{time.monotonic() - self.start:6.1f}s] {message}", file=sys.stderr, flush=True)


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
        sep = "[\n  "
        for r in make_rows():
            out.write(sep + json.dumps({c: _plain(r.get(c)) for c in columns}, default=str))
            sep = ",\n  "
        out.write("[]\n" if sep == "[\n  " else "\n]\n")
    out.flush()


def emit_json_document(head: Mapping[str, Any], lists: Mapping[str, Iterable[Any]]) -> None:
    """A JSON object: `head`'s keys, then each of `lists` as an array written item by item,
    one item per line (the C encoder: a 640,000-row audit through `indent=` took minutes)."""
    out = sys.stdout
    text = json.dumps(_plain(dict(head)), indent=2, default=str)
    out.write(text[:-2] if head else "{")
    sep = ",\n" if head else "\n"
    for key, items in lists.items():
        out.write(f"{sep}  {json.dumps(key)}: [")
        first = "\n    "
        for item in items:
            out.write(first + json.dumps(_plain(item), default=str))
            first = ",\n    "
        out.write("]" if first == "\n    " else "\n  ]")
        sep = ",\n"
    out.write("\n}\n")
    out.flush()


def emit_json(value: object) -> None:
    """Nested JSON (bytes as hex, times as ISO-8601) on stdout."""
    sys.stdout.write(json.dumps(_plain(value), indent=2, default=str) + "\n")
    sys.stdout.flush()
