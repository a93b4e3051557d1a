"""spark-submit entry point: Burrow-style status of every group from the lag history.

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

import re
import sys
import time
from collections import Counter

from ferry import delta
from ferry.cli import (
    ArgumentParser,
    Progress,
    add_common_arguments,
    check_regex,
    emit,
    emit_json,
    exit_process,
    run,
)
from ferry.config import load_config, require
from ferry.errors import EXIT_OK, FerryError, UsageError
from ferry.groups import reset
from ferry.lag import burrow, evaluation, history
from ferry.session import build_session

PARTITION_COLUMNS = [
    "group",
    "topic",
    "partition",
    "status",
    "current_lag",
    "complete",
    "start_offset",
    "end_offset",
    "end_committed_at",
    "owner",
]
GROUP_COLUMNS = [
    "cluster",
    "group",
    "status",
    "complete",
    "partition_count",
    "totallag",
    "maxlag",
    "as_of",
]


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
    parser.add_argument("--quiet", action="store_true", help="no progress on stderr")
    return parser.parse_args(argv)


def parse_now(text: str) -> int:
    """Epoch ms, or an ISO-8601 date-time (UTC when it has no zone), as epoch ms."""
    raw = text.strip()
    if re.fullmatch(r"\d+", raw):
        return int(raw)
    try:
        return reset.to_epoch_ms(reset.parse_datetime(raw, "--now"))
    except reset.ResetError as exc:
        raise UsageError(f"{exc} (or epoch ms)") from None


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    cfg = load_config(args.config, args.set)
    require(cfg, "history.path")
    window = cfg.history.window if args.window is None else args.window
    allowed_lag = cfg.history.allowed_lag if args.allowed_lag is None else args.allowed_lag
    if window < 1:
        raise UsageError(f"--window must be >= 1, got {window}")
    if allowed_lag < 0:
        raise UsageError(f"--allowed-lag must be >= 0, got {allowed_lag}")
    check_regex("--group", args.group)
    now_ms = parse_now(args.now) if args.now is not None else None
    progress = Progress(not args.quiet)
    path = cfg.history.path
    if not delta.exists(path):
        raise FerryError(f"no lag history at history.path {path} (run lag-snapshot first)")

    spark = build_session("ferry-lag-status")
    progress(f"evaluating the last {window} snapshots per partition in {path}")
    history_df = history.filter_history(
        history.read_history(spark, path), args.group, now_ms
    )
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

    shown = [r for r in rows if args.all_partitions or r["status"] != "OK"]
    groups = group_rows(rows)
    if args.output == "json":
        emit_json(burrow.burrow_responses(rows, args.all_partitions))
    elif args.output == "csv":
        emit(shown, history.STATUS_COLUMNS, "csv")
    else:
        emit(shown, PARTITION_COLUMNS, "table")
        print()
        emit(groups, GROUP_COLUMNS, "table")
    counts = Counter(g["status"] for g in groups)
    tally = ", ".join(f"{counts[s]} {s}" for s in ("OK", "WARN", "ERR"))
    print(
        f"{len(groups)} groups evaluated ({tally}){suffix}",
        file=sys.stdout if args.output == "table" else sys.stderr,
    )
    return EXIT_OK


def group_rows(rows: list[dict]) -> list[dict]:
    """One output row per group from its status rows (which all carry the group's columns)."""
    out: dict[tuple[str, str], dict] = {}
    for row in rows:
        key = (row["cluster"], row["group"])
        if key not in out:
            out[key] = {
                "cluster": row["cluster"],
                "group": row["group"],
                "status": row["group_status"],
                "complete": row["group_complete"],
                "partition_count": row["group_partition_count"],
                "totallag": row["group_totallag"],
                "maxlag": None,
                "as_of": row["as_of"],
            }
        if row["is_maxlag"]:
            out[key]["maxlag"] = f"{row['topic']}[{row['partition']}]"
    return list(out.values())


if __name__ == "__main__":
    exit_process(run(main))
