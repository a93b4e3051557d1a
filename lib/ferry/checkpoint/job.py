"""`migrate --positions FILE` and `migrate --checkpoint PATH [--execute | --rollback RUN_ID]`:
the entry points `jobs/migrate.py` hands its parsed arguments to (the job file stays a thin
entry point)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from ferry.config import FerryConfig, require
from ferry.migrate.decision import exit_code
from ferry.output import emit_rows, print_summary


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options `migrate` gains for positions kept outside consumer groups."""
    parser.add_argument(
        "--positions",
        metavar="FILE",
        help="translate a CSV of topic,partition,offset (next offset to read on the source) "
        "and print the destination offsets; writes nothing",
    )
    parser.add_argument(
        "--checkpoint",
        metavar="PATH",
        help="translate a Structured Streaming checkpoint's Kafka offsets (any Hadoop path)",
    )
    parser.add_argument(
        "--flink-savepoint",
        metavar="PATH",
        help="translate a Flink savepoint's KafkaSource positions; --execute writes a new "
        "savepoint beside it (PATH-ferry) for `flink run -s` (docs/jobs/flink.md)",
    )
    parser.add_argument(
        "--into-group",
        metavar="NAME",
        help="--flink-savepoint: commit the translated positions to destination group NAME "
        "instead of writing a new savepoint",
    )
    parser.add_argument(
        "--idle",
        metavar="DURATION",
        default="60s",
        help="--checkpoint: refuse a checkpoint whose newest batch or commit is younger than "
        "this (its query may still run; default 60s)",
    )
    parser.add_argument(
        "--allow-data-loss",
        action="store_true",
        help="--checkpoint: translate positions below the source's log start (records deleted "
        "before the query read them), as Spark's failOnDataLoss=false would go on",
    )
    parser.add_argument(
        "--query-stopped",
        action="store_true",
        help="--checkpoint: the operator's word that the query is stopped, which a real-time "
        "query's files cannot show (asked for when they show real-time mode)",
    )
    parser.add_argument(
        "--subscribe-pattern",
        metavar="REGEX",
        help="--checkpoint: the query's subscribePattern (a Java regex, as Spark reads it), "
        "checked against the destination's topics (it must match the translated topics and no "
        "other)",
    )
    parser.add_argument(
        "--sources",
        metavar="KEYS",
        help="--checkpoint: the Kafka sources to translate, comma-separated: their indexes in "
        "the query (names in a v2 offset log), as the plan lists them; the others are kept "
        "byte for byte (default: every source)",
    )


CHECKPOINT_RUN_PREFIX = "migrate-checkpoint-"  # `ferry.checkpoint.translate.ACTION` + "-"


def is_requested(args: argparse.Namespace) -> bool:
    """--positions, --checkpoint, or the rollback of a checkpoint run (never handed to the
    groups' rollback: its ledger rows name files, not groups)."""
    is_checkpoint_run = (args.rollback or "").startswith(CHECKPOINT_RUN_PREFIX)
    # and the checkpoint's own options, so that given without --checkpoint they are refused
    is_checkpoint_option = bool(
        args.allow_data_loss
        or args.subscribe_pattern is not None
        or getattr(args, "sources", None) is not None
        or args.query_stopped
    )
    is_flink = bool(getattr(args, "flink_savepoint", None) or getattr(args, "into_group", None))
    return bool(
        args.positions or args.checkpoint or is_checkpoint_run or is_checkpoint_option or is_flink
    )


def main(
    args: argparse.Namespace,
    cfg: FerryConfig,
    progress: Callable[[str], None],
    idle_s: float,
) -> int:
    """Run the one `migrate` variant the arguments ask for; its exit code."""
    from ferry.errors import UsageError
    from ferry.session import start_session

    if getattr(args, "flink_savepoint", None) or getattr(args, "into_group", None):
        from ferry.flink.job import flink_main

        return flink_main(args, cfg, progress)
    if args.positions and args.checkpoint:
        raise UsageError("--positions and --checkpoint are two separate runs: give one")
    if args.positions and (args.execute or args.rollback):
        raise UsageError("--positions writes nothing: it takes no --execute or --rollback")
    if not args.checkpoint:
        for option in ("allow_data_loss", "subscribe_pattern", "sources", "query_stopped"):
            if getattr(args, option, None) is not None and getattr(args, option) is not False:
                given = "--" + option.replace("_", "-")
                raise UsageError(f"{given} goes with --checkpoint")
    # --subscribe-pattern is a Java regex: the session checks it (`restart.check_pattern`).
    for option in ("wait", "export_dir", "allow_rewind", "allow_active_source", "max_duplicates"):
        if getattr(args, option, None):
            given = "--" + option.replace("_", "-")
            raise UsageError(f"{given} is for groups: not with --checkpoint or --positions")
    require(cfg, "source", "destination")
    session = start_session("ferry-migrate")
    if args.positions:
        return positions_job(session(), cfg, args.positions, args.output, progress)
    from ferry.checkpoint import restore, translate

    require(cfg, "ledger.path")
    spark = session()
    if args.rollback:
        return restore.rollback_job(
            spark, cfg, args.checkpoint, args.rollback, args.execute, args.output, progress
        )
    return translate.checkpoint_job(
        spark,
        cfg,
        args.checkpoint,
        args.execute,
        idle_s,
        args.output,
        progress,
        allow_data_loss=args.allow_data_loss,
        pattern=args.subscribe_pattern,
        query_stopped=args.query_stopped,
        chosen=getattr(args, "sources", None),
    )


def positions_job(
    spark,  # noqa: ANN001 - a SparkSession
    cfg: FerryConfig,
    path: str,
    fmt: str,
    progress: Callable[[str], None],
) -> int:
    """Read the CSV (any Hadoop path), translate every line, print one row per line."""
    from ferry.checkpoint import positions
    from ferry.checkpoint.stores import open_store
    from ferry.kafka.cluster import Cluster

    store = open_store(spark, path.rsplit("/", 1)[0] if "/" in path else ".")
    data = store.read(path.rsplit("/", 1)[-1])
    sets = positions.read_positions_csv(path, data.decode("utf-8", errors="replace"))
    src, dst = Cluster.from_config(cfg, "source"), Cluster.from_config(cfg, "destination")
    plan, decisions = positions.translate(
        spark, src, dst, cfg, sets, progress, allow_reconcile=False
    )
    emit_rows(lambda: positions.position_rows(plan, decisions), positions.POSITIONS_COLUMNS, fmt)
    resolved = sum(1 for d in decisions.values() if d.is_write)
    for name, d in sorted(decisions.items(), key=lambda kv: positions.line_number(kv[0])):
        if not d.is_write:
            print(f"not translated: {path} {name}: {d.message} ({d.status})", file=sys.stderr)
    print_summary(f"{resolved} of {len(decisions)} positions translated; nothing written", fmt)
    return exit_code({n: d.status for n, d in decisions.items()})
