"""The `lag-status` job: Burrow-style status of every group from the lag history.

    ./spark-submit.sh lag-status --config FILE [--group REGEX] [--window N] [--allowed-lag N]
        [--now TIME] [--all-partitions] [-o table|json|csv]

Evaluates each partition's last N snapshots in history.path (history.window, --window) with
Burrow's rules (ferry.lag.rules): partitions OK, WARN, STOP, STALL or REWIND, groups OK, WARN or ERR
with complete, maxlag and totallag. `-o json` is a list with one Burrow
`/v3/kafka/(cluster)/consumer/(group)/status` answer per group; like Burrow, only partitions
that are not OK are listed unless --all-partitions (Burrow's `/lag`). Status is as of each
group's newest snapshot; --now TIME (ISO-8601, UTC unless a zone is given, or epoch ms)
evaluates every group as of that time instead, ignoring later snapshots. With
history.status_path set, every evaluated partition is appended there. Exit 0 when the groups
were evaluated (whatever their status), 1 when there was nothing to evaluate, 2 for usage or
config errors.
"""

from __future__ import annotations

import time

from ferry import delta
from ferry.cli import (
    ArgumentParser,
    Progress,
    add_common_arguments,
    check_regex,
    parse_time,
    print_summary,
)
from ferry.config import load_config, require, require_shared
from ferry.errors import EXIT_OK, FerryError, UsageError
from ferry.lag import evaluation, history, report
from ferry.session import build_session


def parse_args(argv: list[str]):  # noqa: ANN201
    parser = ArgumentParser(prog="lag-status", description=__doc__.split("\n\n")[0])
    add_common_arguments(parser)
    parser.add_argument("--group", metavar="REGEX", help="only groups whose id fully matches")
    parser.add_argument("--window", type=int, metavar="N", help="snapshots per partition")
    parser.add_argument(
        "--allowed-lag", type=int, metavar="N", help="lag at or below N counts as caught up"
    )
    parser.add_argument("--now", metavar="TIME", help="evaluate as of TIME (ISO-8601 or ms)")
    parser.add_argument(
        "--all-partitions", action="store_true", help="list OK partitions too (Burrow's /lag)"
    )
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    cfg = load_config(args.config, args.set)
    require(cfg, "history.path")
    require_shared(cfg, "history.status_path")
    window = cfg.history.window if args.window is None else args.window
    allowed_lag = cfg.history.allowed_lag if args.allowed_lag is None else args.allowed_lag
    if window < 1:
        raise UsageError(f"--window must be >= 1, got {window}")
    if allowed_lag < 0:
        raise UsageError(f"--allowed-lag must be >= 0, got {allowed_lag}")
    check_regex("--group", args.group)
    now_ms = parse_time(args.now, "--now") if args.now is not None else None
    progress = Progress(not args.quiet, "lag-status")
    path = cfg.history.path
    if not delta.exists(path):
        raise FerryError(f"no lag history at history.path {path} (run lag-snapshot first)")

    spark = build_session("ferry-lag-status")
    progress(f"evaluating the last {window} snapshots per partition in {path}")
    history_df = history.filter_history(history.read_history(spark, path), args.group, now_ms)
    status_df = evaluation.evaluate_history(
        history_df, window, allowed_lag, int(time.time() * 1000), now_ms
    )
    # One Spark job: collected as Arrow and ordered here, not by a Spark sort (a second job).
    status_table = status_df.toArrow()
    rows = history.status_rows(status_table)
    if not rows:
        what = f" of groups matching --group {args.group}" if args.group else ""
        when = f" at or before --now {args.now}" if now_ms is not None else ""
        raise FerryError(f"no snapshots{what}{when} in history {path}")

    suffix = ""
    if cfg.history.status_path:
        # Written from the collected rows, so the table holds exactly what was printed.
        written_df = spark.createDataFrame(status_table, history.STATUS_SCHEMA)
        writer = history.append_status(spark, written_df, cfg.history.status_path)
        suffix = f"; status appended to {cfg.history.status_path} via {writer}"

    print_summary(report.emit_status(rows, args.output, args.all_partitions) + suffix, args.output)
    return EXIT_OK
