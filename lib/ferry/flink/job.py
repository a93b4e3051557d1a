"""`migrate --flink-savepoint PATH [--execute] [--allow-data-loss] [--into-group NAME]`: the
options checked and the run started (`ferry.flink.savepoint`); `ferry.checkpoint.job` hands it
the arguments."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from ferry.config import FerryConfig, require
from ferry.errors import UsageError

NOT_WITH = (
    "positions",
    "checkpoint",
    "rollback",
    "subscribe_pattern",
    "wait",
    "export_dir",
    "allow_rewind",
    "allow_active_source",
    "max_duplicates",
)


def flink_main(args: argparse.Namespace, cfg: FerryConfig, progress: Callable[[str], None]) -> int:
    if not args.flink_savepoint:
        raise UsageError("--into-group goes with --flink-savepoint")
    for option in NOT_WITH:
        if getattr(args, option, None):
            given = "--" + option.replace("_", "-")
            raise UsageError(f"{given} does not go with --flink-savepoint")
    require(cfg, "source", "destination", "ledger.path")
    from ferry.flink.savepoint import flink_savepoint_job
    from ferry.session import start_session

    session = start_session("ferry-migrate")
    return flink_savepoint_job(
        session(),
        cfg,
        args.flink_savepoint,
        args.execute,
        args.output,
        progress,
        allow_data_loss=args.allow_data_loss,
        into_group=getattr(args, "into_group", None),
    )
