"""spark-submit entry point: exact consumer-group migration between two clusters.

    ./spark-submit.sh migrate --config FILE [--execute] [--allow-active-source]
        [-o table|json|csv] [--export-dir DIR] [--set KEY=VALUE ...]
    ./spark-submit.sh migrate --config FILE --rollback RUN_ID [--execute]

Dry run unless --execute. Exit 0 when every selected group was migrated (dry run: resolved),
1 when any was not, 2 for usage or config errors.
"""

from __future__ import annotations

import sys

from ferry import ledger, migrate, rollback
from ferry.cli import (
    EXIT_INCOMPLETE,
    EXIT_OK,
    ArgumentParser,
    Progress,
    add_common_arguments,
    emit,
    run,
)
from ferry.config import load_config, require
from ferry.kafka_admin import Cluster
from ferry.session import build_session

PLAN_COLUMNS = [
    "group",
    "src_topic",
    "src_partition",
    "committed_offset",
    "dst_topic",
    "dst_partition",
    "destination_offset",
    "previous_offset",
    "status",
    "candidate_count",
    "note",
]


def parse_args(argv: list[str]):  # noqa: ANN201
    parser = ArgumentParser(prog="migrate", description=__doc__.split("\n\n")[0])
    add_common_arguments(parser)
    parser.add_argument("--execute", action="store_true", help="commit (default: dry run)")
    parser.add_argument("--allow-active-source", action="store_true")
    parser.add_argument("--export-dir", help="write one kafka-consumer-groups CSV per group")
    parser.add_argument("--rollback", metavar="RUN_ID", help="restore offsets from the ledger")
    parser.add_argument("--quiet", action="store_true", help="no progress on stderr")
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    cfg = load_config(args.config, args.set)
    progress = Progress(not args.quiet)
    if args.rollback:
        require(cfg, "destination", "ledger.path")
        return rollback_main(args, cfg, progress)
    require(cfg, "source", "destination", "ledger.path")
    src = Cluster.from_config("source", cfg.source, cfg.reader.timeout_ms)
    dst = Cluster.from_config("destination", cfg.destination, cfg.reader.timeout_ms)
    spark = build_session("ferry-migrate")

    progress("discovering groups")
    disc = migrate.discover(src, dst, cfg, args.allow_active_source)
    if not disc.groups:
        print("error: no source group matches groups.include / groups.exclude", file=sys.stderr)
        return EXIT_INCOMPLETE
    for warning in disc.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    progress(f"{len(disc.groups)} groups selected, {len(disc.refusals)} refused")
    plan = migrate.build_plan(spark, src, dst, disc, cfg, progress)
    outcomes = migrate.apply_plan(dst, plan, args.execute, progress)

    run_id = ledger.new_run_id("migrate")
    ledger_df = ledger.ledger_rows_df(
        spark, migrate.ledger_rows(plan, outcomes, dst), run_id, "migrate", args.execute
    )
    writer = ledger.append(spark, ledger_df, cfg.ledger.path)
    if args.export_dir:
        paths = migrate.export_csv(plan, outcomes, args.export_dir)
        progress(f"exported {len(paths)} CSV files to {args.export_dir}")

    emit(plan.rows, PLAN_COLUMNS, args.output)
    done = [g for g, o in outcomes.items() if o.is_done]
    failed = {g: o for g, o in outcomes.items() if not o.is_done}
    n_parts = sum(1 for r in plan.rows if outcomes[r["group"]].is_done)
    verb = "migrated" if args.execute else "resolved (dry run; re-run with --execute to commit)"
    summary = f"{len(done)} of {len(outcomes)} groups {verb}, {n_parts} partitions"
    for group, outcome in sorted(failed.items()):
        print(f"not migrated: {group}: {outcome.message}", file=sys.stderr)
    print(
        f"{summary}; run {run_id}; ledger {cfg.ledger.path} via {writer}",
        file=sys.stdout if args.output == "table" else sys.stderr,
    )
    return EXIT_OK if not failed else EXIT_INCOMPLETE


def rollback_main(args, cfg, progress) -> int:  # noqa: ANN001
    dst = Cluster.from_config("destination", cfg.destination, cfg.reader.timeout_ms)
    spark = build_session("ferry-migrate-rollback")
    done = rollback.run_rollback(
        spark, dst, cfg.ledger.path, args.rollback, args.execute, progress
    )
    emit(done.rows, rollback.ROLLBACK_COLUMNS, args.output)
    for group, error in sorted(done.errors.items()):
        print(f"not rolled back: {group}: {error}", file=sys.stderr)
    n, failed = len(done.plan), len(done.errors)
    verb = "rolled back" if args.execute else "would be rolled back (dry run)"
    print(
        f"{n - failed} of {n} groups {verb}; run {done.run_id}; via {done.writer}",
        file=sys.stdout if args.output == "table" else sys.stderr,
    )
    return EXIT_OK if not done.errors else EXIT_INCOMPLETE


if __name__ == "__main__":
    sys.exit(run(main))
