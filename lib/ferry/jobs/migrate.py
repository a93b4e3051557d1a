"""The `migrate` job: exact consumer-group migration between two clusters.

    ./spark-submit.sh migrate --config FILE [--execute] [--allow-active-source]
        [--allow-rewind] [--max-duplicates N] [--wait DURATION] [-o table|json|csv]
        [--export-dir DIR] [--set KEY=VALUE ...]
    ./spark-submit.sh migrate --config FILE --rollback RUN_ID [--execute]
    ./spark-submit.sh migrate --config FILE --checkpoint PATH [--execute | --rollback RUN_ID]
    ./spark-submit.sh migrate --config FILE --positions FILE [-o csv|json]

Dry run unless --execute. Exit 0 when every selected group was migrated or already was (dry
run: would be), 75 when the only groups left are PENDING (the replica has not caught up) or
being written by another run: run again later, 1 when a group was refused or unresolved, 2 for
usage or config errors.
"""

from __future__ import annotations

import argparse
import sys

from ferry import kafka, migrate
from ferry.checkpoint import job as positions_job
from ferry.cli import (
    ArgumentParser,
    Progress,
    add_common_arguments,
    parse_span,
    print_summary,
)
from ferry.config import load_config, require
from ferry.groups.selection import require_groups
from ferry.session import start_session
from ferry.write import rollback
from ferry.write.ledger import Ledger, new_run_id


def _count(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"must be a whole number >= 0, got {text!r}")
    return int(text)


def parse_args(argv: list[str]):  # noqa: ANN201
    parser = ArgumentParser(prog="migrate", description=__doc__.split("\n\n")[0])
    add_common_arguments(parser)
    parser.add_argument("--execute", action="store_true", help="commit (default: dry run)")
    parser.add_argument("--allow-active-source", action="store_true")
    parser.add_argument(
        "--allow-rewind",
        action="store_true",
        help="DANGEROUS: move destination groups that are ahead of the plan back to it "
        "(their consumers will read those records again)",
    )
    parser.add_argument(
        "--max-duplicates",
        type=_count,
        default=0,
        metavar="N",
        help="topics with another partition count on the destination: commit a group even if "
        "its consumers would receive up to N records a second time (default 0)",
    )
    parser.add_argument(
        "--wait",
        metavar="DURATION",
        help="re-plan PENDING groups until they resolve or DURATION (e.g. 10m, 90s, PT5M) "
        "has passed, then commit",
    )
    parser.add_argument("--export-dir", help="write one kafka-consumer-groups CSV per group")
    parser.add_argument("--rollback", metavar="RUN_ID", help="restore offsets from the ledger")
    positions_job.add_arguments(parser)
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    wait_s = parse_span(args.wait, "--wait") if args.wait else 0.0
    cfg = load_config(args.config, args.set)
    if positions_job.is_requested(args):  # a checkpoint's or a list's positions, not groups
        progress = Progress(not args.quiet, "migrate --checkpoint/--positions")
        return positions_job.main(args, cfg, progress, parse_span(args.idle, "--idle"))
    if args.rollback:
        progress = Progress(not args.quiet, f"migrate --rollback {args.rollback}")
        return rollback.rollback_job(
            cfg, "destination", args.rollback, args.execute, args.output, progress
        )
    run_id = new_run_id("migrate")
    progress = Progress(not args.quiet, "migrate", run_id)
    require(cfg, "source", "destination", "ledger.path")
    src = kafka.Cluster.from_config(cfg, "source")
    dst = kafka.Cluster.from_config(cfg, "destination")
    # The session starts while discovery asks both clusters about every group (seconds for
    # 10,000 groups) and a small source is read on the driver; neither waits for the other.
    session = start_session("ferry-migrate")

    progress("discovering groups")
    disc = migrate.discover(src, dst, cfg, args.allow_active_source)
    require_groups(disc.groups, "source group", None, cfg.groups)
    for warning in disc.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    progress(f"{len(disc.groups)} groups selected, {len(disc.refusals)} refused")
    first_plan = migrate.build_plan(session, src, dst, disc, cfg, progress)
    spark = session()
    plan, decisions = migrate.replan_pending(
        spark,
        src,
        dst,
        cfg,
        first_plan,
        lambda p: migrate.decide(p, args.allow_rewind, args.max_duplicates),
        wait_s,
        args.allow_active_source,
        progress,
    )
    ledger = Ledger(spark, cfg.ledger.path, run_id, "migrate", args.execute)
    # a dry run's differences (records) for groups already at or past the plan, and its record
    counts, recorded = None, None
    if args.execute:
        migrate.commit_groups(
            dst, plan, decisions, ledger, cfg.ledger.lease_ms, args.allow_rewind,
            progress, cfg.admin.batch_groups,
        )  # fmt: skip
    else:
        recorded = migrate.record_dry_run(plan, decisions, dst, ledger)
        counts = migrate.dry_run_differences(spark, dst, plan, decisions, cfg, progress)
    if args.export_dir:
        paths = migrate.export_csv(plan, decisions, args.export_dir)
        progress(f"exported {len(paths)} CSV files to {args.export_dir}")
    migrate.emit_plan(plan, decisions, counts, args.output, recorded)
    lines, total = migrate.summary(plan, decisions, args.execute, ledger)
    for line in lines:
        print(line, file=sys.stderr)
    print_summary(total, args.output)
    return migrate.exit_code({g: d.status for g, d in decisions.items()})
