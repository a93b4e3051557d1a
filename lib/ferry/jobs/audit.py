"""The `audit` job: how far the destination groups' committed offsets are from exact.

    ./spark-submit.sh audit --config FILE [--group REGEX] [-o table|json|csv] [--quiet]
        [--set KEY=VALUE ...]

Read-only: plans the exact translation of every selected group as `migrate` does (same config,
same statuses, reconcile mode included; groups active on either side are planned too) and
compares it with the offsets each destination group has committed now, one row per group ×
destination partition: EXACT, BEHIND (records delivered again), AHEAD (records skipped),
NO_COMMIT, or the plan's unresolved status. With audit.path the rows are appended to a Delta
table. Exit 0 when no partition of a group that is not live on the destination is AHEAD and
nothing is unresolved, 75 when only PENDING rows stand in the way (run again later), 1
otherwise, 2 for usage or config errors.
"""

from __future__ import annotations

import sys
from datetime import datetime, timezone

from ferry import audit, kafka, migrate
from ferry.cli import (
    ArgumentParser,
    Progress,
    add_common_arguments,
    check_regex,
    emit,
    emit_json_document,
)
from ferry.config import load_config, require, require_shared
from ferry.groups.selection import require_groups
from ferry.session import start_session
from ferry.status import GroupState
from ferry.write.ledger import new_run_id


def parse_args(argv: list[str]):  # noqa: ANN201
    parser = ArgumentParser(prog="audit", description=__doc__.split("\n\n")[0])
    add_common_arguments(parser)
    parser.add_argument(
        "--group", metavar="REGEX", help="only groups whose id also fully matches REGEX"
    )
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    cfg = load_config(args.config, args.set)
    require(cfg, "source", "destination")
    require_shared(cfg, "audit.path")
    check_regex("--group", args.group)
    run_id, audited_at = new_run_id("audit"), datetime.now(timezone.utc)
    progress = Progress(not args.quiet, "audit", run_id)
    src = kafka.Cluster.from_config(cfg, "source")
    dst = kafka.Cluster.from_config(cfg, "destination")
    # The session starts while discovery asks both clusters about every group.
    session = start_session("ferry-audit")

    progress("discovering groups")
    disc = migrate.discover(
        src, dst, cfg, allow_active_source=True, plan_active=True, group_pattern=args.group
    )
    require_groups(disc.groups, "source group", args.group, cfg.groups)
    active = sorted(g for g, s in disc.source_states.items() if GroupState.parse(s).is_active)
    if active:
        progress(
            f"{len(active)} of {len(disc.groups)} source groups are consuming ({active[0]}, ...): "
            "their exact offsets are those of this moment"
        )
    progress(f"{len(disc.groups)} groups selected")
    plan = migrate.build_plan(session, src, dst, disc, cfg, progress)
    spark = session()
    spans = plan.resolved_spans()
    counts = audit.count_records(spark, dst, spans, disc.destination_bounds, cfg, progress)
    rows = audit.audit_rows(
        plan,
        counts,
        disc.destination_states,
        disc.destination_members,
        disc.source_states,
        disc.destination_bounds,
    )
    summary = audit.summarize(rows, disc.groups)

    if args.output == "json":
        head = {"run_id": run_id, "audited_at": audited_at}
        emit_json_document(
            {**head, "exit_code": summary["total"]["exit_code"], "total": summary["total"]},
            {
                "groups": summary["groups"],
                "rows": rows.json_texts(),
            },
            encoded={"rows"},
        )
    else:
        columns = audit.TABLE_COLUMNS if args.output == "table" else audit.ROW_COLUMNS
        emit(rows.rows(), columns, args.output)
    lines = audit.summary_lines(summary)
    # -o json carries the per-group summary itself; stderr keeps the total line only
    for line in lines[-1:] if args.output == "json" else lines:
        print(line, file=sys.stderr)
    # Kept after the output: a table that cannot be written fails the run (exit 1, one line
    # naming it) without losing what the audit found.
    kept = ""
    if cfg.audit.path:
        writer = audit.append(spark, cfg.audit.path, rows.rows(), run_id, audited_at)
        kept = f"; {len(rows.pairs)} rows appended to {cfg.audit.path} via {writer}"
    print(f"run {run_id}{kept}", file=sys.stderr)
    return summary["total"]["exit_code"]
