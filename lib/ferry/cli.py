"""What every job shares at the edges: argument parsing, one-line errors and exit codes,
output as table/json/csv (`ferry.output`, re-exported here), progress on stderr, and
`--print-config` (the config as the job resolves it, printed before anything connects).
Nothing in the library imports this module: errors and exit codes come from `ferry.errors`.

Exit codes: 0 the run did all it was asked; 1 it did not (a group refused, a partition not
resolved, a cluster failing mid-run); 2 usage or config errors; `migrate` also 75 (run again
later). Errors are one line on stderr; `--verbose` adds the traceback. Otherwise the traceback
goes to the run's log file (`$FERRY_LOG_FILE`, where Spark's own logging goes too), which the
error line names when the failure came out of Spark.
"""

from __future__ import annotations

import argparse
import gc
import logging
import os
import re
import sys
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NoReturn

from ferry import driver_watch, spark_failures
from ferry.errors import (
    EXIT_INCOMPLETE,
    EXIT_OK,
    EXIT_USAGE,
    ConfigError,
    UsageError,
    one_line,
)
from ferry.groups.selection import check_regex  # noqa: F401 - re-exported for the jobs
from ferry.output import (  # noqa: F401 - re-exported for the jobs
    emit,
    emit_json,
    emit_json_document,
    emit_json_lines,
    emit_rows,
    print_summary,
    render,
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


def parse_time(text: str, option: str) -> int:
    """A point in time as epoch ms: epoch ms, or ISO-8601 (UTC when it has no zone)."""
    from ferry.groups.reset import ResetError, parse_datetime, to_epoch_ms

    raw = text.strip()
    if raw.isascii() and raw.isdigit():
        return int(raw)
    try:
        return to_epoch_ms(parse_datetime(raw, option))
    except ResetError as exc:
        raise UsageError(f"{exc} (or epoch ms)") from None


class ArgumentParser(argparse.ArgumentParser):
    """argparse with a one-line error and exit code 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see --help)\n")


def version_line() -> str:
    """What `--version` prints: Ferry's version and the PySpark it runs on: the installed
    distribution that brings it (`pyspark`, `pyspark-client`, `databricks-connect`), else the
    version the importable one says (a cluster's container runs Spark's own pyspark.zip)."""
    from importlib.metadata import PackageNotFoundError, version

    from ferry.version import ferry_version

    for dist in ("pyspark", "pyspark-client", "databricks-connect"):
        try:
            return f"ferry {ferry_version()} ({dist} {version(dist)})"
        except PackageNotFoundError:
            continue
    try:
        import pyspark

        found = getattr(pyspark, "__version__", "unknown")
    except ImportError:
        found = "not installed"
    return f"ferry {ferry_version()} (pyspark {found})"


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
    parser.add_argument("--version", action="version", version=version_line())
    parser.add_argument("--quiet", action="store_true", help="no progress on stderr")
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
    from ferry.shipped import local_paths

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


def error_line(exc: BaseException) -> str:
    """The one line a failed run ends with (after "error: ")."""
    from ferry.connect import missing_module_line

    missing = missing_module_line(exc)
    if missing is not None:  # Spark's Python workers (a Connect server's) lack Ferry
        return missing
    spark = spark_failures.spark_failure(exc)
    if spark is None:
        return one_line(exc)
    if spark_failures.is_spark_exception(exc):
        return spark
    return f"{one_line(exc)}; {spark}"  # Ferry's own words about it first (a ledger append)


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


def log_libraries_to_file() -> None:
    """Python logging (libraries': py4j logs a traceback when Spark's JVM dies under a call)
    to the run's log file, or nowhere without one; never to the console, where a failed run
    says one line. Without a handler of its own, the first `logging.exception` would print
    to stderr."""
    path = os.environ.get("FERRY_LOG_FILE")
    root = logging.getLogger()
    if root.handlers:
        return
    handler: logging.Handler = logging.NullHandler()
    if path:
        handler = logging.FileHandler(path, delay=True)  # opened at the first record
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root.addHandler(handler)


def _report(exc: BaseException, verbose: bool) -> None:
    if getattr(exc, "preface", ""):
        print(exc.preface, file=sys.stderr)
    if verbose:
        traceback.print_exc()
        print(f"error: {error_line(exc)}", file=sys.stderr)
        return
    path = _log_traceback(exc)
    where = f" (details: {path})" if path and spark_failures.from_spark(exc) else ""
    print(f"error: {error_line(exc)}{where}", file=sys.stderr)


# A job's driver keeps its plan as Python objects until the run ends (10,000 groups: millions)
# while it makes millions more, and Python's default collector walks the whole heap each time
# the long-lived ones grow by a quarter: 26 full collections, 2.9 s of a 30 s dry run (2,000
# groups: 22, 1.5 s). A young collection every 50,000 allocations, not 700, leaves none in
# either, and still collects the cycles the collector is there for.
GC_THRESHOLDS = (50_000, 20, 10)


def run(main: Callable[[list[str]], int], argv: Sequence[str] | None = None) -> int:
    """Call a job's main and turn exceptions into one-line errors and exit codes. A job
    process in cluster deploy mode also records its result for spark-submit.sh (ferry.result)."""
    gc.set_threshold(*GC_THRESHOLDS)
    if argv is None:
        return run_process(main, sys.argv[1:])
    return _run(main, argv)


def run_process(main: Callable[[list[str]], int], argv: Sequence[str]) -> int:
    """`run` for a job that is its process's whole work (spark-submit's driver, the `ferry`
    command): stderr restored, libraries' logging to the log file, the driver JVM watched,
    and in cluster deploy mode the result recorded (ferry.result)."""
    from ferry import result

    _restore_stderr()
    if "--verbose" not in argv:
        log_libraries_to_file()
    driver_watch.start(spark_failures.unanswered_line)
    captured = result.capture()
    code = _run(main, argv)
    result.record(code, captured)
    return code


def _run(main: Callable[[list[str]], int], argv: Sequence[str]) -> int:
    args = list(argv)
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
    driver_watch.forget()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


class Progress:
    """Timestamped progress lines on stderr (stdout stays clean for -o json/csv), each written
    the moment it is said (`flush`). Each line is also the description of the Spark jobs
    started after it, until the next (the Spark UI's and the History Server's job and SQL
    pages): `migrate run migrate-…: source: reading 1145 ranges …`, so an operator can tell
    which stage of a slow run is slow. `job` names the Ferry job, `run_id` (when the run has
    one; settable later) its run; with `enabled` false (--quiet) only the descriptions stay."""

    def __init__(self, enabled: bool = True, job: str = "ferry", run_id: str = "") -> None:
        self.enabled = enabled
        self.job = job
        self.run_id = run_id
        self.start = time.monotonic()

    def description(self, message: str) -> str:
        run = f" run {self.run_id}" if self.run_id else ""
        return f"{self.job}{run}: {message}"

    def __call__(self, message: str) -> None:
        self.detail(message)
        from ferry.session import describe_jobs

        describe_jobs(self.description(message))

    def detail(self, message: str) -> None:
        """A line about one item of the step last said (a group written), printed the same way
        but not made the Spark jobs' description: no job starts for it, and a description is
        a call into the JVM (10,000 groups' lines: a second)."""
        if self.enabled:
            print(f"[{time.monotonic() - self.start:6.1f}s] {message}", file=sys.stderr, flush=True)
