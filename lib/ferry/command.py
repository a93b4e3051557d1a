"""The `ferry` command, installed with the package: `ferry [--remote URL] [--conf K=V ...] JOB
[JOB OPTIONS]` runs a job as `./spark-submit.sh JOB` does, with the same options, config,
output formats and exit codes (0, 1, 2, 75), through the same `main` (ferry.jobs).

The session: with `--remote sc://HOST:PORT/;token=...` (or $SPARK_REMOTE) a Spark Connect
session, with no JVM in this process (docs/connect.md); without, the session the environment
gives (a Databricks job's, a notebook's) or a local one, as a job run directly starts
(ferry.session). `--remote` and `--conf` may come before JOB or among its options; `--conf`
sets the session's settings (a Connect session's own, or the local Spark's).

`--version` and `--help` need no Spark at all. A job needs a PySpark: a Connect client
(`pyspark-client`, Databricks Connect) for `--remote`, the full PySpark (`ferry[spark]`) for a
local session; without the one it needs, one line naming it (exit 2, `ferry.runtime`).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from collections.abc import Callable, Sequence

from ferry.errors import EXIT_OK, EXIT_USAGE, UsageError

USAGE = "usage: ferry [--remote sc://HOST:PORT] [--conf K=V ...] JOB [JOB OPTIONS]"
# The options the command takes for itself, wherever they are given (each takes a value).
OWN_OPTIONS = ("--remote", "--conf")


class CommandLineError(Exception):
    """A command line the command cannot take: the one line says why (exit code 2)."""


def split_own_options(argv: Sequence[str]) -> tuple[dict[str, list[str]], list[str]]:
    """The command's own options (by name, each value given) and the rest, in order. Nothing
    after `--` is the command's."""
    own: dict[str, list[str]] = {name: [] for name in OWN_OPTIONS}
    rest: list[str] = []
    args = list(argv)
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            rest += args[i:]
            break
        name, eq, value = arg.partition("=")
        if name in OWN_OPTIONS:
            if not eq:
                if i + 1 >= len(args):
                    raise CommandLineError(f"{name} needs a value")
                i += 1
                value = args[i]
            own[name].append(value)
        else:
            rest.append(arg)
        i += 1
    return own, rest


def settings(values: Sequence[str]) -> dict[str, str]:
    out = {}
    for value in values:
        key, eq, setting = value.partition("=")
        if not eq or not key:
            raise CommandLineError(f"--conf needs KEY=VALUE, got '{value}'")
        out[key] = setting
    return out


def jobs_list() -> str:
    from ferry.jobs import JOBS

    return " ".join(sorted(JOBS))


def job_module(name: str) -> str:
    """The module of the job `name` in ferry.jobs (not imported: it imports PySpark)."""
    from ferry.jobs import JOBS

    module_name = JOBS.get(name)
    if module_name is None:
        raise CommandLineError(f"unknown job '{name}' (jobs: {jobs_list()}; see --help)")
    return module_name


def job_main(name: str) -> Callable[[list[str]], int]:
    """The `main` of the job `name` (its module in ferry.jobs)."""
    return importlib.import_module(job_module(name)).main


def prepare(argv: Sequence[str]) -> tuple[Callable[[list[str]], int], list[str]] | int:
    """The job's main and its arguments, with the session asked for; or the exit code of a
    command line that runs no job (help, version, a usage error, said on stderr)."""
    try:
        own, rest = split_own_options(argv)
        conf = settings(own["--conf"])
        if not rest or rest[0] in ("-h", "--help"):
            print(USAGE, file=sys.stderr)
            print(f"jobs: {jobs_list()}", file=sys.stderr)
            return EXIT_USAGE
        if rest[0] == "--version":
            from ferry.cli import version_line

            print(version_line())
            return EXIT_OK
        if rest[0].startswith("-"):
            raise CommandLineError(f"unknown option {rest[0]} (before JOB: --remote, --conf)")
        job_module(rest[0])
        remote = bool(own["--remote"] or os.environ.get("SPARK_REMOTE"))
        _require_spark(remote)
        main = job_main(rest[0])
        if own["--remote"]:
            url = own["--remote"][-1]
            if not url.startswith("sc://"):
                raise CommandLineError(
                    f"--remote takes a Spark Connect URL (sc://HOST:PORT/;token=...), got '{url}'"
                )
            os.environ["SPARK_REMOTE"] = url  # ferry.session builds a Connect session
        from ferry.session import request_settings

        request_settings(conf)
        return main, rest[1:]
    except (CommandLineError, UsageError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE


def _require_spark(remote: bool) -> None:
    """The PySpark this run needs is here: any (a Connect client) with --remote or on
    Databricks, the full one for a local session; else one line naming what to install."""
    from ferry import runtime

    if not runtime.has_module("pyspark.sql"):
        raise UsageError(
            "no PySpark here: install a Spark Connect client for --remote (pip install "
            f"'pyspark-client>=4.0', or Databricks Connect) or '{runtime.SPARK_EXTRA}'"
        )
    runtime.check_client_version()
    if not remote and not os.environ.get("DATABRICKS_RUNTIME_VERSION"):
        runtime.require_classic()


def main(argv: Sequence[str] | None = None) -> None:
    """The console script: run the job and end the process with its exit code. In a
    Databricks job (a Python wheel task calls this entry point inside the cluster's Python
    process, which must live on) the code is raised as SystemExit instead, which fails the
    task with it for any code but 0 (docs/databricks.md)."""
    from ferry.cli import exit_process, run_process

    prepared = prepare(sys.argv[1:] if argv is None else argv)
    if isinstance(prepared, int):
        code = prepared
    else:
        job, args = prepared
        code = run_process(job, args)
    if os.environ.get("DATABRICKS_RUNTIME_VERSION"):
        sys.stdout.flush()
        sys.stderr.flush()
        raise SystemExit(code)
    exit_process(code)


if __name__ == "__main__":
    main()
